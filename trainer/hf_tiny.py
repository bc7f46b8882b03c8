"""A small random model written as a Hugging Face directory (weights, config, a byte-level BPE
tokenizer trained on the spot), and a check that a directory loads and runs in transformers.

`make local JOB=llm-tiny-hf` starts from the first and ends with the second; no hub, no network.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from config.models import MODELS
from config.paths import file_status, input_dir, output_dir
from trainer.cli import UsageError, checked_path
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
    checked_path("--out", output_dir, out)
    net = Transformer(cfg)
    net.init_weights(seed=seed)
    tensors = {}
    params = dict(net.named_parameters())
    for ours, theirs in hf_names(cfg).items():
        parts = params[ours].detach().unbind(0) if len(theirs) > 1 else (params[ours].detach(),)
        tensors.update({name: part.contiguous() for name, part in zip(theirs, parts)})
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})

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
    token_ids = {"bos_token_id": tok.token_to_id("<s>"), "eos_token_id": tok.token_to_id("</s>")}
    (out / "config.json").write_text(json.dumps(to_hf_config(cfg, "float32", token_ids), indent=2) + "\n")


def verify(directory: Path) -> str:
    """Load `directory` with transformers, run a short prompt, return a one-line report."""
    from trainer.torchvision_compat import prepare
    prepare()  # transformers imports torchvision when it is installed
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise UsageError("DIRECTORY", "verify needs the transformers package (pip install -r requirements.txt)") from None
    checked_path("DIRECTORY", input_dir, directory)
    for entry in sorted(directory.iterdir()):  # transformers opens the weights with open(): a named pipe waits for ever
        if not entry.is_dir():
            checked_path("DIRECTORY", file_status, entry)
    config = read_config(directory, "DIRECTORY")
    tokenizer = None
    try:
        # An auto_map in config.json or tokenizer_config.json names a Python file for transformers to
        # import; left to decide, it asks on stdin. An export of ours carries no code: refuse it.
        model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32, trust_remote_code=False)
        if (directory / "tokenizer.json").is_file():
            tokenizer = AutoTokenizer.from_pretrained(str(directory), trust_remote_code=False)
            ids = tokenizer("Checkpoints are written to FSx", return_tensors="pt")["input_ids"]
        else:
            ids = torch.arange(8)[None] % int(config.get("vocab_size", 1))
        with torch.no_grad():
            logits = model(ids).logits
    except Exception as exc:  # whatever transformers or safetensors raise: the verdict is one line
        reason = (str(exc).strip().splitlines() or [""])[0][:200]
        raise UsageError("DIRECTORY", f"{directory} does not load and run in transformers "
                                   f"({type(exc).__name__}: {reason})") from None
    if not torch.isfinite(logits).all():
        raise UsageError("DIRECTORY", f"{directory} loads but its logits are not finite")
    for kind in ("bos", "eos"):  # generation stops on the config's eos: it must be the tokenizer's
        said, actual = config.get(f"{kind}_token_id"), getattr(tokenizer, f"{kind}_token_id", None)
        if tokenizer is not None and actual is not None and actual != said and not (
                isinstance(said, list) and actual in said):
            raise UsageError("DIRECTORY", f"{directory}/config.json has {kind}_token_id {said!r}, its tokenizer's "
                                       f"{kind} token is {actual}")
    n = sum(p.numel() for p in model.parameters())
    return (f"Hugging Face export {directory.resolve()} loads in transformers: {type(model).__name__}, "
            f"{n:,} parameters, logits {tuple(logits.shape)} finite")
