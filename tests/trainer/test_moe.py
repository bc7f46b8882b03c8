"""The mixture-of-experts feed-forward: grouped matmuls over tokens sorted by expert, equal to
running each expert on its tokens; the load-balancing loss; active-parameter FLOPs."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from config.models import MODELS
from trainer.initialise import init_parameters
from trainer.moe import MoEFeedForward, _padded_bmm, grouped_linear, load_balancing_loss


def per_expert_reference(moe: MoEFeedForward, x: torch.Tensor) -> torch.Tensor:
    tokens = x.reshape(-1, x.shape[-1])
    probs = moe.router(tokens).float().softmax(-1)
    weights, experts = probs.topk(moe.top_k, dim=-1)
    weights = weights / weights.sum(-1, keepdim=True)
    out = torch.zeros_like(tokens)
    for e in range(moe.n_experts):
        rows, slot = (experts == e).nonzero(as_tuple=True)
        h = F.silu(tokens[rows] @ moe.w1[e].T) * (tokens[rows] @ moe.w3[e].T)
        out.index_add_(0, rows, (h @ moe.w2[e].T) * weights[rows, slot, None])
    return out.view_as(x)


def test_experts_on_sorted_tokens_equal_each_expert_on_its_own_tokens():
    torch.manual_seed(0)
    moe = MoEFeedForward(MODELS["tiny-moe"])
    init_parameters(moe, moe.parameter_inits(0.02))
    x = torch.randn(3, 40, 64)
    out, stats = moe(x)
    torch.testing.assert_close(out, per_expert_reference(moe, x))
    assert stats[0].sum() == 3 * 40 * moe.top_k  # every token routed to top_k experts
    torch.testing.assert_close(stats[1].sum(), torch.tensor(120.0))  # probabilities sum to one per token


def test_the_grouped_kernel_and_the_padded_batched_matmul_agree_including_empty_groups():
    torch.manual_seed(0)
    x = torch.randn(48, 64, dtype=torch.bfloat16)
    w = torch.randn(4, 32, 64, dtype=torch.bfloat16)
    counts = torch.tensor([10, 0, 30, 8])
    grouped = grouped_linear(x, w, counts)  # torch._grouped_mm in bf16
    padded = _padded_bmm(x, w, counts)
    expected = torch.cat([x[:10] @ w[0].T, x[10:40] @ w[2].T, x[40:] @ w[3].T])
    torch.testing.assert_close(grouped.float(), expected.float(), rtol=2e-2, atol=2e-1)
    torch.testing.assert_close(padded.float(), expected.float(), rtol=2e-2, atol=2e-1)


def test_uniform_routing_gives_a_balancing_loss_of_top_k():
    cfg = replace(MODELS["tiny-moe"], n_layers=3)
    e, k, tokens = cfg.n_experts, cfg.experts_per_token, 50
    stats = torch.stack([torch.full((e,), tokens * k / e), torch.full((e,), tokens / e)]) * cfg.n_layers
    assert load_balancing_loss(stats, cfg.n_layers, tokens).item() == pytest.approx(k)
    skewed = torch.stack([torch.tensor([tokens * k, 0, 0, 0.0]), torch.tensor([tokens, 0, 0, 0.0])]) * cfg.n_layers
    assert load_balancing_loss(skewed, cfg.n_layers, tokens).item() == pytest.approx(e * k)


def test_the_balancing_loss_reaches_the_router_and_the_training_loss():
    from trainer.model import Transformer
    torch.manual_seed(0)
    model = Transformer(MODELS["tiny-moe"])
    model.init_weights()
    tokens = torch.randint(1024, (2, 16))
    with_aux = model(tokens, tokens)
    model.cfg = replace(model.cfg, router_aux_loss_coef=0.0)
    without = model(tokens, tokens)
    assert with_aux.item() > without.item()
    with_aux.backward()
    assert model.layers["0"].feed_forward.router.weight.grad.abs().sum() > 0
