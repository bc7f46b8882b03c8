"""Hugging Face interop against transformers itself: tiny random configurations built here, saved
with `save_pretrained`, loaded by the trainer; logits and loss must match the transformers
model, an import followed by an export must give back every tensor bit for bit, and a 2-rank
FSDP2 load must compute what a 1-rank load computes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is a pinned test dependency")
from safetensors.torch import load_file  # noqa: E402

from trainer.cli import UsageError  # noqa: E402
from trainer.hf import export, load_hf_weights  # noqa: E402
from trainer.hf_config import from_hf_config, read_config  # noqa: E402
from trainer.llm_job import parse_job  # noqa: E402
from trainer.model import Transformer  # noqa: E402
from trainer_procs import REPO, job_env, run, torchrun_args  # noqa: E402

CPU = SimpleNamespace(device=torch.device("cpu"), is_main=True)
COMMON = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              vocab_size=128, rms_norm_eps=1e-5, max_position_embeddings=256)


def hf_configs():
    return {
        "llama": transformers.LlamaConfig(**COMMON),
        # Scaling that changes this head size's frequencies: original context 32 positions.
        "llama3.1-rope": transformers.LlamaConfig(**COMMON, rope_theta=500000.0, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32}),
        "llama-tied": transformers.LlamaConfig(**COMMON, tie_word_embeddings=True),
        "mistral-sliding": transformers.MistralConfig(**COMMON, sliding_window=8, rope_theta=1e6),
        "mixtral": transformers.MixtralConfig(**COMMON, num_local_experts=4, num_experts_per_tok=2,
                                              router_aux_loss_coef=0.02, output_router_logits=True,
                                              sliding_window=None),
    }


def save_hf(kind: str, directory: Path, seed: int = 0):
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(hf_configs()[kind], dtype=torch.float32)
    with torch.no_grad():  # transformers' default init leaves norms at 1: make them matter
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    model.save_pretrained(directory)
    return model.eval()


def ours(directory: Path) -> Transformer:
    model = Transformer(from_hf_config(read_config(directory)))
    load_hf_weights(model, directory, CPU)
    return model.eval()


@pytest.mark.parametrize("kind", list(hf_configs()))
def test_logits_and_loss_match_transformers(kind, tmp_path):
    hf = save_hf(kind, tmp_path)
    model = ours(tmp_path)
    tokens = torch.randint(0, 128, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(input_ids=tokens, labels=tokens)
        logits = model(tokens)
        # transformers shifts the labels itself; ours are the next tokens, -100 past the end.
        labels = torch.cat([tokens[:, 1:], torch.full((2, 1), -100)], dim=1)
        loss = model(tokens, labels)
    torch.testing.assert_close(logits, expected.logits, rtol=1e-5, atol=2e-5)
    torch.testing.assert_close(loss, expected.loss, rtol=1e-5, atol=1e-6)
    if kind == "mixtral":
        assert expected.aux_loss > 0  # the load-balancing term is part of the compared loss
    if kind == "mistral-sliding":
        assert tokens.shape[1] > model.cfg.sliding_window  # the window actually masks


def test_rope_scaling_comes_from_the_checkpoint_not_constants(tmp_path):
    save_hf("llama3.1-rope", tmp_path)
    cfg = from_hf_config(read_config(tmp_path))
    assert cfg.rope_scaling.original_max_position == 32 and cfg.rope_scaling.factor == 8.0
    v5 = json.loads((tmp_path / "config.json").read_text())  # transformers 5 writes rope_parameters
    assert "rope_parameters" in v5
    legacy = {k: v for k, v in v5.items() if k != "rope_parameters"}
    legacy.update(rope_theta=500000.0, rope_scaling={"type": "llama3", "factor": 2.0, "low_freq_factor": 1.0,
                                                     "high_freq_factor": 2.0, "original_max_position_embeddings": 64})
    assert from_hf_config(legacy).rope_scaling.factor == 2.0
    legacy["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}
    with pytest.raises(UsageError, match="rope_scaling.rope_type 'yarn' is not supported"):
        from_hf_config(legacy)


@pytest.mark.parametrize("kind", ["llama-tied", "mixtral"])
def test_import_then_export_gives_back_every_tensor_bit_for_bit(kind, tmp_path):
    import torch.distributed.checkpoint as dcp
    src, ckpt, out = tmp_path / "hf", tmp_path / "ckpt", tmp_path / "out"
    save_hf(kind, src)
    from tokenizers import Tokenizer, models

    # Stands for the tokenizer files next to the weights: export checks its ids against the model's.
    tokenizer = Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>")).to_str()
    (src / "tokenizer.json").write_text(tokenizer)
    model = ours(src)
    step = ckpt / "step-00000001"
    dcp.save({"app": {"model": model.state_dict()}}, checkpoint_id=str(step), no_dist=True)
    (step / "COMPLETE").write_text("1\n")
    (ckpt / "model.json").write_text(json.dumps({"model": model.cfg.to_dict(), "init_from_hf": str(src)}))
    export(ckpt, out, torch.float32, max_shard_gb=0.0001)  # tiny shards: the index must stitch them
    original = load_file(src / "model.safetensors")
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    assert set(index) == set(original) and len(set(index.values())) > 1
    exported = {}
    for f in set(index.values()):
        exported.update(load_file(out / f))
    for name, tensor in original.items():
        assert exported[name].dtype == tensor.dtype and torch.equal(exported[name], tensor), name
    assert (out / "tokenizer.json").read_text() == tokenizer
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out)
    assert type(reloaded).__name__ == type(transformers.AutoModelForCausalLM.from_config(hf_configs()[kind])).__name__


def test_export_refuses_a_non_empty_output_and_writes_nothing_half(tmp_path):
    with pytest.raises(UsageError, match="--checkpoint: .* holds no complete checkpoint"):
        export(tmp_path, tmp_path / "out", torch.float32)
    assert not (tmp_path / "out").exists()


def test_a_conflicting_model_is_an_error_naming_the_field(tmp_path):
    save_hf("llama", tmp_path)
    with pytest.raises(UsageError) as err:
        parse_job(["--init-from-hf", str(tmp_path), "--model", "tiny"])
    assert str(err.value).startswith("--model: tiny has vocab_size 1024 but") and "gives 128" in str(err.value)
    job = parse_job(["--init-from-hf", str(tmp_path), "--seq-len", "32"])
    assert job.model.shape.ffn_dim == 96 and job.model.init_from_hf == str(tmp_path)


@pytest.mark.parametrize("damage", ["empty", "truncated", "index not JSON", "index without weight_map"])
def test_weights_that_do_not_load_are_one_usage_error_naming_init_from_hf(damage, tmp_path):
    """Before, an empty or truncated model.safetensors (a copy cut short) ended trainer.llm in a
    SafetensorError traceback, and a damaged index in a JSONDecodeError or KeyError one."""
    save_hf("llama", tmp_path)
    weights = tmp_path / "model.safetensors"
    if damage == "empty":
        weights.write_bytes(b"")
    elif damage == "truncated":
        weights.write_bytes(weights.read_bytes()[:5000])
    elif damage == "index not JSON":
        (tmp_path / "model.safetensors.index.json").write_text("{")
    else:
        (tmp_path / "model.safetensors.index.json").write_text('{"metadata": {}}')
    with pytest.raises(UsageError) as err:
        ours(tmp_path)
    assert str(err.value).startswith("--init-from-hf: ") and str(tmp_path) in str(err.value)


@pytest.mark.parametrize("name", ["../elsewhere/model.safetensors", "{elsewhere}", "model\0.safetensors", 7])
def test_an_index_naming_a_weights_file_outside_the_folder_is_one_usage_error_naming_init_from_hf(name, tmp_path):
    """The index sits on shared storage: a weight_map entry that climbs out of the folder ('..',
    an absolute path) loaded another directory's weights without a word."""
    src, elsewhere = tmp_path / "hf", tmp_path / "elsewhere"
    save_hf("llama", src)
    save_hf("llama", elsewhere, seed=1)
    name = name.format(elsewhere=elsewhere / "model.safetensors") if isinstance(name, str) else name
    names = load_file(src / "model.safetensors")
    index = {"metadata": {}, "weight_map": {t: "model.safetensors" for t in names}}
    index["weight_map"]["model.norm.weight"] = name
    (src / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(UsageError) as err:
        ours(src)
    assert str(err.value) == (f"--init-from-hf: {src / 'model.safetensors.index.json'}: weight_map must name files "
                              f"in its own folder (no '/', '.' or '..'), got {name!r} for model.norm.weight")


def test_an_index_naming_a_weights_file_that_is_a_named_pipe_is_one_usage_error_not_waited_on(tmp_path):
    """safetensors opened the file with open(), which waits for the pipe's writer for ever: trainer.llm
    hung without a line. In a process of its own: open() in Rust retries after a signal, so no
    deadline in this process could end the wait."""
    save_hf("llama", tmp_path)
    shard = tmp_path / "model-00001-of-00001.safetensors"
    index = {"metadata": {}, "weight_map": {t: shard.name for t in load_file(tmp_path / "model.safetensors")}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    os.mkfifo(shard)
    script = ("import sys; from pathlib import Path; from trainer.cli import run_main; from trainer.hf import "
              "SafetensorsDirectory; run_main(lambda: SafetensorsDirectory(Path(sys.argv[1])).shape('lm_head.weight'))")
    p = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=REPO, env=job_env(), capture_output=True,
                       text=True, timeout=60)
    assert (p.returncode, p.stderr) == (2, f"error: --init-from-hf: {shard} is a named pipe, expected a regular file\n")


SCRIPT = r"""
import sys, torch
from trainer import dist as tdist
from trainer.hf import load_hf_weights
from trainer.hf_config import from_hf_config, read_config
from trainer.parallel import build_decoder
from pathlib import Path
rt = tdist.init()
tokens = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(3))
for directory in sys.argv[2:]:
    model = build_decoder(from_hf_config(read_config(Path(directory))), rt)
    load_hf_weights(model, directory, rt)
    with torch.no_grad():
        logits = model(tokens)
    if rt.is_main:
        torch.save(logits, f"{sys.argv[1]}-{Path(directory).name}.pt")
tdist.shutdown()
# As the trainers end (trainer.cli.exit_without_finalization): a plain interpreter exit here met a
# gloo thread once in a full-suite run ("terminate called without an active exception", SIGABRT).
from trainer.cli import exit_without_finalization
exit_without_finalization(0)
"""


@pytest.mark.slow
def test_a_two_rank_fsdp2_load_computes_what_a_one_rank_load_computes(tmp_path):
    dirs = []
    for kind in ("llama-tied", "mixtral"):
        save_hf(kind, tmp_path / kind)
        dirs.append(str(tmp_path / kind))
    script = tmp_path / "load.py"
    script.write_text(SCRIPT)
    for nproc in (1, 2):
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                str(script), str(tmp_path / f"n{nproc}"), *dirs]
        rc, out = run(argv)
        assert rc == 0, out
    for kind in ("llama-tied", "mixtral"):
        one, two = (torch.load(tmp_path / f"n{n}-{kind}.pt", weights_only=True) for n in (1, 2))
        torch.testing.assert_close(two, one, rtol=1e-5, atol=1e-5)
        assert one.abs().max() > 0


