"""A Llama-family decoder: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU.

Built on the meta device by the trainer (no memory, no time for a 70B model), sharded, then
given real storage and initialised by `init_weights` on the real device: nothing here trains
from whatever bytes the allocator happened to hand out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from trainer.chunked_loss import linear_cross_entropy


@dataclass(frozen=True)
class ModelConfig:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    ffn_dim: int
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    # Llama 3.1 and 3.2 stretch the low rotary frequencies for long context (their "rope_scaling");
    # None keeps the plain Llama 2 frequencies.
    rope_scaling_factor: float | None = None
    tie_embeddings: bool = False  # Llama 3.2 1B/3B share the input embedding with the output layer
    max_seq_len: int = 8192

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def num_params(self, *, embedding: bool = True) -> int:
        kv = self.n_kv_heads * self.head_dim
        attn = 2 * self.dim * self.dim + 2 * self.dim * kv
        layer = attn + 3 * self.dim * self.ffn_dim + 2 * self.dim
        out = 0 if self.tie_embeddings else self.vocab_size * self.dim
        emb = self.vocab_size * self.dim if embedding else 0
        # A tied model's one matrix still does the output projection's matmul, so it counts
        # towards the FLOPs even when the embedding lookup (no matmul) is left out.
        if self.tie_embeddings and not embedding:
            out = self.vocab_size * self.dim
        return emb + self.n_layers * layer + self.dim + out

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token: 6·N for the matmuls (forward 2, backward 4) plus the
        attention scores and their weighted sum, 12·layers·heads·head_dim·seq (the PaLM paper's
        count, which torchtitan also reports; it ignores the causal mask's saving)."""
        n = self.num_params(embedding=False)
        return 6 * n + 12 * self.n_layers * self.n_heads * self.head_dim * seq_len


# Published dimensions (Meta's params.json for each release). `tiny` exists for tests.
MODEL_PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=1024, ffn_dim=192,
                        max_seq_len=512),
    "llama2-7b": ModelConfig(4096, 32, 32, 32, 32000, 11008, max_seq_len=4096),
    "llama2-13b": ModelConfig(5120, 40, 40, 40, 32000, 13824, max_seq_len=4096),
    "llama2-70b": ModelConfig(8192, 80, 64, 8, 32000, 28672, max_seq_len=4096),
    "llama3.1-8b": ModelConfig(4096, 32, 32, 8, 128256, 14336, rope_theta=500000.0, rope_scaling_factor=8.0),
    "llama3.1-70b": ModelConfig(8192, 80, 64, 8, 128256, 28672, rope_theta=500000.0, rope_scaling_factor=8.0),
    "llama3.2-1b": ModelConfig(2048, 16, 32, 8, 128256, 8192, rope_theta=500000.0, rope_scaling_factor=32.0,
                               tie_embeddings=True),
    "llama3.2-3b": ModelConfig(3072, 28, 24, 8, 128256, 8192, rope_theta=500000.0, rope_scaling_factor=32.0,
                               tie_embeddings=True),
}


def model_config(name: str, *, n_layers: int | None = None) -> ModelConfig:
    cfg = MODEL_PRESETS[name]
    return replace(cfg, n_layers=n_layers) if n_layers else cfg


# --- rotary embeddings --------------------------------------------------------------------------

def rope_frequencies(cfg: ModelConfig, device: torch.device) -> torch.Tensor:
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, device=device, dtype=torch.float64) / cfg.head_dim))
    if cfg.rope_scaling_factor:
        # Llama 3.1's scheme: wavelengths longer than the original context (8192 tokens / 1) are
        # slowed by the factor, those shorter than 8192 / 4 are kept, the band between blends.
        low, high, original = 1.0, 4.0, 8192
        wavelen = 2 * math.pi / inv
        smooth = (original / wavelen - low) / (high - low)
        blended = (1 - smooth) * inv / cfg.rope_scaling_factor + smooth * inv
        inv = torch.where(wavelen > original / low, inv / cfg.rope_scaling_factor,
                          torch.where(wavelen < original / high, inv, blended))
    angles = torch.outer(torch.arange(cfg.max_seq_len, device=device, dtype=torch.float64), inv)
    return torch.stack([angles.cos(), angles.sin()], dim=-1).float()  # (seq, head_dim/2, 2)


