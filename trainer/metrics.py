"""Training metrics on rank 0: loss (and a mixture of experts' load-balancing loss apart),
learning rate, gradient norm, skipped non-finite steps, throughput, MFU and peak memory.

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
from pathlib import Path

import torch
import torch.distributed as dist

from config.instance_types import INSTANCE_TYPES, PEAK_BF16_BY_DEVICE_NAME
from config.paths import output_file
from config.workloads.common import MetricsConfig
from trainer.cli import checked_path, open_for_append
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


def check_metrics_file(cfg: MetricsConfig) -> None:
    """Rank 0 opens the file after the model is built: a path it cannot write is found now."""
    if cfg.file:
        checked_path("--metrics-file", output_file, cfg.file)


class MetricsLogger:
    """Accumulates the step losses, gradient norms, tokens and time between log steps; prints and
    appends one JSON line each. Values stay on the device between log lines: one all-reduce and one
    host read per line, none per step.

    Each step hands in this rank's share of the step's mean over the global batch (its micro-batch
    losses, already divided by the number of micro-batches on all ranks), so the sum over ranks is
    the mean over the global batch whatever the world size. The first step of a run (compilation,
    allocator warm-up, the first collectives) is left out of the first throughput and MFU window."""

    def __init__(self, cfg: MetricsConfig, rt, *, tokens_per_step_per_device: int, flops_per_token: float,
                 last_step: int):
        self.cfg, self.rt, self.last_step = cfg, rt, last_step
        self.is_main, self.device, self.world_size = rt.is_main, rt.device, rt.world_size
        self.tokens_per_step = tokens_per_step_per_device
        self.flops_per_token = flops_per_token
        self.peak = peak_flops(rt.device)
        self.file = None
        if self.is_main and cfg.file:
            self.file = open_for_append(Path(cfg.file), "--metrics-file")
        # Over the window: the sums of the finite steps' loss share, aux loss share and gradient
        # norm, the number of finite steps and of skipped ones. Which steps were skipped is decided
        # on the device (trainer/batching.py NonFiniteSteps) and counted there too.
        self.sums = torch.zeros(5, dtype=torch.float64 if rt.device.type == "cpu" else torch.float32, device=rt.device)
        self.skipped_total = 0
        self.has_aux = False
        self.last_loss: float | None = None
        self.warm = False
        self.reset()

    def reset(self) -> None:
        """Start a new timing window (after the first step, after a checkpoint wait)."""
        self.window_start, self.window_steps = time.perf_counter(), 0

    def step_done(self, step: int, loss: torch.Tensor, aux: torch.Tensor | None, grad_norm: torch.Tensor, lr: float,
                  *, skipped: torch.Tensor | bool) -> None:
        """`loss` and `aux` are this rank's shares of the global-batch means; `lr` the rate this
        step was taken with; `skipped` (1.0 on the device, or True): the step was not applied (a
        non-finite loss or gradient), and its values stay out of the means. Nothing is read to
        the host here."""
        if not isinstance(skipped, torch.Tensor):
            skipped = torch.full((), float(skipped), device=self.device)
        skipped = skipped.to(self.sums.dtype)
        values = torch.stack([loss.detach(), aux.detach() if aux is not None else torch.zeros_like(loss),
                              grad_norm.detach()]).to(self.sums.dtype)
        self.sums += torch.cat([torch.where(skipped > 0, torch.zeros_like(values), values),
                                torch.stack([1 - skipped, skipped])])
        self.has_aux = self.has_aux or aux is not None
        if not self.warm:
            self._synchronize()
            self.warm = True
            self.reset()  # the first step's time is warm-up, not throughput
        else:
            self.window_steps += 1
        if step % self.cfg.log_every == 0 or step == self.last_step:
            self.log(step, lr)

    def _synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def log(self, step: int, lr: float) -> dict | None:
        sums = self.sums.clone()
        if self.world_size > 1:
            dist.all_reduce(sums)  # the loss shares add up to the global mean; the norm is the same on every rank
        # One host read, which also waits for the device. The gradient norm and the step counts are
        # the same on every rank: their sums over ranks are world_size times them.
        loss_sum, aux_sum, norm_sum, finite, skipped = sums.tolist()
        norm_sum, n, skipped = norm_sum / self.world_size, round(finite / self.world_size), \
            round(skipped / self.world_size)
        self.skipped_total += skipped
        loss = loss_sum / n if n else None
        self.last_loss = loss if loss is not None else self.last_loss
        elapsed = time.perf_counter() - self.window_start
        per_device = self.window_steps * self.tokens_per_step / elapsed if elapsed > 0 and self.window_steps else None
        mfu = per_device * self.flops_per_token / self.peak if self.peak and per_device else None
        record = {
            "step": step, "loss": round(loss, 5) if loss is not None else None, "lr": lr,
            "grad_norm": round(norm_sum / n, 5) if n else None,
            "nonfinite_steps": skipped, "nonfinite_steps_total": self.skipped_total,
            "tokens_per_sec": round(per_device * self.world_size, 1) if per_device else None,
            "tokens_per_sec_per_device": round(per_device, 1) if per_device else None,
            "mfu": round(mfu, 4) if mfu is not None else None,
            "peak_mem_gib": round(peak_memory_gib(self.device), 3),
        }
        if self.has_aux:
            record["moe_aux_loss"] = round(aux_sum / n, 5) if n else None
        if self.device.type == "cuda":
            # Allocations the caching allocator had to retry after freeing its cache: each one
            # synchronises the device, so a rising count explains a throughput cliff near full memory.
            stats = torch.cuda.memory_stats(self.device)
            record["alloc_retries"] = stats.get("num_alloc_retries", 0)
            record["reserved_gib"] = round(stats.get("reserved_bytes.all.peak", 0) / 2**30, 3)
        if self.is_main:
            log(self._line(record))
            if self.file:
                self.file.write(json.dumps(record) + "\n")
        self.sums.zero_()
        self.reset()
        return record

    @staticmethod
    def _line(r: dict) -> str:
        def num(value, fmt: str) -> str:
            return "n/a" if value is None else format(value, fmt)
        parts = [f"step {r['step']:>6}", f"loss {num(r['loss'], '.4f')}"]
        if "moe_aux_loss" in r:
            parts.append(f"aux {num(r['moe_aux_loss'], '.4f')}")
        parts += [f"lr {r['lr']:.2e}", f"grad norm {num(r['grad_norm'], '.3f')}"]
        if r["nonfinite_steps"]:
            parts.append(f"skipped {r['nonfinite_steps']} non-finite")
        per_device = r["tokens_per_sec_per_device"]
        parts.append(f"tok/s {num(r['tokens_per_sec'], ',.0f')} ({num(per_device, ',.0f')}/device)")
        parts.append("mfu n/a" if r["mfu"] is None else f"mfu {100 * r['mfu']:.1f}%")
        parts.append(f"peak mem {r['peak_mem_gib']:.2f} GiB")
        return " | ".join(parts)

    def close(self) -> None:
        if self.file:
            self.file.close()
