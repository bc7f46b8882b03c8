"""SIGTERM (a pod being evicted; torchrun forwards it) asks for a checkpoint and a clean exit."""

from __future__ import annotations

import signal

import torch

from trainer import dist as tdist


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
