"""trainer.llm's job configuration: FSDP2 training of a decoder from the model table or a Hugging
Face directory, on synthetic tokens or token shards."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from config.memory import CHECKPOINTING_MODES
from config.models import MODELS, ModelConfig
from config.options import non_negative_int, option, positive_float, positive_int, section, switch
from config.workloads.common import (CheckpointConfig, DistConfig, GlobalBatchConfig, MetricsConfig,
                                     checkpoints_and_metrics_in, max_nonfinite_steps, seed)
from config.workloads.workload import Workload


@dataclass(frozen=True)
class SequenceBatchConfig(GlobalBatchConfig):
    """The batch: sequences of seq_len tokens, a micro-batch per rank, a global batch per step."""
    unit: ClassVar[str] = "sequences"
    seq_len: int = option(128, "tokens per sequence", parse=positive_int)


@dataclass(frozen=True)
class DecoderConfig:
    """The model: an entry of the model table, or a Hugging Face directory's config.json."""
    name: str | None = option(None, "model dimensions (default: tiny, or the --init-from-hf config)", flag="--model",
                              choices=sorted(MODELS))
    init_from_hf: str | None = option(None, "start from a Hugging Face checkpoint directory (config.json + "
                                            "*.safetensors) when no checkpoint of ours exists yet; the model comes "
                                            "from its config.json", metavar="DIR")
    layers: int | None = option(None, "override the model's layer count (benchmarks)", parse=positive_int)
    # Not an option: the shape the trainer resolves from the above (trainer/llm_job.py).
    shape: ModelConfig | None = None


@dataclass(frozen=True)
class TokenDataConfig:
    """The tokens: a learnable synthetic stream, or shards made by `python -m trainer.data prepare`."""
    source: str = option("synthetic", "'synthetic' or a directory of token shards (trainer.data prepare)",
                         flag="--data")


@dataclass(frozen=True)
class AdamWConfig:
    """AdamW with a linear warm-up and a cosine decay (trainer/optim.py)."""
    lr: float | None = option(None, "peak learning rate (default: 3e-3 for tiny, else 3e-4)", parse=positive_float)
    warmup_steps: int = option(10, "steps of linear warm-up (at most half the run)", parse=non_negative_int)
    max_grad_norm: float = option(1.0, "clip the gradient's norm to this", parse=positive_float)
    max_nonfinite_steps: int = max_nonfinite_steps("loss or gradient norm")
    min_lr_ratio: ClassVar[float] = 0.1  # the cosine decays to this fraction of the peak rate
    weight_decay: ClassVar[float] = 0.1
    betas: ClassVar[tuple[float, float]] = (0.9, 0.95)


@dataclass(frozen=True)
class EfficiencyConfig:
    """How a step is computed, trading memory for time (only float8 changes what it computes)."""
    activation_checkpointing: str = option("none", "recompute block activations in backward: selective keeps the "
                                                   "matmul and attention outputs and recomputes the cheap ops, full "
                                                   "keeps only each block's input; the flag alone means full",
                                           choices=CHECKPOINTING_MODES, bare="full")
    compile: bool = switch("torch.compile each decoder block")
    loss_chunk_tokens: int = option(0, "compute the output layer and loss this many tokens at a time, never holding "
                                       "all logits (saves ~10 GiB at seq 8192 with a 128k vocabulary); 0 = off",
                                    parse=non_negative_int)
    float8: bool = switch("train the decoder's linear layers in float8 through torchao (and all-gather their weights "
                          "in float8 under FSDP2); needs compute capability 8.9 or newer: H100, H200")


@dataclass(frozen=True)
class FsdpConfig:
    """Sharding (trainer/parallel.py)."""
    mode: str = option("auto", "auto: shard with FSDP2 when there is more than one rank; always: on one rank too",
                       flag="--fsdp", choices=("auto", "always"))

    def shards(self, world_size: int) -> bool:
        return world_size > 1 or self.mode == "always"


@dataclass(frozen=True)
class LlmJobConfig:
    """FSDP2 training of a Llama-family decoder (dense or mixture of experts)."""
    module: ClassVar[str] = "trainer.llm"
    steps: int = option(40, "total optimizer steps, counting resumed ones", parse=positive_int)
    batch: SequenceBatchConfig = section(SequenceBatchConfig(batch_size=4))
    model: DecoderConfig = section(DecoderConfig())
    data: TokenDataConfig = section(TokenDataConfig())
    optimizer: AdamWConfig = section(AdamWConfig())
    checkpoint: CheckpointConfig = section(CheckpointConfig(every=100))
    metrics: MetricsConfig = section(MetricsConfig())
    efficiency: EfficiencyConfig = section(EfficiencyConfig())
    fsdp: FsdpConfig = section(FsdpConfig())
    seed: int = seed()
    dist: DistConfig = section(DistConfig())

    job_outputs = staticmethod(checkpoints_and_metrics_in)


class LlmWorkload(Workload):
    """A preset's arguments of `python -m trainer.llm`."""
    config = LlmJobConfig
