"""Llama-family decoders: RMSNorm, rotary embeddings, grouped-query attention (optionally with
Mistral's sliding window), and a SwiGLU feed-forward, dense or a sparse mixture of experts.

Built on the meta device by the trainer (no memory, no time for a 70B model), sharded, then
given real storage and initialised by `init_weights` on the real device (or loaded from a
Hugging Face checkpoint): nothing here trains from whatever bytes the allocator handed out.

Rotary embeddings use Hugging Face's layout (each head's first half rotates with its second
half), so q/k weights are the same tensors in our checkpoints and in `*.safetensors`: import and
export are plain copies, and a rank can read exactly its rows of a weight from disk.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from config.models import ModelConfig, RopeScaling
from trainer.activation_checkpointing import run_checkpointed
from trainer.chunked_loss import cross_entropy, linear_cross_entropy
from trainer.initialise import Init, init_parameters, normal, ones, truncated_normal
from trainer.moe import MoEFeedForward, load_balancing_loss

# --- rotary embeddings --------------------------------------------------------------------------

def rope_inverse_frequencies(cfg: ModelConfig, device: torch.device) -> torch.Tensor:
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, device=device, dtype=torch.float64) / cfg.head_dim))
    scaling: RopeScaling | None = cfg.rope_scaling
    if scaling:
        low_wavelen = scaling.original_max_position / scaling.low_freq_factor
        high_wavelen = scaling.original_max_position / scaling.high_freq_factor
        wavelen = 2 * math.pi / inv
        smooth = (scaling.original_max_position / wavelen - scaling.low_freq_factor) / (
            scaling.high_freq_factor - scaling.low_freq_factor)
        blended = (1 - smooth) * inv / scaling.factor + smooth * inv
        inv = torch.where(wavelen > low_wavelen, inv / scaling.factor,
                          torch.where(wavelen < high_wavelen, inv, blended))
    return inv


def rope_frequencies(cfg: ModelConfig, device: torch.device, length: int | None = None) -> torch.Tensor:
    """cos and sin of every position's angles: (length, head_dim/2, 2), fp32."""
    inv = rope_inverse_frequencies(cfg, device)
    angles = torch.outer(torch.arange(length or cfg.max_seq_len, device=device, dtype=torch.float64), inv)
    return torch.stack([angles.cos(), angles.sin()], dim=-1).float()


def apply_rope(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Rotate x (batch, seq, heads, head_dim): element i of each head's first half pairs with
    element i of its second half (Hugging Face's `rotate_half` layout)."""
    seq = x.shape[1]
    cos, sin = freqs[:seq, None, :, 0], freqs[:seq, None, :, 1]
    first, second = x.float().chunk(2, dim=-1)
    return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1).type_as(x)


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
        self.sliding_window = cfg.sliding_window
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = apply_rope(self.wq(x).view(b, t, self.n_heads, self.head_dim), freqs)
        k = apply_rope(self.wk(x).view(b, t, self.n_kv_heads, self.head_dim), freqs)
        v = self.wv(x).view(b, t, self.n_kv_heads, self.head_dim)
        mask = None
        if self.sliding_window and t > self.sliding_window:
            # Query i sees keys i-window+1 .. i. Only sequences longer than the window pay for an
            # explicit mask (and lose the fused causal kernel).
            pos = torch.arange(t, device=x.device)
            distance = pos[:, None] - pos[None, :]
            mask = (distance >= 0) & (distance < self.sliding_window)
        # enable_gqa lets the fused kernel share each K/V head across its group of query heads
        # without materialising the repeated K/V tensors.
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             attn_mask=mask, is_causal=mask is None,
                                             enable_gqa=self.n_kv_heads != self.n_heads)
        return self.wo(out.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)  # gate
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)  # up
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)  # down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))

    def parameter_inits(self, out_std: float) -> dict[str, Init]:
        return {"w1.weight": truncated_normal(0.02), "w2.weight": truncated_normal(out_std),
                "w3.weight": truncated_normal(out_std)}


