"""Values the device computes in a step, read by the host a fixed number of steps later.

Reading a value of the step just queued (`.item()`, `bool(t)`) makes the host wait until the
device has run everything queued before the read: the GPU then idles while the host prepares the
next step (its batch, its first all-gather). Instead, each value is copied without blocking into
pinned host memory behind a CUDA event, and the host reads it LAG_STEPS pushes (steps) later, when
the device has long finished that step. The event is queried first; the host waits on it only when
it has run more than LAG_STEPS steps ahead of the device, a wait that still leaves those steps
queued, so the GPU never idles for it. (set_sync_debug_mode does not count event waits; the
one-GPU test in tests/trainer/test_step_syncs.py counts the stream synchronisations it does see.)

A decision taken on such a value (stop for preemption, stop after too many non-finite steps) is
taken at the same step on every rank: the step the value was computed in plus LAG_STEPS, whatever
each rank's timing.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import torch

# Steps between a value's step and the step whose end reads it. Two: the host may queue up to two
# steps ahead of the device before it waits, so a pause on the host (a slow batch, a collection
# of Python garbage) shorter than about a step never reaches the GPU.
# config/checkpoint_time.py STEPS_AFTER_SIGNAL counts it (a test checks they agree).
LAG_STEPS = 2


class LateRead:
    def __init__(self, device: torch.device, lag: int = LAG_STEPS):
        self.device, self.lag = device, lag
        self.pending: deque[tuple[Any, torch.Tensor, torch.cuda.Event | None]] = deque()
        self.spare: list[tuple[torch.Tensor, torch.cuda.Event]] = []  # pinned buffers and events to reuse
        self.waits = 0  # reads that had to wait for the device (the host was more than `lag` steps ahead)

    def push(self, value: torch.Tensor, tag: Any = None) -> None:
        """Queue the copy of `value` (a small tensor on the device) to the host; `tag` comes back with it."""
        if self.device.type != "cuda":
            self.pending.append((tag, value.detach().clone(), None))
            return
        host, event = self.spare.pop() if self.spare else (
            torch.empty(value.shape, dtype=value.dtype, pin_memory=True), torch.cuda.Event())
        host.copy_(value.detach(), non_blocking=True)
        event.record()
        self.pending.append((tag, host, event))

    def due(self) -> list[tuple[Any, list]]:
        """(tag, value as a list) of each push made `lag` or more pushes ago, oldest first."""
        out = []
        while len(self.pending) > self.lag:
            out.append(self._take())
        return out

    def drain(self) -> list[tuple[Any, list]]:
        """Everything pushed so far, waiting for the device where needed (the end of a run or an epoch)."""
        out = []
        while self.pending:
            out.append(self._take())
        return out

    def _take(self) -> tuple[Any, list]:
        tag, host, event = self.pending.popleft()
        if event is not None and not event.query():
            self.waits += 1
            event.synchronize()
        value = host.reshape(-1).tolist()  # a host tensor: no device synchronisation
        if event is not None:
            self.spare.append((host, event))
        return tag, value
