"""A small random model written as a Hugging Face directory (weights, config, a byte-level BPE
tokenizer trained on the spot), and a check that a directory loads and runs in transformers.

`make local JOB=llm-tiny-hf` starts from the first and ends with the second; no hub, no network.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from config.models import MODELS
from trainer.cli import UsageError
from trainer.hf_config import hf_names, read_config, to_hf_config

_CORPUS = ("The cluster trains language models on GPU nodes. Each worker reads its own shard of tokens, "
           "computes gradients, and the ranks average them. Checkpoints are written to FSx for Lustre. ")


def write_tiny(out: Path, model: str = "tiny", seed: int = 0) -> None:
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from trainer.model import Transformer
    if model not in MODELS:
        raise UsageError("--model", f"unknown model {model!r}; the table has {', '.join(MODELS)}")
    cfg = MODELS[model]
    out.mkdir(parents=True, exist_ok=True)
    net = Transformer(cfg)
    net.init_weights(seed=seed)
    tensors = {}
    params = dict(net.named_parameters())
    for ours, theirs in hf_names(cfg).items():
        parts = params[ours].detach().unbind(0) if len(theirs) > 1 else (params[ours].detach(),)
        tensors.update({name: part.contiguous() for name, part in zip(theirs, parts)})
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(to_hf_config(cfg, "float32"), indent=2) + "\n")

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<s>", "</s>"]
    tok.train_from_iterator([_CORPUS] * 50, trainers.BpeTrainer(
        vocab_size=min(cfg.vocab_size, 512), special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>"}, indent=2) + "\n")


def verify(directory: Path) -> str:
    """Load `directory` with transformers, run a short prompt, return a one-line report."""
    from trainer.torchvision_compat import prepare
    prepare()  # transformers imports torchvision when it is installed
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise UsageError("verify", "needs the transformers package (pip install -r requirements.txt)") from None
    config = read_config(directory, "verify")
    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32)
    if (directory / "tokenizer.json").is_file():
        ids = AutoTokenizer.from_pretrained(str(directory))("Checkpoints are written to FSx",
                                                            return_tensors="pt")["input_ids"]
    else:
        ids = torch.arange(8)[None] % config["vocab_size"]
    with torch.no_grad():
        logits = model(ids).logits
    if not torch.isfinite(logits).all():
        raise UsageError("verify", f"{directory} loads but its logits are not finite")
    n = sum(p.numel() for p in model.parameters())
    return (f"Hugging Face export {directory.resolve()} loads in transformers: {type(model).__name__}, "
            f"{n:,} parameters, logits {tuple(logits.shape)} finite")
