"""Initial weights that depend on the seed and nothing else: not on the number of ranks, how a
parameter is sharded, or the order in which parameters are initialised.

Each parameter draws from its own generator, seeded by the run's seed and the parameter's name. A
sharded parameter (FSDP2's DTensor) is drawn in full on its device and each rank keeps its own
shard, so one rank and N ranks start from the same full weights. (DTensor's own random ops are
not used: on CPU meshes each rank draws its shard from its own generator, and every rank then
held the same shard values.)
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import torch
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

# How one parameter starts: fills a full-shaped tensor from the given generator.
Init = Callable[[torch.Tensor, torch.Generator], None]


def normal(std: float) -> Init:
    return lambda t, g: nn.init.normal_(t, mean=0.0, std=std, generator=g)


def truncated_normal(std: float, bound: float = 2.0) -> Init:
    """A normal of `std` cut at ±`bound` (absolute, nn.init's convention)."""
    return lambda t, g: nn.init.trunc_normal_(t, mean=0.0, std=std, a=-bound, b=bound, generator=g)


def ones(t: torch.Tensor, g: torch.Generator) -> None:
    nn.init.ones_(t)


def parameter_seed(seed: int, name: str) -> int:
    digest = hashlib.blake2b(f"{seed}/{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


@torch.no_grad()
def init_parameters(module: nn.Module, inits: dict[str, Init], seed: int = 0) -> None:
    """Initialise every parameter of `module` in place from `inits` (keyed by parameter name).

    One parameter at a time: a 70B model never exists whole on one rank; the largest temporary
    is one full parameter (the embedding matrix)."""
    missing = {name for name, _ in module.named_parameters()} - inits.keys()
    if missing:
        raise ValueError(f"no initialiser for {sorted(missing)}")
    for name, param in module.named_parameters():  # a tied weight is listed once
        generator = torch.Generator(param.device).manual_seed(parameter_seed(seed, name))
        if isinstance(param, DTensor):
            full = torch.empty(param.shape, dtype=param.dtype, device=param.device)
            inits[name](full, generator)
            # src_data_rank=None: each rank cuts its shard from its own copy, no communication.
            shard = distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None)
            param.to_local().copy_(shard.to_local())
            del full, shard
        else:
            inits[name](param, generator)
