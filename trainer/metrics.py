"""Training metrics on rank 0: loss, learning rate, throughput, MFU and peak memory.

MFU = achieved model FLOPs per second per device / the device's peak dense bf16 FLOPs. The peak
comes from config.instance_types, the table the node groups are built from: by the instance type
when the job says which (TRAINER_INSTANCE_TYPE, set by the job chart), else by the GPU's name.
On CPU there is no meaningful peak, and MFU is null rather than a made-up number.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from config.instance_types import INSTANCE_TYPES, PEAK_BF16_BY_DEVICE_NAME
from trainer.cli import open_for_append
from trainer.dist import all_reduce_mean
from trainer.log import log


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    instance = INSTANCE_TYPES.get(os.environ.get("TRAINER_INSTANCE_TYPE", ""))
    if instance and instance.peak_bf16_flops:
        return instance.peak_bf16_flops
    name = torch.cuda.get_device_name(device)
    for model, flops in PEAK_BF16_BY_DEVICE_NAME.items():
        if model in name:
            return flops
    return None


def peak_memory_gib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    # ru_maxrss is in KiB on Linux: the process's peak resident set, the CPU analogue.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


@dataclass(frozen=True)
class MetricsConfig:
    log_every: int = 10
    metrics_file: str | None = None


class MetricsLogger:
    """Accumulates the loss, tokens and time between log steps; prints and appends one JSON line
    each. The loss stays on the device between log lines: one synchronising all-reduce per line,
    none per step."""

    def __init__(self, cfg: MetricsConfig, rt, *, tokens_per_step_per_device: int, flops_per_token: float,
                 last_step: int):
        self.cfg, self.rt, self.last_step = cfg, rt, last_step
        self.is_main, self.device, self.world_size = rt.is_main, rt.device, rt.world_size
        self.tokens_per_step = tokens_per_step_per_device
        self.flops_per_token = flops_per_token
        self.peak = peak_flops(rt.device)
        self.file = None
        if self.is_main and cfg.metrics_file:
            self.file = open_for_append(Path(cfg.metrics_file), "--metrics-file")
        self.loss_sum, self.loss_count = torch.zeros((), device=rt.device), 0
        self.last_loss: float | None = None
        self.reset()

    def reset(self) -> None:
        """Start a new timing window (after start-up and compilation, after a checkpoint wait)."""
        self.window_start, self.window_steps = time.perf_counter(), 0

    def step_done(self, step: int, loss: torch.Tensor, lr: Callable[[], float]) -> None:
        self.loss_sum += loss.detach()
        self.loss_count += 1
        self.window_steps += 1
        if step % self.cfg.log_every == 0 or step == self.last_step:
            # The mean over the window and over ranks.
            self.last_loss = all_reduce_mean(self.loss_sum.item() / self.loss_count, self.rt)
            self.log(step, self.last_loss, lr())
            self.loss_sum.zero_()
            self.loss_count = 0

    def log(self, step: int, loss: float, lr: float) -> dict | None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        elapsed = time.perf_counter() - self.window_start
        per_device = self.window_steps * self.tokens_per_step / elapsed if elapsed > 0 else 0.0
        mfu = per_device * self.flops_per_token / self.peak if self.peak else None
        record = {
            "step": step, "loss": round(loss, 5), "lr": lr,
            "tokens_per_sec": round(per_device * self.world_size, 1),
            "tokens_per_sec_per_device": round(per_device, 1),
            "mfu": round(mfu, 4) if mfu is not None else None,
            "peak_mem_gib": round(peak_memory_gib(self.device), 3),
        }
        if self.device.type == "cuda":
            # Allocations the caching allocator had to retry after freeing its cache: each one
            # synchronises the device, so a rising count explains a throughput cliff near full memory.
            stats = torch.cuda.memory_stats(self.device)
            record["alloc_retries"] = stats.get("num_alloc_retries", 0)
            record["reserved_gib"] = round(stats.get("reserved_bytes.all.peak", 0) / 2**30, 3)
        if self.is_main:
            mfu_text = f"{100 * mfu:.1f}%" if mfu is not None else "n/a"
            log(f"step {step:>6} | loss {loss:.4f} | lr {lr:.2e} | tok/s {record['tokens_per_sec']:,.0f} "
                f"({record['tokens_per_sec_per_device']:,.0f}/device) | mfu {mfu_text} | "
                f"peak mem {record['peak_mem_gib']:.2f} GiB")
            if self.file:
                self.file.write(json.dumps(record) + "\n")
        self.reset()
        return record

    def close(self) -> None:
        if self.file:
            self.file.close()
