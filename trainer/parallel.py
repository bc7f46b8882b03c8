"""Where the decoder meets the devices: built on the meta device, sharded with FSDP2 when there
is more than one rank, given storage on the real device and initialised, with the efficiency
settings (activation checkpointing, compile, a chunked loss, float8) applied.

One process skips FSDP2: wrapping a one-rank group only adds hooks and copies (it cost 16 % of a
CPU step, bench/step_overhead.py). On one GPU, bf16 autocast then stands in for FSDP's
mixed-precision policy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import Shard

from config.models import ModelConfig, expert_rows_problem
from config.workloads.llm import EfficiencyConfig, FsdpConfig
from trainer import dist as tdist
from trainer.cli import UsageError
from trainer.float8 import convert_to_float8
from trainer.model import Transformer
from trainer.moe import MoEFeedForward


def _expert_placement(model: Transformer):
    """Stacked expert weights are (experts, out, in): sharding their 8 rows over 16 ranks would
    leave half the ranks without expert weights. Shard them along `out` instead."""
    experts = {id(p) for m in model.modules() if isinstance(m, MoEFeedForward) for p in (m.w1, m.w2, m.w3)}
    return lambda param: Shard(1) if id(param) in experts else None


def check_expert_sharding(name: str, cfg: ModelConfig, world_size: int, fsdp: FsdpConfig) -> None:
    """Before the process group: an elastic job can re-form on a number of ranks that does not
    divide the experts' rows (config.models.expert_rows_problem). One line then, not every rank's
    crash report after the rendezvous."""
    problem = expert_rows_problem(cfg, world_size) if fsdp.shards(world_size) else None
    if problem:
        raise UsageError("--model", f"{name} {problem}")


@dataclass(frozen=True)
class FsdpUnit:
    """Submodules sharded as one FSDP2 group: gathered together before the first of them runs,
    their gradients reduce-scattered together."""
    modules: tuple[str, ...]
    reshard_after_forward: bool


def fsdp_units(model: Transformer) -> list[FsdpUnit]:
    """torchtitan's layout: the embedding alone, each block alone, the final norm with the output
    layer; the root (the model) then holds no parameter of its own.

    - The embedding is resharded after forward: it is needed again only at the very end of
      backward, and holding it gathered would keep vocab x dim weights (1 GiB in bf16 for
      Llama 3) through the whole step.
    - The output layer's gradient is reduce-scattered as soon as its backward is done, under
      the blocks' backward; in a root group shared with the embedding it waited for the end.
    - The last block and the norm + output unit stay gathered: backward needs them at once, and
      resharding would only gather them again.
    - A tied output layer shares the embedding's weight, and a parameter belongs to exactly one
      group: embedding, norm and output then form one unit, kept gathered from the embedding in
      forward to the output in backward (torchtitan does the same).
    """
    names = [f"layers.{name}" for name in model.layers]
    blocks = [FsdpUnit((name,), i < len(names) - 1) for i, name in enumerate(names)]
    if model.cfg.tie_embeddings:
        return [FsdpUnit(("tok_embeddings", "norm", "output"), False), *blocks]
    return [FsdpUnit(("tok_embeddings",), True), *blocks, FsdpUnit(("norm", "output"), False)]


def build_decoder(cfg: ModelConfig, rt: tdist.Runtime, *, efficiency: EfficiencyConfig = EfficiencyConfig(),
                  fsdp: FsdpConfig = FsdpConfig(), rope_length: int | None = None, seed: int = 0) -> Transformer:
    # The meta device records shapes without memory: a 70B model is built in a second and
    # each rank only ever allocates its own shard.
    with torch.device("meta"):
        model = Transformer(cfg, rope_length=rope_length)
    on_gpu = rt.device.type == "cuda"
    sharded = fsdp.shards(rt.world_size)
    if efficiency.float8:
        # Before sharding: FSDP2 then all-gathers the converted weights in float8 (trainer/float8.py).
        convert_to_float8(model, all_gather_in_float8=sharded)
    for block in model.layers.values():
        block.activation_checkpointing = efficiency.activation_checkpointing
        if efficiency.compile:
            block.compile()  # per block: all blocks share one compiled graph, so compile time does not grow with depth
    if sharded:
        # bf16 compute with fp32 gradient reduction on GPU; CPUs have no fast bf16 path, stay fp32.
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if on_gpu \
            else MixedPrecisionPolicy()
        placement = _expert_placement(model)
        for unit in fsdp_units(model):
            modules = [model.get_submodule(name) for name in unit.modules]
            fully_shard(modules if len(modules) > 1 else modules[0], mp_policy=mp,
                        reshard_after_forward=unit.reshard_after_forward, shard_placement_fn=placement)
        fully_shard(model, mp_policy=mp)
    elif on_gpu:
        model.autocast_dtype = torch.bfloat16
    model.to_empty(device=rt.device)
    if cfg.tie_embeddings and model.output.weight is not model.tok_embeddings.weight:
        # to_empty gives each module its own new tensor, which would silently untie the output
        # layer from the embedding (FSDP2 keeps the tie: it owns the parameters).
        model.output.weight = model.tok_embeddings.weight
    # The same full weights for a seed on any number of ranks (trainer/initialise.py).
    model.init_weights(rt.device, seed=seed)
    model.loss_chunk_tokens = efficiency.loss_chunk_tokens
    if efficiency.compile:
        model.compute_loss = torch.compile(model.compute_loss)  # fuses the fp32 cast into the softmax
    return model
