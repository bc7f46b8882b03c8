"""trainer.vision's metrics: images/s per rank and in total, the time each step waited for the
data loader (an input-bound run shows here first), epoch time and validation accuracy.

Two kinds of JSON line go to the metrics file (rank 0): "step" every log_every steps and "epoch"
after each epoch's evaluation. trainer.plot draws both; `trainer.plot scaling` compares the epoch
lines of runs at different world sizes.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch
import torch.distributed as dist

from config.workloads.common import MetricsConfig
from trainer.cli import open_for_append
from trainer.late_read import LateRead
from trainer.log import log


class VisionMetrics:
    """The host never waits for the device in a step: each step's loss and non-finite flag are
    copied to pinned memory without blocking and read LAG_STEPS steps later (trainer/late_read.py,
    as trainer.batching.NonFiniteSteps reads its count), so the line of step s is written after
    step s + LAG_STEPS was queued. Its time window runs between the host's hand-over of the
    window's first and last step: the host queues at most LAG_STEPS steps ahead of the device, so
    over a window of log_every steps that is the device's pace. An epoch's end and close() read
    what is still pending (waiting for the device), so every step gets its line. With more than one
    rank a line's means over ranks take a collective whose result the host reads: one wait for
    the device per log_every steps, as trainer.metrics' lines make."""

    def __init__(self, cfg: MetricsConfig, rt, batch_size: int):
        """`batch_size`: the images each rank trains on per step."""
        self.rt, self.log_every, self.batch_size = rt, cfg.log_every, batch_size
        self.file = None
        if rt.is_main and cfg.file:
            self.file = open_for_append(Path(cfg.file), "--metrics-file")
        self.late = LateRead(rt.device)
        self.step_wait = 0.0  # the data wait of the step being run
        self.epoch_start(0)

    def _window(self, start: float) -> None:
        self.w_start, self.w_steps, self.w_wait, self.w_skipped, self.w_loss = start, 0, 0.0, 0, 0.0

    def epoch_start(self, epoch: int) -> None:
        self.e_start, self.e_steps, self.e_wait, self.e_loss = time.perf_counter(), 0, 0.0, 0.0
        self.e_skipped = 0
        self._window(self.e_start)

    def data_wait(self, seconds: float) -> None:
        self.step_wait += seconds

    def _mean_and_max(self, values: list[float]) -> tuple[list[float], list[float]]:
        """Each value's mean and maximum over ranks (one collective for all of them)."""
        if self.rt.world_size == 1:
            return values, values
        t = torch.tensor(values + [-v for v in values], dtype=torch.float64)
        s = t.clone()
        if self.rt.device.type == "cuda":
            t, s = t.to(self.rt.device), s.to(self.rt.device)
        dist.all_reduce(s, op=dist.ReduceOp.SUM)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        n = len(values)
        return [v / self.rt.world_size for v in s[:n].tolist()], t[:n].tolist()

    def step_done(self, step: int, epoch: int, loss: torch.Tensor, lr: float, *,
                  skipped: torch.Tensor | bool = False) -> None:
        """`loss`: this rank's mean loss of the step, on the device; `skipped` (1.0 on the device as
        NonFiniteSteps decides it, or a bool): the step's loss was not finite and the optimizer did
        not step; its loss is left out of the means (it would make them NaN) and counted instead.
        Nothing is read from the device here but the values of LAG_STEPS steps ago."""
        if not isinstance(skipped, torch.Tensor):
            skipped = torch.full((), float(skipped), device=loss.device)
        self.late.push(torch.stack([loss.detach().float(), skipped.detach().float()]),
                       tag=(step, epoch, lr, self.step_wait, time.perf_counter()))
        self.step_wait = 0.0
        for tag, value in self.late.due():
            self._count(tag, value)

    def _flush(self) -> None:
        """Every step still pending, waiting for the device where needed."""
        for tag, value in self.late.drain():
            self._count(tag, value)

    def _count(self, tag: tuple, value: list[float]) -> None:
        step, epoch, lr, wait, queued_at = tag
        loss, skipped = value
        self.w_steps += 1
        self.e_steps += 1
        self.w_wait += wait
        self.e_wait += wait
        if skipped:
            self.w_skipped += 1
            self.e_skipped += 1
        else:
            self.w_loss += loss
            self.e_loss += loss
        if step % self.log_every == 0:
            self._line(step, epoch, lr, queued_at)

    def _line(self, step: int, epoch: int, lr: float, queued_at: float) -> None:
        window_loss = self.w_loss / max(1, self.w_steps - self.w_skipped)
        elapsed = queued_at - self.w_start
        (loss_mean, wait_mean), (_, wait_max) = self._mean_and_max([window_loss, self.w_wait / self.w_steps])
        per_rank = self.w_steps * self.batch_size / elapsed if elapsed > 0 else 0.0
        counted = self.w_steps > self.w_skipped  # the same on every rank: skips are agreed
        record = {"kind": "step", "step": step, "epoch": epoch, "loss": round(loss_mean, 5) if counted else None,
                  "lr": lr,
                  "images_per_sec": round(per_rank * self.rt.world_size, 1),
                  "images_per_sec_per_rank": round(per_rank, 1),
                  "data_wait_ms": round(1000 * wait_mean, 2), "data_wait_ms_max_rank": round(1000 * wait_max, 2),
                  "world_size": self.rt.world_size, "nonfinite_steps": self.w_skipped}
        shown = loss_mean if counted else math.nan
        self._write(record, f"step {step:>6} | epoch {epoch} | loss {shown:.4f} | lr {lr:.3e} | "
                            f"img/s {record['images_per_sec']:,.0f} ({record['images_per_sec_per_rank']:,.0f}/rank) | "
                            f"data wait {record['data_wait_ms']:.1f} ms/step")
        self._window(queued_at)

    def train_done(self) -> None:
        """The epoch's training ends here; its time leaves out the evaluation that follows."""
        self._flush()
        if self.rt.device.type == "cuda":
            torch.cuda.synchronize(self.rt.device)
        self.e_time = time.perf_counter() - self.e_start

    def epoch_done(self, step: int, epoch: int, val: dict) -> dict:
        (loss_sum, wait, _), (_, _, time_max) = self._mean_and_max([self.e_loss, self.e_wait, self.e_time])
        steps = max(self.e_steps - self.e_skipped, 1)
        images = self.e_steps * self.batch_size * self.rt.world_size
        rate = images / time_max if time_max > 0 else None
        record = {"kind": "epoch", "step": step, "epoch": epoch, "loss": round(loss_sum / steps, 5),
                  "epoch_time_s": round(time_max, 3), "images_per_sec": round(rate, 1) if rate else None,
                  "images_per_sec_per_rank": round(rate / self.rt.world_size, 1) if rate else None,
                  "data_wait_fraction": round(wait / time_max, 4) if time_max > 0 else None,
                  "steps": self.e_steps, "world_size": self.rt.world_size, **val}
        self._write(record, f"epoch {epoch} done | {self.e_steps} steps in {time_max:.1f} s | "
                            f"img/s {rate or 0:,.0f} | top-1 {val['top1']:.3f} | top-5 {val['top5']:.3f} | "
                            f"val loss {val['val_loss']:.4f} | data wait {100 * (record['data_wait_fraction'] or 0):.1f}%")
        return record

    def _write(self, record: dict, line: str) -> None:
        if self.rt.is_main:
            log(line)
            if self.file:
                self.file.write(json.dumps(record) + "\n")

    def close(self) -> None:
        """After the last step, a stop for preemption or too many non-finite steps: the pending
        steps' lines first (every rank closes at the same step, so their collectives match)."""
        try:
            self._flush()
        finally:
            if self.file:
                self.file.close()
