"""A sparse mixture-of-experts feed-forward (Mixtral's): a router picks the top-k of E SwiGLU
experts per token, and the experts' outputs are summed with the renormalised router weights.

Tokens are sorted by expert and each expert's weights multiply its contiguous group of rows in
one grouped matmul (`torch._grouped_mm`, no host synchronisation) or, where that kernel is not
available (float32 on CPU), one batched matmul over the groups padded to the largest: never a
Python loop over tokens. Expert weights are stacked (E, out, in) so FSDP2 shards them as single
parameters.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from config.models import ModelConfig
from trainer.initialise import Init, truncated_normal


def _grouped_mm_supported(x: torch.Tensor) -> bool:
    # torch's grouped GEMM takes bf16 on CUDA and CPU; float32 inputs fail its stride checks on
    # CPU in torch 2.13 ("Invalid strides/sizes"), so they take the padded batched path.
    return hasattr(torch, "_grouped_mm") and x.dtype == torch.bfloat16


def grouped_linear(x: torch.Tensor, weight: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Rows of `x` sorted by group (group g has counts[g] rows) times weight[g].T per group.

    x: (N, in), weight: (G, out, in), counts: (G,) int; returns (N, out)."""
    if _grouped_mm_supported(x):
        offsets = torch.cumsum(counts, 0, dtype=torch.int32)
        return torch._grouped_mm(x, weight.transpose(-2, -1), offs=offsets)
    return _padded_bmm(x, weight, counts)


def _padded_bmm(x: torch.Tensor, weight: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    groups = weight.shape[0]
    capacity = int(counts.max()) if x.shape[0] else 0  # a host sync: this path runs on CPU
    starts = torch.cumsum(counts, 0) - counts
    group_of_row = torch.repeat_interleave(torch.arange(groups, device=x.device), counts, output_size=x.shape[0])
    slot = torch.arange(x.shape[0], device=x.device) - starts[group_of_row]
    padded = x.new_zeros(groups, capacity, x.shape[1])
    padded[group_of_row, slot] = x
    out = torch.bmm(padded, weight.transpose(-2, -1))
    return out[group_of_row, slot]


class MoEFeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_experts, self.top_k = cfg.n_experts, cfg.experts_per_token
        self.router = nn.Linear(cfg.dim, cfg.n_experts, bias=False)
        self.w1 = nn.Parameter(torch.empty(cfg.n_experts, cfg.ffn_dim, cfg.dim))  # gate
        self.w3 = nn.Parameter(torch.empty(cfg.n_experts, cfg.ffn_dim, cfg.dim))  # up
        self.w2 = nn.Parameter(torch.empty(cfg.n_experts, cfg.dim, cfg.ffn_dim))  # down

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's output and its router statistics, a (2, E) fp32 tensor: top-k assignments
        per expert, and the sum over tokens of each expert's router probability."""
        tokens = x.reshape(-1, x.shape[-1])
        probs = self.router(tokens).float().softmax(dim=-1)
        weights, experts = probs.topk(self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)  # Mixtral renormalises the top-k
        flat = experts.reshape(-1)
        # Counted with a scatter, not bincount: bincount's output size needs a host sync on GPU.
        counts = torch.zeros(self.n_experts, dtype=torch.int64, device=x.device).scatter_add_(
            0, flat, torch.ones_like(flat))
        order = flat.argsort(stable=True)
        source = order // self.top_k  # the token each sorted row came from
        rows = tokens[source]
        hidden = F.silu(grouped_linear(rows, self.w1, counts)) * grouped_linear(rows, self.w3, counts)
        out_rows = grouped_linear(hidden, self.w2, counts) * weights.reshape(-1)[order, None].to(x.dtype)
        out = torch.zeros_like(tokens).index_add_(0, source, out_rows)
        stats = torch.stack([counts.float(), probs.sum(dim=0)])
        return out.view_as(x), stats

    def parameter_inits(self, out_std: float) -> dict[str, Init]:
        return {"router.weight": truncated_normal(0.02), "w1": truncated_normal(0.02), "w2": truncated_normal(out_std),
                "w3": truncated_normal(out_std)}


def load_balancing_loss(stats: torch.Tensor, n_layers: int, n_tokens: int) -> torch.Tensor:
    """Switch Transformer's auxiliary loss over all layers at once, as Mixtral's reference and
    transformers compute it: E · Σ_e (assignments_e / (L·T)) · (probability_e / (L·T)), where
    `stats` sums the layers' (assignments, probability) rows. Uniform routing gives top_k."""
    rows = n_layers * n_tokens
    assignments, probability = stats[0] / rows, stats[1] / rows
    return stats.shape[1] * torch.sum(assignments * probability)
