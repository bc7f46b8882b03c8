"""Activation checkpointing none, selective and full (trainer/activation_checkpointing.py): the same
loss and gradients in every mode; selective keeps less than none and more than full, and
recomputes the cheap ops only, where full recomputes every block's matmuls too."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from activations import bytes_held_for_backward
from config.models import MODELS
from trainer.activation_checkpointing import CHECKPOINTING_MODES, run_checkpointed
from trainer.llm_job import parse_job
from trainer.model import Transformer

MODES = CHECKPOINTING_MODES
SHAPE = (2, 64)


def model_in_mode(name: str, mode: str, *, vocab: int = 256) -> Transformer:
    torch.manual_seed(0)
    model = Transformer(replace(MODELS[name], vocab_size=vocab))
    model.init_weights(seed=3)
    for block in model.layers.values():
        block.activation_checkpointing = mode
    return model


def tokens(vocab: int = 256) -> torch.Tensor:
    return torch.randint(vocab, SHAPE, generator=torch.Generator().manual_seed(1))


class _OpCount(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def backward_cost(name: str, mode: str) -> tuple[int, int]:
    """(FLOPs, aten ops) of one backward pass: recomputation shows up in both."""
    model = model_in_mode(name, mode)
    loss = model(tokens(), tokens())
    with FlopCounterMode(display=False) as flops, _OpCount() as ops:
        loss.backward()
    return flops.get_total_flops(), ops.ops


@pytest.mark.parametrize("name", ["tiny", "tiny-moe"])
def test_every_mode_gives_the_same_loss_and_gradients(name):
    results = {}
    for mode in MODES:
        model = model_in_mode(name, mode)
        loss = model(tokens(), tokens())
        loss.backward()
        results[mode] = (loss.detach(), {n: p.grad for n, p in model.named_parameters()})
    loss, grads = results["none"]
    for mode in ("selective", "full"):
        assert torch.equal(results[mode][0], loss), mode
        for n, g in grads.items():
            torch.testing.assert_close(results[mode][1][n], g, rtol=1e-6, atol=1e-7, msg=f"{mode}: {n}")


@pytest.mark.parametrize("name", ["tiny", "tiny-moe"])
def test_selective_keeps_less_than_none_and_more_than_full(name):
    held = {mode: bytes_held_for_backward(model_in_mode(name, mode), tokens()) for mode in MODES}
    assert held["full"] < held["selective"] < 0.75 * held["none"], held


@pytest.mark.parametrize("name", ["tiny", "tiny-moe"])
def test_selective_recomputes_no_matmul_and_less_than_full(name):
    (none_flops, none_ops), (sel_flops, sel_ops), (full_flops, full_ops) = (backward_cost(name, m) for m in MODES)
    assert sel_flops == none_flops  # only elementwise ops are redone
    assert none_ops < sel_ops < full_ops
    # Full redoes each block's forward: its matmuls and attention are half of what the blocks'
    # backward costs, so the backward grows by at least a third of the blocks' share.
    assert full_flops > 1.3 * none_flops


def test_selective_checkpointing_traces_under_torch_compile():
    model = model_in_mode("tiny", "selective")
    reference = model_in_mode("tiny", "none")
    for block in model.layers.values():
        block.compile(backend="aot_eager")  # the partitioner's path without a C++ compiler
    for m in (model, reference):
        m(tokens(), tokens()).backward()
    for (n, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=n)


def test_an_unknown_mode_is_an_error_not_silently_none():
    with pytest.raises(ValueError, match="none, selective, full"):
        run_checkpointed(lambda x: x * 2, "some", torch.ones(2, requires_grad=True))


@pytest.mark.parametrize("argv, mode", [([], "none"), (["--activation-checkpointing"], "full"),
                                        (["--activation-checkpointing", "--steps", "3"], "full"),
                                        (["--activation-checkpointing", "selective"], "selective"),
                                        (["--activation-checkpointing=none"], "none")])
def test_the_flag_alone_still_means_full(argv, mode):
    assert parse_job(argv).efficiency.activation_checkpointing == mode
