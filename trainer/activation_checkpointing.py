"""Activation checkpointing of a decoder block: none, selective or full.

- none: autograd keeps every tensor the block's backward needs.
- full: only the block's input is kept; backward runs the whole block's forward again, matmuls
  and attention included (about a third more forward compute per step).
- selective (op level, the idea of torchtitan's per-op SAC): the outputs of the expensive ops are
  kept and only the cheap ones are recomputed. Kept: every matmul (the q/k/v/o projections and the
  feed-forward's, dense or grouped experts, float8 scaled ones), the fused attention kernels with
  their log-sum-exp, and the few ops whose recompute must not change (top-k routing; the amax
  that sets a float8 scale). Recomputed: norms, rotary embeddings, SiLU and the gating product,
  residual adds, the float32 copies inside them. Backward then redoes elementwise work only and
  keeps about half of what `none` keeps (config/memory.py counts both).

Which mode a preset uses is decided by the memory estimate (config/memory.py,
cheapest_checkpointing): the first of none, selective, full that fits its GPUs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from config.memory import CHECKPOINTING_MODES  # the modes the estimate counts and --activation-checkpointing offers


def _aten(*names: str) -> frozenset:
    """The default overloads of the named aten ops this torch build has (attention kernels differ
    between builds and devices)."""
    ops = set()
    for name in names:
        packet = getattr(torch.ops.aten, name, None)
        if packet is not None and hasattr(packet, "default"):
            ops.add(packet.default)
    return frozenset(ops)


SAVED_OPS = _aten(
    # Matmuls: nn.Linear reaches the dispatcher as mm / addmm (or linear on some backends), the
    # CPU experts as bmm, the GPU experts as _grouped_mm, float8 linears as _scaled_mm.
    "mm", "addmm", "bmm", "baddbmm", "linear", "_grouped_mm", "_scaled_mm", "_scaled_grouped_mm",
    # Fused attention: flash, memory-efficient and cuDNN on GPU, flash on CPU.
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_fused_attention_overrideable",
    # Decisions a recompute must repeat exactly: expert routing, float8 scales (amax).
    "topk", "max",
)


def _selective_policy(ctx, op, *args, **kwargs) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op in SAVED_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def _selective_contexts():
    return create_selective_checkpoint_contexts(_selective_policy)


def run_checkpointed(forward: Callable, mode: str, *args):
    """forward(*args) under activation checkpointing `mode` (one of CHECKPOINTING_MODES)."""
    if mode == "none" or not torch.is_grad_enabled():
        return forward(*args)
    if mode == "full":
        return checkpoint(forward, *args, use_reentrant=False)
    if mode == "selective":
        return checkpoint(forward, *args, use_reentrant=False, context_fn=_selective_contexts)
    raise ValueError(f"activation checkpointing must be one of {', '.join(CHECKPOINTING_MODES)}, got {mode!r}")


__all__ = ["CHECKPOINTING_MODES", "SAVED_OPS", "run_checkpointed"]
