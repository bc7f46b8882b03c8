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
from trainer.log import log


class Preemption:
    """The signal can reach ranks at different steps, so they agree through an all-reduce. Its
    result is read one step later: reading it at once would make the host wait for the device
    every step and leave the GPU idle while the next step is queued.
    """

    def __init__(self, rt: tdist.Runtime):
        self.rt, self.requested, self.inflight = rt, False, None
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame):
        self.requested = True

    def agreed(self, *, now: bool = False) -> bool:
        """True once any rank has been asked to stop (as of the previous step, or now)."""
        if self.rt.world_size == 1:
            return self.requested
        # fill_ launches a kernel with the value as an argument; building the tensor from a host
        # list would copy from pageable memory, which synchronises the stream every step.
        flag = torch.empty(1, device=self.rt.device).fill_(1.0 if self.requested else 0.0)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        previous, self.inflight = self.inflight, flag
        if now:
            return bool(flag.item() > 0)
        return previous is not None and bool(previous.item() > 0)

    def stopped_at(self, where: str) -> None:
        """Say, on every rank (each pod's log shows it), that the loop stops early, its checkpoint
        complete."""
        log(f"SIGTERM: checkpoint saved at {where}; exiting with status {EXIT_PREEMPTED} so that the job "
            f"restarts and resumes from it (rank {self.rt.rank})")

    def exit_status(self, *, finished: bool) -> int:
        """0 only for a run that reached its end; EXIT_PREEMPTED for one that stopped early."""
        return 0 if finished else EXIT_PREEMPTED
