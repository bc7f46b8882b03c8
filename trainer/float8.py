"""Float8 training of the decoder's linear layers through torchao (--float8), for H100 and H200.

The q/k/v/o and feed-forward projections become torchao Float8Linear with dynamic tensorwise
scaling: each matmul casts its input, weight and output gradient to float8 (e4m3 forward, e5m2
for gradients) and runs on the float8 tensor cores, about twice the bf16 rate on Hopper. Under
FSDP2 the weights are also all-gathered in float8, half the bytes of bf16; after each optimizer
step one all-reduce computes every weight's scale for the next all-gather (torchao's
precompute_float8_dynamic_scale_for_fsdp), instead of one per weight.

Left in bf16, as torchtitan leaves them: the output layer (and so a tied embedding), whose
logits feed a softmax over the whole vocabulary and lose too much in float8; the MoE router, a
small matmul whose top-k decisions must not flip; and any linear with a dimension that is not a
multiple of 16, which the float8 kernels do not take. Stacked MoE experts stay bf16 too (their
grouped float8 GEMM is a torchao prototype).

The float8 kernels need compute capability 8.9 (Ada, Hopper) or newer: anything else, a CPU
included, is refused with one line before the process group forms. torchao is imported only
here and only with --float8, so the trainer starts without it everywhere else.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from trainer.cli import UsageError

MIN_CAPABILITY = (8, 9)
# Linear layers left in bf16, by the last part of their name (see above).
EXCLUDED = ("output", "router")


def refusal(device_type: str, capability: tuple[int, int] | None = None, name: str = "") -> str | None:
    """Why --float8 cannot run on this device; None when it can."""
    if device_type != "cuda":
        return ("float8 matmuls need an NVIDIA GPU of compute capability 8.9 or newer (H100, H200: p5, p5e, p5en); "
                "this run has no GPU")
    if capability is None or tuple(capability) < MIN_CAPABILITY:
        have = ".".join(map(str, capability)) if capability else "unknown"
        return (f"float8 matmuls need compute capability 8.9 or newer (H100, H200: p5, p5e, p5en); {name or 'this GPU'} "
                f"has {have} (an A100 is 8.0: train in bf16 there)")
    return None


def check_supported() -> None:
    """UsageError naming --float8 where this process's GPU cannot run float8 matmuls."""
    if not torch.cuda.is_available():
        problem = refusal("cpu")
    else:
        index = int(os.environ.get("LOCAL_RANK", "0"))
        problem = refusal("cuda", torch.cuda.get_device_capability(index), torch.cuda.get_device_name(index))
    if problem:
        raise UsageError("--float8", problem)


def convertible(module: nn.Module, name: str) -> bool:
    """Whether the linear layer `name` trains in float8."""
    if not isinstance(module, nn.Linear) or name.rsplit(".", 1)[-1] in EXCLUDED:
        return False
    return module.in_features % 16 == 0 and module.out_features % 16 == 0


def convert_to_float8(model: nn.Module, *, all_gather_in_float8: bool) -> list[str]:
    """Swap the convertible linear layers of `model` (meta or real) for Float8Linear, in place;
    the names of those swapped. Call before fully_shard: the weights FSDP2 then shards are the
    ones it all-gathers in float8."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    config = Float8LinearConfig(enable_fsdp_float8_all_gather=all_gather_in_float8)
    convert_to_float8_training(model, config=config, module_filter_fn=convertible)
    return [name for name, module in model.named_modules() if is_float8_linear(module)]


def is_float8_linear(module: nn.Module) -> bool:
    from torchao.float8.float8_linear import Float8Linear

    return isinstance(module, Float8Linear)


def precompute_scales_after_each_step(optimizer: torch.optim.Optimizer, model: nn.Module) -> None:
    """After every optimizer step, compute all float8 weight scales in one all-reduce (only sharded
    weights that are all-gathered in float8 have any)."""
    from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

    optimizer.register_step_post_hook(lambda *_: precompute_float8_dynamic_scale_for_fsdp(model))
