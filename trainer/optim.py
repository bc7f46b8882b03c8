"""The optimizers and their schedules: AdamW for trainer.llm, SGD with momentum for
trainer.vision, both with a linear warm-up and a cosine decay; and the LLM schedule's
checkpointable state."""

from __future__ import annotations

import math

import torch

from config.workloads.llm import AdamWConfig
from config.workloads.vision import SgdConfig


def warmup_cosine_factor(done: float, warmup: float, total: float, *, floor: float = 0.0,
                         unit: float = 1.0) -> float:
    """The fraction of the peak rate for the next `unit` of progress after `done` (steps, or images
    for trainer.vision, whose schedule must not depend on the world size): linear warm-up over
    `warmup`, then a cosine down to `floor` at `total`."""
    if done < warmup:
        return min(1.0, (done + unit) / warmup)
    progress = (done - warmup) / max(unit, total - warmup)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return floor + (1 - floor) * cosine


# --- trainer.llm ---------------------------------------------------------------------------------

def warmup_cosine(cfg: AdamWConfig, total_steps: int):
    """Linear warm-up to the peak rate, then a cosine down to min_lr_ratio of it at the last step."""
    def factor(step: int) -> float:  # `step` is the number of optimizer steps already taken
        return warmup_cosine_factor(step, cfg.warmup_steps, total_steps, floor=cfg.min_lr_ratio)
    return factor


def build_adamw(model: torch.nn.Module, cfg: AdamWConfig, total_steps: int):
    """Fused AdamW at cfg.lr (resolved: trainer/llm_job.py) on every device, and its LambdaLR
    schedule. The fused kernel updates all parameters in one kernel per device and dtype, and it
    takes a `found_inf` tensor (trainer/batching.py NonFiniteSteps sets it) with which the skip of
    a non-finite step is decided on the device, so the host never waits to know it. torch 2.13 has
    fused kernels for CPU and CUDA; left to itself it picks foreach only on CUDA, XPU and MTIA and,
    on a CPU, a loop over the parameters that was 3.5-5x slower than fused here (13 tensors, 44M
    parameters)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay,
                                  fused=True)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(cfg, total_steps))


class TrainState:
    """The scheduler, saved with the model so a resumed run picks up the same rate. The step is
    the checkpoint folder's own number; the data position is saved beside it (trainer/data.py)."""

    def __init__(self, scheduler):
        self.scheduler = scheduler

    def state_dict(self) -> dict:
        return {"scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.scheduler.load_state_dict(state["scheduler"])


# --- trainer.vision ------------------------------------------------------------------------------

# Devices with torch's fused SGD kernel (torch._fused_sgd_): in torch 2.13, CUDA and CPU among
# others (torch.utils._foreach_utils._get_fused_kernels_supported_devices). Elsewhere foreach,
# which 2.13 implements for CUDA and not for CPU (_get_foreach_kernels_supported_devices).
FUSED_SGD_DEVICES = ("cuda", "cpu")


def build_sgd(model: torch.nn.Module, cfg: SgdConfig) -> torch.optim.SGD:
    """SGD with momentum over the model's parameters (on their device), fused where torch has the
    kernel: one pass over all parameters instead of a kernel per tensor and operation."""
    # Weight decay on norm scales and biases only shrinks them for nothing; the usual recipe skips them.
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    fused = next(model.parameters()).device.type in FUSED_SGD_DEVICES
    return torch.optim.SGD([{"params": decay, "weight_decay": cfg.weight_decay},
                            {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, momentum=cfg.momentum,
                           fused=fused or None, foreach=None if fused else True)


def image_learning_rate(cfg: SgdConfig, epochs: int, global_batch: int, images_seen: int, epoch_images: int) -> float:
    """Peak = lr · global_batch / 256 (cfg.lr is per 256 images); linear warm-up over
    warmup_epochs, then a cosine to zero at the last epoch. Driven by images seen, so it continues
    unchanged at another world size."""
    peak = cfg.lr * global_batch / 256
    return peak * warmup_cosine_factor(images_seen, cfg.warmup_epochs * epoch_images, epochs * epoch_images,
                                       unit=global_batch)