class Block(nn.Module):
    """One decoder layer. A dense block returns its output; a mixture-of-experts block returns
    (output, router statistics) so the model can add the load-balancing loss."""

    def __init__(self, cfg: ModelConfig, layer_id: int):
        super().__init__()
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward = MoEFeedForward(cfg) if cfg.is_moe else FeedForward(cfg)
        # Output projections get a depth-scaled std so the residual stream's variance does not
        # grow with the number of layers (GPT-2 / torchtitan's scheme).
        self.out_std = 0.02 / math.sqrt(2 * (layer_id + 1))
        self.activation_checkpointing = "none"  # or "selective", "full" (trainer/activation_checkpointing.py)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor):
        # Inside the block, not a wrapper module: checkpoint keys are the same in every mode.
        return run_checkpointed(self._forward, self.activation_checkpointing, x, freqs)

    def _forward(self, x: torch.Tensor, freqs: torch.Tensor):
        h = x + self.attention(self.attention_norm(x), freqs)
        ffn = self.feed_forward(self.ffn_norm(h))
        if isinstance(ffn, tuple):
            out, stats = ffn
            return h + out, stats
        return h + ffn

    def parameter_inits(self) -> dict[str, Init]:
        inits = {"attention_norm.weight": ones, "ffn_norm.weight": ones,
                 "attention.wq.weight": truncated_normal(0.02), "attention.wk.weight": truncated_normal(0.02),
                 "attention.wv.weight": truncated_normal(0.02), "attention.wo.weight": truncated_normal(self.out_std)}
        inits.update({f"feed_forward.{k}": v for k, v in self.feed_forward.parameter_inits(self.out_std).items()})
        return inits


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig, *, rope_length: int | None = None):
        """`rope_length`: positions to precompute rotary angles for (default: the model's whole
        context; the trainer passes its sequence length, as 128k positions cost 64 MB a rank)."""
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
        # The loss the trainer asks for: F.cross_entropy in fp32 (or a compiled version of it),
        # or the chunked output layer + loss when loss_chunk_tokens > 0.
        self.compute_loss = loss_fn
        self.loss_chunk_tokens = 0
        # bf16 autocast where no FSDP mixed-precision policy casts the weights (one GPU).
        self.autocast_dtype: torch.dtype | None = None
        # Derived from the config, never trained: not saved in checkpoints, rebuilt by init.
        self.register_buffer("freqs", torch.empty(rope_length or cfg.max_seq_len, cfg.head_dim // 2, 2),
                             persistent=False)

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor | None = None, *, separate_aux: bool = False):
        """The logits; given `labels` (the next token of each position, -100 to skip one), the
        training loss instead: mean cross-entropy plus, for a mixture of experts, the weighted
        load-balancing loss. With `separate_aux`, the pair (cross-entropy, unweighted
        load-balancing loss or None), which the trainer weights and logs apart. The loss is
        computed inside forward so FSDP has the output weight gathered for the chunked path."""
        if self.autocast_dtype is not None:
            with torch.autocast(tokens.device.type, dtype=self.autocast_dtype):
                lm, aux = self._forward(tokens, labels)
        else:
            lm, aux = self._forward(tokens, labels)
        if labels is None:
            return lm  # the logits
        if separate_aux:
            return lm, aux
        return lm if aux is None else lm + self.cfg.router_aux_loss_coef * aux

    def _forward(self, tokens: torch.Tensor, labels: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        h = self.tok_embeddings(tokens)
        router_stats = None
        for layer in self.layers.values():
            h = layer(h, self.freqs)
            if isinstance(h, tuple):
                h, stats = h
                router_stats = stats if router_stats is None else router_stats + stats
        h = self.norm(h)
        if labels is None:
            return self.output(h), None
        if self.loss_chunk_tokens > 0:
            loss = linear_cross_entropy(h, self.output.weight, labels, self.loss_chunk_tokens)
        else:
            loss = self.compute_loss(self.output(h), labels)
        aux = None
        if router_stats is not None and self.cfg.router_aux_loss_coef:
            aux = load_balancing_loss(router_stats, self.cfg.n_layers, tokens.numel())
        return loss, aux

    def parameter_inits(self) -> dict[str, Init]:
        """How each parameter starts, by name."""
        tied = self.cfg.tie_embeddings
        inits = {"tok_embeddings.weight": normal(0.02 if tied else 1.0), "norm.weight": ones}
        for i, layer in self.layers.items():
            inits.update({f"layers.{i}.{k}": v for k, v in layer.parameter_inits().items()})
        if not tied:
            # Scale by 1/sqrt(dim) and cut at 3 std, so initial logits are O(1) and the first
            # loss sits near log(vocab).
            std = self.cfg.dim ** -0.5
            inits["output.weight"] = truncated_normal(std, bound=3 * std)
        return inits

    @torch.no_grad()
    def init_weights(self, device: torch.device | None = None, *, seed: int = 0) -> None:
        """Initialise every parameter and buffer in place (after `to_empty` on the real device): the
        same `seed` gives the same weights on one rank or sharded over any number."""
        self.init_buffers(device)
        init_parameters(self, self.parameter_inits(), seed)

    @torch.no_grad()
    def init_buffers(self, device: torch.device | None = None) -> None:
        device = device or self.freqs.device
        self.freqs.copy_(rope_frequencies(self.cfg, device, self.freqs.shape[0]))


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    # Cross-entropy in fp32: the softmax over 128k logits loses too much in bf16. The same
    # ignore rule as the chunked path, so the two paths agree on every batch.
    return cross_entropy(logits, labels)