@pytest.mark.slow
def test_our_checkpoints_take_precedence_over_init_from_hf_once_one_exists(tmp_path):
    save_hf("llama", tmp_path / "hf")
    common = ["-m", "trainer.llm", "--init-from-hf", str(tmp_path / "hf"), "--seq-len", "32", "--batch-size", "2",
              "--checkpoint-dir", str(tmp_path / "ckpt"), "--checkpoint-every", "2", "--log-every", "2"]
    first = subprocess.run([sys.executable, *common, "--steps", "2"], cwd=REPO, env=job_env(), capture_output=True,
                           text=True, timeout=120)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "Initialised" in first.stdout and "Resumed" not in first.stdout
    second = subprocess.run([sys.executable, *common, "--steps", "4"], cwd=REPO, env=job_env(), capture_output=True,
                            text=True, timeout=120)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "Resumed from checkpoint" in second.stdout and "Initialised" not in second.stdout


@pytest.mark.parametrize("field, value", [("num_hidden_layers", 0), ("hidden_size", -64), ("vocab_size", 0),
                                          ("intermediate_size", 0), ("max_position_embeddings", 0),
                                          ("rope_theta", float("nan")), ("rope_theta", 0.0),
                                          ("rms_norm_eps", float("inf")), ("rms_norm_eps", -1e-5)])
