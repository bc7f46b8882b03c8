"""The sections every trainer workload shares: checkpoints, metrics, the global batch, the
process group's timeouts, and the seed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from config.options import option, positive_int, seed_int, switch, timeout_seconds


@dataclass(frozen=True)
class GlobalBatchConfig:
    """The batch: a micro-batch per rank, and the global batch each optimizer step trains on."""
    unit: ClassVar[str] = "samples"  # what one sample is, in help and error lines
    batch_size: int = option(32, "{unit} per rank per forward and backward pass (the micro-batch)", parse=positive_int)
    # None: the run's record (DIR/model.json), else ranks x batch_size (trainer/batching.py).
    global_batch_size: int | None = option(
        None, "{unit} per optimizer step over all ranks, the same on any number of ranks; each rank accumulates "
              "global / (ranks x --batch-size) micro-batches per step (default: the one the checkpoints were "
              "trained with, else ranks x --batch-size)", parse=positive_int)
    allow_global_batch_change: bool = switch("resume with another --global-batch-size than the checkpoints were "
                                             "trained with")


@dataclass(frozen=True)
class CheckpointConfig:
    """Checkpoints: where, how often, how many are kept (trainer/checkpoint.py)."""
    directory: str | None = option(None, "where checkpoints are saved and resumed from (none: no checkpoints)",
                                   flag="--checkpoint-dir")
    every: int = option(100, "optimizer steps between checkpoints; the last step saves too (trainer.vision: every "
                             "epoch's end too)", flag="--checkpoint-every", parse=positive_int)
    keep: int = option(2, "newest complete checkpoints kept; older ones are deleted", flag="--keep-checkpoints",
                       parse=positive_int)
    synchronous: bool = switch("save synchronously, the step waiting for the write (benchmarks compare)",
                               flag="--sync-checkpoint")
    allow_fresh_start: bool = switch("when checkpoints exist and every one of them is damaged, start the run from "
                                     "the beginning instead of stopping (they are kept)")


@dataclass(frozen=True)
class MetricsConfig:
    """Metrics: a line every few steps on rank 0, and a JSON-lines file."""
    log_every: int = option(10, "steps between metrics lines", parse=positive_int)
    file: str | None = option(None, "append metrics as JSON lines here (rank 0)", flag="--metrics-file")


@dataclass(frozen=True)
class DistConfig:
    """Process-group timeouts: every wait on another rank is bounded (trainer/dist.py)."""
    timeout_s: float = option(60.0, "seconds before a stuck training collective fails, once the first step is "
                                    "done (the worker exits and torchrun restarts it)",
                              flag="--dist-timeout", parse=timeout_seconds)
    # Joining the group, loading a checkpoint or Hugging Face weights and compiling the model take
    # minutes at scale: everything until the first step is done, and every checkpoint collective.
    startup_timeout_s: float = option(1800.0, "seconds before a stuck rendezvous, checkpoint or weight load, first "
                                              "step (compile warm-up) or checkpoint collective fails",
                                      flag="--startup-timeout", parse=timeout_seconds)


def max_nonfinite_steps(what: str) -> Any:
    """The limit of skipped non-finite steps in a row (trainer/batching.py NonFiniteSteps), one field
    per trainer; `what` names what is checked for being finite."""
    return option(10, f"stop (exit 3) after this many steps in a row with a non-finite {what}; each such step is "
                      "skipped, not applied", parse=positive_int)


def seed() -> Any:
    """The run's seed, one field per workload: the same initial weights, data order and
    synthetic data on any number of ranks."""
    return option(0, "seed of the initial weights, the order of the data, the augmentations and the synthetic "
                     "data", parse=seed_int)


def checkpoints_and_metrics_in(job_dir: str) -> dict[str, str]:
    """Where a preset's run keeps its checkpoints and its metrics file: the job's folder."""
    return {"checkpoint_dir": job_dir, "metrics_file": f"{job_dir}/metrics.jsonl"}
