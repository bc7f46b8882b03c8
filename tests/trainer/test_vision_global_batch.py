"""trainer.vision's global batch: one rank accumulating two micro-batches and two ranks with one
each train the same steps; the global batch is part of the run's record and divides or is refused."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torchvision", reason="torchvision is a pinned dependency")

from trainer.checkpoint import step_dir  # noqa: E402
from trainer_procs import REPO, job_env, run, torchrun_args  # noqa: E402

pytestmark = pytest.mark.slow


def vision(directory, *extra) -> list[str]:
    return ["--image-size", "16", "--batch-size", "16", "--workers", "0", "--train-samples", "256",
            "--val-samples", "32", "--epochs", "1", "--lr", "0.2", "--warmup-epochs", "0", "--log-every", "1",
            "--metrics-file", str(directory / "m.jsonl"), "--dist-timeout", "30", *extra]


def steps(directory) -> dict[int, dict]:
    lines = map(json.loads, (directory / "m.jsonl").read_text().splitlines())
    return {r["step"]: r for r in lines if r["kind"] == "step"}


def step_losses(directory) -> list[float]:
    lines = map(json.loads, (directory / "m.jsonl").read_text().splitlines())
    return [r["loss"] for r in lines if r["kind"] == "step"]


def test_one_rank_and_two_ranks_with_the_same_global_batch_train_the_same_steps(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    rc, out = run(torchrun_args("trainer.vision", vision(one, "--global-batch-size", "32"), nproc=1), timeout=300)
    assert rc == 0, out
    assert "world size 1, global batch 32;" in out and "2 micro-batch(es) of 16 per rank" in out
    rc, out = run(torchrun_args("trainer.vision", vision(two, "--global-batch-size", "32"), nproc=2), timeout=300)
    assert rc == 0, out
    a, b = step_losses(one), step_losses(two)
    assert len(a) == len(b) == 256 // 32
    # The same images, micro-batches and augmentations: only the order of float sums differs, which
    # BatchNorm at a rate of 0.2 amplifies a little by the eighth step.
    assert b == pytest.approx(a, rel=5e-3)
    assert a[-1] < a[0]


def _vision(directory, *extra) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainer.vision", *vision(directory, "--checkpoint-dir",
                                                                           str(directory), *extra)],
                          cwd=REPO, env=job_env(), capture_output=True, text=True, timeout=300)


def test_the_global_batch_is_recorded_and_one_that_does_not_divide_is_one_line(tmp_path):
    bad = _vision(tmp_path, "--global-batch-size", "24")
    assert bad.returncode == 2 and "step " not in bad.stdout
    assert bad.stderr.strip() == ("error: --global-batch-size: --global-batch-size 24 is not a multiple of 1 ranks x "
                                  "--batch-size 16 = 16; choose a multiple, or another --batch-size")
    first = _vision(tmp_path, "--global-batch-size", "32", "--train-samples", "64")
    assert first.returncode == 0, first.stderr[-2000:]
    assert json.loads((tmp_path / "model.json").read_text())["global_batch_size"] == 32
    changed = _vision(tmp_path, "--global-batch-size", "64", "--train-samples", "64", "--epochs", "2")
    assert changed.returncode == 2 and "global batch of 32 images, not 64" in changed.stderr
    # The checkpoints' global batch is kept, so the hint names what changes it: the flag, not just a multiple.
    kept = _vision(tmp_path, "--batch-size", "24", "--train-samples", "64", "--epochs", "2")
    assert kept.returncode == 2 and "step " not in kept.stdout
    assert kept.stderr.strip() == (
        "error: --global-batch-size: the checkpoints' global batch 32 is not a multiple of 1 ranks x --batch-size 24 "
        "= 24; choose another --batch-size, or pass a multiple as --global-batch-size with "
        "--allow-global-batch-change")
    allowed = _vision(tmp_path, "--batch-size", "24", "--global-batch-size", "48", "--allow-global-batch-change",
                      "--train-samples", "64", "--epochs", "2")
    assert allowed.returncode == 0, allowed.stderr[-2000:]
    assert json.loads((tmp_path / "model.json").read_text())["global_batch_size"] == 48


def test_a_two_rank_checkpoint_resumes_mid_epoch_on_three_ranks_with_the_losses_of_the_uninterrupted_run(tmp_path):
    # A node added to an elastic job: the group re-forms larger. The same global batch (48 = 2 x 3 x 8
    # = 3 x 2 x 8), the same images from the saved global position, so the same step losses and rates.
    two, three = tmp_path / "two", tmp_path / "three"
    args = ["--batch-size", "8", "--train-samples", "480", "--checkpoint-every", "4", "--keep-checkpoints", "10"]
    rc, out = run(torchrun_args("trainer.vision", [*vision(two, "--global-batch-size", "48", "--checkpoint-dir",
                                                           str(two)), *args], nproc=2), timeout=300)
    assert rc == 0, out
    three.mkdir()
    shutil.copytree(step_dir(two, 8), step_dir(three, 8))
    shutil.copy(two / "model.json", three / "model.json")
    rc, out = run(torchrun_args("trainer.vision", [*vision(three, "--checkpoint-dir", str(three)), *args], nproc=3),
                  timeout=300)
    assert rc == 0, out
    assert "world size 3, global batch 48; starting at epoch 0, image 384 of 480 (step 8); 2 micro-batch(es)" in out
    before, after = steps(two), steps(three)
    assert sorted(after) == [9, 10]  # the epoch's last two steps, numbered on from the checkpoint
    for step in (9, 10):
        assert after[step]["lr"] == pytest.approx(before[step]["lr"])
        assert after[step]["loss"] == pytest.approx(before[step]["loss"], rel=5e-3)