def test_a_config_json_with_an_impossible_value_is_one_usage_error_naming_the_file_and_field(field, value):
    """0 layers trained a model that ignored every layer's weights on disk; a NaN rope_theta skipped
    every step as non-finite and exited 0; an infinite rms_norm_eps trained with zero gradient."""
    from config.models import MODELS
    from trainer.hf_config import to_hf_config

    config = {**to_hf_config(MODELS["tiny"], "float32"), "head_dim": None, field: value}
    with pytest.raises(UsageError) as err:
        from_hf_config(config, "--init-from-hf: DIR/config.json")
    assert str(err.value).startswith(f"--init-from-hf: DIR/config.json: {field} must be "), str(err.value)


def test_weights_on_disk_that_no_parameter_reads_are_a_usage_error_naming_them(tmp_path):
    """A config.json of 1 layer beside weights of 2 trained a model of the first layer only and
    dropped the second without a word."""
    save_hf("llama", tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))
    with pytest.raises(UsageError) as err:
        ours(tmp_path)
    assert str(err.value).startswith(f"--init-from-hf: {tmp_path} holds 9 tensors that no parameter of the model "
                                     "reads (model.layers.1."), str(err.value)


def test_rotary_frequencies_and_a_tied_output_layer_on_disk_are_not_weights_left_unread(tmp_path):
    """Older conversions save rotary_emb.inv_freq buffers, and some tied checkpoints keep lm_head
    beside the embedding it shares: neither is a weight the model leaves behind."""
    from safetensors.torch import save_file
    hf = save_hf("llama-tied", tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
    tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(8)
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    torch.testing.assert_close(ours(tmp_path).tok_embeddings.weight, hf.model.embed_tokens.weight)


def _four_gib_address_space():
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # an unfixed trainer fails fast, not the machine


def test_a_config_json_claiming_sizes_its_weights_do_not_have_stops_trainer_llm_in_one_line_before_any_allocation(
        tmp_path):
    """Before, trainer.llm built the model of config.json's sizes before any shape was compared with
    the weights: hidden_size 2^20 ended in 'DefaultCPUAllocator: can't allocate memory' (exit 1),
    and a claim just under the machine's RAM was allocated and OOM-killed."""
    save_hf("llama", tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "hidden_size": 2**20, "intermediate_size": 2**20,
                                                      "head_dim": None}))
    done = subprocess.run([sys.executable, "-m", "trainer.llm", "--init-from-hf", str(tmp_path), "--steps", "1",
                           "--seq-len", "32", "--batch-size", "2"], cwd=REPO, env=job_env(), capture_output=True,
                          text=True, timeout=120, preexec_fn=_four_gib_address_space)
    assert (done.returncode, done.stderr) == (2, (
        f"error: --init-from-hf: {tmp_path / 'config.json'}: hidden_size 1048576 does not fit the weights: "
        f"model.embed_tokens.weight in {tmp_path / 'model.safetensors'} has shape (128, 64), the config makes it "
        "(128, 1048576)\n"))


