"""SIGTERM (a pod being evicted or drained; torchrun forwards it) asks for a checkpoint and an
exit that says the run is not finished.

A worker that stops early exits EXIT_PREEMPTED (128 + SIGTERM), on every rank, not only on the
one whose pod got the signal: the Training Operator marks an elastic PyTorchJob Succeeded as soon
as any worker pod succeeds, so a worker that exited 0 here would end the whole run, reported
green. Only a run that reached its last step exits 0.
"""

from __future__ import annotations

import signal

import torch

from config.kubernetes import EXIT_PREEMPTED
from trainer import dist as tdist
from trainer.late_read import LateRead
from trainer.log import log

BAD_DATA = 2.0  # above a stop request's 1.0: the all-reduce's maximum keeps it


class Preemption:
    """The signal can reach ranks at different steps, so they agree through an all-reduce of a flag
    each step. The host reads the agreed flag LAG_STEPS steps later (trainer/late_read.py), never at
    once: reading it at once would make the host wait for the device every step and leave the GPU
    idle while the next step is queued. Every rank therefore stops at the same step, LAG_STEPS steps
    after the one the first signal arrived in (config/checkpoint_time.py counts them).
    """

    def __init__(self, rt: tdist.Runtime):
        self.rt, self.requested = rt, False
        self.bad_data = False  # the agreed flag was BAD_DATA: a rank's data a few steps ahead is unusable
        self.late = LateRead(rt.device)
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame):
        self.requested = True

    def agreed(self, *, now: bool = False, bad_data: bool = False) -> bool:
        """True once any rank has been asked to stop: as of LAG_STEPS calls ago or, with `now` (the
        last step of a run or an epoch, which then waits for the device), as of this call.
        `bad_data` (this rank's data of a later step is unusable) rides on the same flag, so that
        every rank learns of it without a collective of its own; `self.bad_data` says it was that."""
        # fill_ launches a kernel with the value as an argument; building the tensor from a host
        # list would copy from pageable memory, which synchronises the stream every step.
        flag = torch.empty(1, device=self.rt.device).fill_(BAD_DATA if bad_data else 1.0 if self.requested else 0.0)
        if torch.distributed.is_initialized():  # on one rank too: one GPU then runs the cluster's path
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        self.late.push(flag)
        values = [value[0] for _, value in (self.late.drain() if now else self.late.due())]
        self.bad_data = any(v >= BAD_DATA for v in values)
        return any(v > 0 for v in values)

    def stopped_at(self, where: str) -> None:
        """Say, on every rank (each pod's log shows it), that the loop stops early, its checkpoint
        complete."""
        log(f"SIGTERM: checkpoint saved at {where}; exiting with status {EXIT_PREEMPTED} so that the job "
            f"restarts and resumes from it (rank {self.rt.rank})")

    def exit_status(self, *, finished: bool) -> int:
        """0 only for a run that reached its end; EXIT_PREEMPTED for one that stopped early."""
        return 0 if finished else EXIT_PREEMPTED
