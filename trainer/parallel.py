"""Where the decoder meets the devices: built on the meta device, sharded with FSDP2 when there
is more than one rank, given storage on the real device and initialised, with the efficiency
settings (activation checkpointing, compile, a chunked loss) applied.

One process skips FSDP2: wrapping a one-rank group only adds hooks and copies (it cost 16 % of a
CPU step, bench/step_overhead.py). On one GPU, bf16 autocast then stands in for FSDP's
mixed-precision policy.
"""

from __future__ import annotations

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import Shard

from config.models import ModelConfig
from config.workloads.llm import EfficiencyConfig, FsdpConfig
from trainer import dist as tdist
from trainer.model import Transformer
from trainer.moe import MoEFeedForward


def _expert_placement(model: Transformer):
    """Stacked expert weights are (experts, out, in): sharding their 8 rows over 16 ranks would
    leave half the ranks without expert weights. Shard them along `out` instead."""
    experts = {id(p) for m in model.modules() if isinstance(m, MoEFeedForward) for p in (m.w1, m.w2, m.w3)}
    return lambda param: Shard(1) if id(param) in experts else None


def build_decoder(cfg: ModelConfig, rt: tdist.Runtime, *, efficiency: EfficiencyConfig = EfficiencyConfig(),
                  fsdp: FsdpConfig = FsdpConfig(), rope_length: int | None = None, seed: int = 0) -> Transformer:
    # The meta device records shapes without memory: a 70B model is built in a second and
    # each rank only ever allocates its own shard.
    with torch.device("meta"):
        model = Transformer(cfg, rope_length=rope_length)
    on_gpu = rt.device.type == "cuda"
    layers = list(model.layers.values())
    for block in layers:
        block.activation_checkpointing = efficiency.activation_checkpointing
        if efficiency.compile:
            block.compile()  # per block: all blocks share one compiled graph, so compile time does not grow with depth
    if fsdp.shards(rt.world_size):
        # bf16 compute with fp32 gradient reduction on GPU; CPUs have no fast bf16 path, stay fp32.
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if on_gpu \
            else MixedPrecisionPolicy()
        placement = _expert_placement(model)
        for i, block in enumerate(layers):
            # The last block's parameters are needed again at once by backward: keep them gathered.
            fully_shard(block, mp_policy=mp, reshard_after_forward=i < len(layers) - 1, shard_placement_fn=placement)
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
