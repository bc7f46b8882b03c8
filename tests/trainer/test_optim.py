"""trainer.optim: the LLM's step schedule and the vision recipe's image-driven one."""

from __future__ import annotations

import pytest

from config.workloads.llm import AdamWConfig
from config.workloads.vision import SgdConfig
from trainer.optim import image_learning_rate, warmup_cosine


def test_warmup_then_cosine_to_the_floor():
    f = warmup_cosine(AdamWConfig(warmup_steps=10), total_steps=110)  # the floor: min_lr_ratio 0.1
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(60) == pytest.approx(0.55) and f(110) == pytest.approx(0.1) and f(500) == pytest.approx(0.1)
    assert all(f(s) >= f(s + 1) for s in range(10, 110))


def test_the_rate_scales_with_the_global_batch_warms_up_and_decays_to_zero():
    cfg = SgdConfig(lr=0.1, warmup_epochs=1)  # the rate per 256 images
    epoch = 1000
    assert image_learning_rate(cfg, 10, 512, epoch, epoch) == pytest.approx(0.2)  # peak = 0.1 * 512/256
    # Warm-up as trainer.optim's step schedule counts it: the first batch gets batch/warm-up of the peak.
    assert image_learning_rate(cfg, 10, 512, 0, epoch) == pytest.approx(0.2 * 512 / epoch)
    assert image_learning_rate(cfg, 10, 512, 10 * epoch, epoch) == pytest.approx(0.0, abs=1e-9)
    # The clock is images seen: the same point of the run gives the same shape at another size.
    assert image_learning_rate(cfg, 10, 256, 5 * epoch, epoch) * 2 == pytest.approx(
        image_learning_rate(cfg, 10, 512, 5 * epoch, epoch))


def test_sgd_is_fused_on_cpu_and_steps_as_the_per_tensor_loop_does():
    """torch 2.13 has a fused SGD kernel for CPU and CUDA (trainer/optim.py FUSED_SGD_DEVICES);
    it must update exactly as the reference loop, weight decay skipped on biases included."""
    import torch

    from trainer.optim import build_sgd

    def trained(fused: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5), torch.nn.Linear(5, 3))
        optimizer = build_sgd(model, SgdConfig(weight_decay=0.01))
        if not fused:
            for group in optimizer.param_groups:
                group["fused"], group["foreach"] = False, False
        for step in range(3):
            optimizer.zero_grad(set_to_none=True)
            model(torch.randn(8, 6, generator=torch.Generator().manual_seed(step))).square().mean().backward()
            optimizer.step()
        assert [g["fused"] for g in optimizer.param_groups] == [fused, fused]
        return [p.detach().clone() for p in model.parameters()]

    for a, b in zip(trained(True), trained(False)):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
