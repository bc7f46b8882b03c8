"""trainer.llm's and trainer.vision's step loops never make the host wait for the GPU: the
host-device synchronisations of a run do not grow with its number of steps. Needs a GPU; skipped
elsewhere.

CUDA's sync debug mode warns on every stream or device synchronisation torch makes (a tensor read
with .item() or .tolist(), a copy to pageable memory, torch.cuda.synchronize). Two runs of the same
job, N and 2N steps, make the same start-up and end-of-run synchronisations (the first step's
warm-up, the last metrics line; for vision the one epoch's end and its evaluation); any difference
is N times the synchronisations per step.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from trainer import dist as tdist
from trainer import llm, vision
from trainer.batching import GLOBAL_BATCH
from trainer.llm_job import parse_job
from trainer.vision_data import build_datasets

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="counts CUDA synchronisations: needs a GPU")

STEPS = 6


@pytest.fixture(scope="module")
def rt():
    runtime = tdist.init()
    yield runtime
    tdist.shutdown()


def counted(run) -> int:
    """The synchronisations `run()` makes; it must return 0 (the job's exit status)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            assert run() == 0
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchronizing" in str(w.message) for w in caught)


def synchronisations(rt, steps: int, fsdp: str) -> int:
    # One metrics line (the last step's) and no checkpoints: the only syncs a run must make.
    job = parse_job(["--model", "tiny", "--steps", str(steps), "--batch-size", "2", "--seq-len", "64",
                     "--log-every", "1000", "--warmup-steps", "1", "--fsdp", fsdp])
    return counted(lambda: llm.train(job, rt, 2))


VISION_BATCH = 8


def vision_synchronisations(rt, steps: int) -> int:
    # One epoch of `steps` steps on synthetic images (float, already the model's input: no loader
    # processes), no metrics line (--log-every beyond the run), no checkpoints; the epoch's end and
    # its one validation batch synchronise the same in every run.
    job = vision.parse_job(["--model", "resnet18", "--image-size", "32", "--batch-size", str(VISION_BATCH),
                            "--workers", "0", "--train-samples", str(steps * VISION_BATCH),
                            "--val-samples", str(VISION_BATCH), "--epochs", "1", "--warmup-epochs", "0",
                            "--log-every", "1000"])
    train_set, val_set, classes = build_datasets(job.data, job.synthetic, job.seed)
    record = {"workload": "vision", "model": job.model.name, "classes": classes,
              GLOBAL_BATCH: VISION_BATCH * rt.world_size}
    return counted(lambda: vision.train(job, rt, train_set, val_set, classes, record))


@pytest.mark.parametrize("fsdp", ["auto", "always"])  # one process: plain, and FSDP2 as on a cluster
def test_a_training_step_makes_no_host_device_synchronisation(rt, fsdp):
    # The first run in a process also pays one-off synchronisations (CUDA and cuBLAS start-up, the
    # caching allocator's first blocks): on an H200 it made 3 in 6 steps where the next made 2 in 12.
    synchronisations(rt, 2, fsdp)
    short = synchronisations(rt, STEPS, fsdp)
    long = synchronisations(rt, 2 * STEPS, fsdp)
    assert (long - short) / STEPS == 0, f"{short} synchronisations in {STEPS} steps, {long} in {2 * STEPS}"


def test_a_vision_training_step_makes_no_host_device_synchronisation(rt):
    # Before, the loop read the non-finite flag with bool() each step: one synchronisation per step.
    vision_synchronisations(rt, 2)  # one-off start-up synchronisations (cuDNN, the allocator)
    short = vision_synchronisations(rt, STEPS)
    long = vision_synchronisations(rt, 2 * STEPS)
    assert (long - short) / STEPS == 0, f"{short} synchronisations in {STEPS} steps, {long} in {2 * STEPS}"
