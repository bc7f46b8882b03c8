"""The global batch, fixed for a run whatever the number of ranks, and what each step does with it.

A run trains on `global batch` samples (sequences, images) per optimizer step over all ranks;
each rank runs global / (ranks x micro-batch) forward and backward passes of its micro-batch per
step and accumulates their gradients (gradient accumulation). The value is part of the run's
record (DIR/model.json): a resume on another number of ranks keeps it, and changing it takes an
explicit flag. Only the accumulation changes with the world size.

Gradient reduction during accumulation: DDP (trainer.vision) skips its all-reduce on all but the
last micro-batch (`no_sync`). FSDP2 (trainer.llm) reduce-scatters every micro-batch, its default:
skipping it would keep every parameter's unsharded gradient on every rank until the last
micro-batch, the whole model's size in gradients (140 GB for 70B in bf16), which is what sharding
exists to avoid; the reduce-scatter overlaps the backward (pytorch/torchtitan#292, FSDP2's author).
"""

from __future__ import annotations

import contextlib
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from config.kubernetes import EXIT_NONFINITE
from config.workloads.common import GlobalBatchConfig
from trainer.cli import UsageError, WorkerExit
from trainer.late_read import LateRead

GLOBAL_BATCH = "global_batch_size"  # its key in the run's record (DIR/model.json)


def world_size_from_env() -> int:
    """The number of ranks torchrun started (WORLD_SIZE), known before the process group exists,
    so that a global batch that does not divide is one line on every rank, not a half-started job."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def resolve_global_batch(batch: GlobalBatchConfig, recorded: int | None, world_size: int) -> int:
    """The global batch this run trains with: --global-batch-size; else the one its checkpoints
    were trained with (`recorded`, from the run's record); else ranks x --batch-size. A resume that
    asks for another value than its checkpoints' needs --allow-global-batch-change."""
    requested, micro_batch, unit = batch.global_batch_size, batch.batch_size, batch.unit
    changed = requested is not None and recorded is not None and requested != recorded
    if changed and not batch.allow_global_batch_change:
        raise UsageError("--global-batch-size", f"the checkpoints were trained with a global batch of {recorded} "
                                                f"{unit}, not {requested}; pass --allow-global-batch-change to change "
                                                "it, or drop --global-batch-size to keep it")
    value = requested or recorded or world_size * micro_batch
    if value % (world_size * micro_batch):
        # The checkpoints' value changes only with the flag: a multiple alone would be refused above.
        source, hint = (("--global-batch-size", "choose a multiple, or another --batch-size") if requested else
                        ("the checkpoints' global batch", "choose another --batch-size, or pass a multiple as "
                                                          "--global-batch-size with --allow-global-batch-change"))
        raise UsageError("--global-batch-size", f"{source} {value} is not a multiple of {world_size} ranks x "
                                                f"--batch-size {micro_batch} = {world_size * micro_batch}; {hint}")
    return value


def micro_batch_sync(model: torch.nn.Module, *, last: bool):
    """Context for one micro-batch's forward and backward: DDP reduces only the last one's
    gradients (with everything accumulated so far); any other model reduces as it always does."""
    if isinstance(model, DistributedDataParallel) and not last:
        return model.no_sync()
    return contextlib.nullcontext()


class NonFiniteLoss(WorkerExit):
    """Too many optimizer steps in a row were skipped for a non-finite loss or gradient."""

    def __init__(self, message: str):
        super().__init__(message, EXIT_NONFINITE)


class NonFiniteSteps:
    """Decides, on the device and the same on every rank, whether a step's loss or gradient norm is
    not finite, and has the optimizer skip that step there: fused AdamW takes the decision as its
    `found_inf` (as GradScaler hands it) and leaves the parameters, its moments and its step count
    as they were. The host never reads the decision before the optimizer step. The learning-rate
    schedule still advances on a skipped step: a skipped step is a step of the run, whose data
    was consumed and whose number passed, so the rate stays a function of the step number.

    After `limit` skipped steps in a row the run stops: the model is not learning, and more steps
    only burn the allocation. The count is kept on the device and read LAG_STEPS steps late
    (trainer/late_read.py), so the run stops LAG_STEPS steps after the limit was reached, every
    rank at the same step; those steps are skipped too while the loss stays non-finite."""

    def __init__(self, rt, limit: int, optimizer: torch.optim.Optimizer):
        if not getattr(optimizer, "_step_supports_amp_scaling", False):
            raise ValueError("skipping non-finite steps on the device needs an optimizer that takes found_inf "
                             "(fused AdamW)")
        self.rt, self.limit, self.optimizer = rt, limit, optimizer
        self.in_a_row = torch.zeros((), device=rt.device)
        self.skipped = torch.zeros((), device=rt.device)  # in this run; read once, at its end
        self.abandoned = torch.zeros((), device=rt.device)  # 1.0 once any rank abandoned a step
        self.late = LateRead(rt.device)

    def check(self, step: int, *values: torch.Tensor, abandon: bool = False) -> torch.Tensor:
        """1.0 (a float tensor on the device) when any of `values` is not finite on any rank, or any
        rank `abandon`s the step (it has no data for it: trainer.vision), else 0.0; the optimizer's
        next step() applies nothing when it is 1.0. An abandoned step is not counted against the
        limit: its loss says nothing of the model."""
        bad = torch.stack([(~torch.isfinite(v.detach())).any() for v in values]).any().to(torch.float32)
        # fill_: the host's flag goes to the device as a kernel's argument, no copy that would synchronise
        flags = torch.stack([bad, torch.empty_like(bad).fill_(float(abandon))])
        if dist.is_initialized():
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        bad, skip = flags[0], flags.max()
        self.optimizer.found_inf = skip
        self.in_a_row = (self.in_a_row + 1) * bad
        self.skipped += bad
        self.abandoned = torch.maximum(self.abandoned, flags[1])
        self.late.push(self.in_a_row, tag=step)
        return skip

    @property
    def any_abandoned(self) -> bool:
        """Whether any rank abandoned a step of this run, up to the last one checked: the same on
        every rank. Waits for the device, so it is read only where the host waits anyway (a save)."""
        return bool(self.abandoned.item())

    @property
    def total(self) -> int:
        """Steps skipped in this run (waits for the device: for the run's summary)."""
        return int(self.skipped.item())

    def stop_at_limit(self, step: int, *, now: bool = False) -> None:
        """After step `step`'s metrics: NonFiniteLoss when a count read now (LAG_STEPS steps late;
        with `now`, the last step's too, waiting for the device) reached `limit`."""
        for counted, (in_a_row,) in (self.late.drain() if now else self.late.due()):
            if in_a_row >= self.limit:
                n = int(in_a_row)
                raise NonFiniteLoss(f"steps {counted - n + 1} to {counted}: {n} steps in a row had a non-finite loss "
                                    f"or gradient norm and were skipped (--max-nonfinite-steps {self.limit}); stopped "
                                    f"after step {step}. Lower --lr or check the data; the checkpoints hold the last "
                                    "good weights")