@pytest.mark.parametrize("kind, changes, message", [
    ("llama", {"intermediate_size": 2**20}, "intermediate_size 1048576 does not fit the weights: "
     "model.layers.0.mlp.gate_proj.weight in {weights} has shape (96, 64), the config makes it (1048576, 64)"),
    ("llama", {"vocab_size": 2**30}, "vocab_size 1073741824 does not fit the weights: model.embed_tokens.weight in "
     "{weights} has shape (128, 64), the config makes it (1073741824, 64)"),
    ("llama", {"num_key_value_heads": 4}, "num_key_value_heads 4 with num_attention_heads 4 does not fit the "
     "weights: model.layers.0.self_attn.k_proj.weight in {weights} has shape (32, 64), the config makes it (64, 64)"),
    # Llama 2's config.json has no head_dim: a wrong head count changes only the k/v rows (heads x
    # head_dim is hidden_size, so q keeps its shape), which a wrong kv head count explains as well.
    ("llama", {"num_attention_heads": 8, "head_dim": None}, "num_key_value_heads 2 with num_attention_heads 8 does "
     "not fit the weights: model.layers.0.self_attn.k_proj.weight in {weights} has shape (32, 64), the config makes "
     "it (16, 64)"),
    ("llama", {"num_hidden_layers": 2**30}, "num_hidden_layers is 1073741824 but {dir} holds no "
     "model.layers.1073741823.input_layernorm.weight"),
    ("mixtral", {"num_local_experts": 2**30}, "num_local_experts is 1073741824 but {dir} holds no "
     "model.layers.0.block_sparse_moe.experts.1073741823.w1.weight"),
])
def test_a_config_json_its_weights_do_not_fit_is_refused_from_the_headers_naming_the_field(kind, changes, message,
                                                                                            tmp_path):
    """Counts first (a billion layers would make a billion modules, even on the meta device), then
    each tensor's shape as the safetensors header gives it; no weight is read."""
    from trainer.hf import check_hf_weights

    save_hf(kind, tmp_path)
    config = {**json.loads((tmp_path / "config.json").read_text()), **changes}
    if kind == "mixtral":
        config["num_experts_per_tok"] = 2
    with pytest.raises(UsageError) as err:
        check_hf_weights(tmp_path, from_hf_config(config))
    assert str(err.value) == f"--init-from-hf: {tmp_path / 'config.json'}: " + message.format(
        weights=tmp_path / "model.safetensors", dir=tmp_path)
    check_hf_weights(tmp_path, from_hf_config(read_config(tmp_path)))  # the directory as saved fits
