"""trainer.llm's step loop never makes the host wait for the GPU: the host-device
synchronisations of a run do not grow with its number of steps. Needs a GPU; skipped elsewhere.

CUDA's sync debug mode warns on every stream or device synchronisation torch makes (a tensor read
with .item() or .tolist(), a copy to pageable memory, torch.cuda.synchronize). Two runs of the same
job, N and 2N steps, make the same start-up and end-of-run synchronisations (the first step's
warm-up, the last metrics line); any difference is N times the synchronisations per step.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from trainer import dist as tdist
from trainer import llm
from trainer.llm_job import parse_job

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="counts CUDA synchronisations: needs a GPU")

STEPS = 6


@pytest.fixture(scope="module")
def rt():
    runtime = tdist.init()
    yield runtime
    tdist.shutdown()


def synchronisations(rt, steps: int, fsdp: str) -> int:
    # One metrics line (the last step's) and no checkpoints: the only syncs a run must make.
    job = parse_job(["--model", "tiny", "--steps", str(steps), "--batch-size", "2", "--seq-len", "64",
                     "--log-every", "1000", "--warmup-steps", "1", "--fsdp", fsdp])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            assert llm.train(job, rt, 2) == 0
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchronizing" in str(w.message) for w in caught)


@pytest.mark.parametrize("fsdp", ["auto", "always"])  # one process: plain, and FSDP2 as on a cluster
def test_a_training_step_makes_no_host_device_synchronisation(rt, fsdp):
    # The first run in a process also pays one-off synchronisations (CUDA and cuBLAS start-up, the
    # caching allocator's first blocks): on an H200 it made 3 in 6 steps where the next made 2 in 12.
    synchronisations(rt, 2, fsdp)
    short = synchronisations(rt, STEPS, fsdp)
    long = synchronisations(rt, 2 * STEPS, fsdp)
    assert (long - short) / STEPS == 0, f"{short} synchronisations in {STEPS} steps, {long} in {2 * STEPS}"
