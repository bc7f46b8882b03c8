"""--float8 (trainer/float8.py): refused in one line where the GPU lacks float8 matmuls, a CPU
included; which linear layers become torchao Float8Linear and which stay as they are. Two CPU
ranks training with float8 all-gathers are in test_parallel.py."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from config.models import MODELS
from config.presets import PRESETS, SIZED_FOR
from trainer.float8 import convert_to_float8, is_float8_linear, refusal
from trainer.model import Transformer
from trainer_procs import REPO, job_env

DENSE_LINEARS = ("attention.wq", "attention.wk", "attention.wv", "attention.wo", "feed_forward.w1",
                 "feed_forward.w3", "feed_forward.w2")  # in module order


def meta_model(cfg) -> Transformer:
    with torch.device("meta"):
        return Transformer(cfg)


def test_the_trainer_refuses_float8_without_a_gpu_in_one_line_and_exit_2():
    p = subprocess.run([sys.executable, "-m", "trainer.llm", "--float8", "--steps", "1"], cwd=REPO, env=job_env(),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr.splitlines() == [
        "error: --float8: float8 matmuls need an NVIDIA GPU of compute capability 8.9 or newer (H100, H200: p5, p5e, "
        "p5en); this run has no GPU"]
    assert "torchao" not in p.stderr  # refused before anything imports it


@pytest.mark.parametrize("capability, refused", [((8, 0), True), ((8, 6), True), ((8, 9), False), ((9, 0), False),
                                                 ((10, 0), False)])
def test_float8_needs_compute_capability_8_9(capability, refused):
    problem = refusal("cuda", capability, "NVIDIA A100-SXM4-40GB")
    assert (problem is not None) == refused
    if refused:
        assert f"NVIDIA A100-SXM4-40GB has {capability[0]}.{capability[1]}" in problem


def test_the_decoder_projections_become_float8_and_the_output_and_embedding_do_not():
    cfg = MODELS["tiny"]
    model = meta_model(cfg)
    converted = convert_to_float8(model, all_gather_in_float8=False)
    assert converted == [f"layers.{i}.{name}" for i in range(cfg.n_layers) for name in DENSE_LINEARS]
    assert type(model.output) is torch.nn.Linear and type(model.tok_embeddings) is torch.nn.Embedding
    assert all(type(p) is torch.nn.Parameter for p in model.parameters())  # nothing to all-gather in float8


def test_a_tied_output_stays_bf16_and_tied():
    model = meta_model(replace(MODELS["tiny"], tie_embeddings=True))
    convert_to_float8(model, all_gather_in_float8=True)
    assert not is_float8_linear(model.output) and model.output.weight is model.tok_embeddings.weight


def test_the_router_and_the_stacked_experts_stay_as_they_are():
    model = meta_model(MODELS["tiny-moe"])
    converted = convert_to_float8(model, all_gather_in_float8=False)
    assert converted == [f"layers.{i}.attention.{p}" for i in range(2) for p in ("wq", "wk", "wv", "wo")]
    assert all(type(block.feed_forward.router) is torch.nn.Linear for block in model.layers.values())


def test_a_linear_whose_dimensions_are_not_multiples_of_16_stays_as_it_is():
    model = meta_model(replace(MODELS["tiny"], ffn_dim=200))  # 200 = 12 x 16 + 8
    converted = convert_to_float8(model, all_gather_in_float8=False)
    assert converted == [f"layers.{i}.attention.{p}" for i in range(2) for p in ("wq", "wk", "wv", "wo")]


def test_with_float8_all_gather_the_converted_weights_are_torchaos_float8_cast_tensors():
    model = meta_model(MODELS["tiny"])
    convert_to_float8(model, all_gather_in_float8=True)
    wrapped = {n for n, p in model.named_parameters() if type(p).__name__ == "WeightWithDynamicFloat8CastTensor"}
    assert wrapped == {f"layers.{i}.{name}.weight" for i in range(2) for name in DENSE_LINEARS}


def test_no_preset_asks_for_float8_on_a_gpu_without_it():
    for preset in PRESETS.values():
        if getattr(preset.workload, "float8", False):
            from config.instance_types import INSTANCE_TYPES
            assert INSTANCE_TYPES[SIZED_FOR[preset.nodegroup]].gpu_model in ("H100", "H200"), preset.name


def test_selective_checkpointing_of_float8_blocks_gives_the_same_gradients_and_recomputes_no_matmul():
    # CPUs run float8 matmuls (torch._scaled_mm), so the checkpointing policy's float8 entries
    # (the scaled matmul and the amax of each scale) can be run here.
    class Matmuls(TorchDispatchMode):
        """mm calls; a float8 one reaches torch._scaled_mm inside torchao's tensor subclass."""
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.count += func in (torch.ops.aten.mm.default, torch.ops.aten._scaled_mm.default)
            return func(*args, **(kwargs or {}))

    tokens = torch.randint(1024, (2, 32), generator=torch.Generator().manual_seed(0))
    grads, matmuls = {}, {}
    for mode in ("none", "selective", "full"):
        model = Transformer(MODELS["tiny"])
        model.init_weights(seed=1)
        convert_to_float8(model, all_gather_in_float8=False)
        for block in model.layers.values():
            block.activation_checkpointing = mode
        loss = model(tokens, tokens)
        with Matmuls() as counter:
            loss.backward()
        grads[mode], matmuls[mode] = {n: p.grad for n, p in model.named_parameters()}, counter.count
    for mode in ("selective", "full"):
        for name, grad in grads["none"].items():
            torch.testing.assert_close(grads[mode][name], grad, rtol=1e-5, atol=1e-6, msg=f"{mode}: {name}")
    # Backward of each linear is two matmuls; full recomputes the forward's one too. The 14 float8
    # linears are the two blocks' projections (the output layer's matmuls are outside the blocks).
    assert matmuls["full"] - matmuls["none"] == 14 and matmuls["selective"] == matmuls["none"]