def apply_rope(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Rotate each (even, odd) pair of x (batch, seq, heads, head_dim) by its position's angle."""
    seq = x.shape[1]
    cos, sin = freqs[:seq, None, :, 0], freqs[:seq, None, :, 1]
    pairs = x.float().unflatten(-1, (-1, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return rotated.flatten(-2).type_as(x)


# --- blocks -------------------------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32: bf16's 8-bit mantissa makes the mean of squares drift.
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = apply_rope(self.wq(x).view(b, t, self.n_heads, self.head_dim), freqs)
        k = apply_rope(self.wk(x).view(b, t, self.n_kv_heads, self.head_dim), freqs)
        v = self.wv(x).view(b, t, self.n_kv_heads, self.head_dim)
        # enable_gqa lets the fused kernel share each K/V head across its group of query heads
        # without materialising the repeated K/V tensors.
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             is_causal=True, enable_gqa=self.n_kv_heads != self.n_heads)
        return self.wo(out.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)  # gate
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)  # up
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)  # down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_id: int):
        super().__init__()
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)
        # Output projections get a depth-scaled std so the residual stream's variance does not
        # grow with the number of layers (GPT-2 / torchtitan's scheme).
        self.out_std = 0.02 / math.sqrt(2 * (layer_id + 1))
        self.activation_checkpointing = False

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        if self.activation_checkpointing and torch.is_grad_enabled():
            # Keep only the block's input; recompute the rest in backward. Done inside the block
            # (not by a wrapper module) so checkpoint keys are the same with and without it.
            return checkpoint(self._forward, x, freqs, use_reentrant=False)
        return self._forward(x, freqs)

    def _forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), freqs)
        return h + self.feed_forward(self.ffn_norm(h))

    def init_weights(self) -> None:
        for norm in (self.attention_norm, self.ffn_norm):
            norm.reset_parameters()
        for lin in (self.attention.wq, self.attention.wk, self.attention.wv, self.feed_forward.w1):
            nn.init.trunc_normal_(lin.weight, mean=0.0, std=0.02)
        for lin in (self.attention.wo, self.feed_forward.w2, self.feed_forward.w3):
            nn.init.trunc_normal_(lin.weight, mean=0.0, std=self.out_std)


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        # A ModuleDict keyed by layer index keeps checkpoint keys stable when layers are wrapped
        # (activation checkpointing) or compiled.
        self.layers = nn.ModuleDict({str(i): Block(cfg, i) for i in range(cfg.n_layers)})
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        # Derived from the config, never trained: not saved in checkpoints, rebuilt by init.
        self.register_buffer("freqs", torch.empty(cfg.max_seq_len, cfg.head_dim // 2, 2), persistent=False)

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor | None = None,
                loss_chunk_tokens: int = 0) -> torch.Tensor:
        """Logits; or, given `labels` and `loss_chunk_tokens`, the mean cross-entropy computed a
        chunk at a time without materialising the logits (inside forward, so FSDP has gathered
        the output weight)."""
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h, self.freqs)
        h = self.norm(h)
        if labels is not None and loss_chunk_tokens > 0:
            return linear_cross_entropy(h, self.output.weight, labels, loss_chunk_tokens)
        return self.output(h)

    @torch.no_grad()
    def init_weights(self, device: torch.device | None = None) -> None:
        """Initialise every parameter and buffer in place (after `to_empty` on the real device)."""
        self.freqs.copy_(rope_frequencies(self.cfg, device or self.freqs.device))
        nn.init.normal_(self.tok_embeddings.weight, mean=0.0, std=1.0 if not self.cfg.tie_embeddings else 0.02)
        for layer in self.layers.values():
            layer.init_weights()
        self.norm.reset_parameters()
        if not self.cfg.tie_embeddings:
            # Scale by 1/sqrt(dim) and cut at 3 std, so initial logits are O(1) and the first
            # loss sits near log(vocab).
            std = self.cfg.dim ** -0.5
            nn.init.trunc_normal_(self.output.weight, mean=0.0, std=std, a=-3 * std, b=3 * std)


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    # Cross-entropy in fp32: the softmax over 128k logits loses too much in bf16.
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))
