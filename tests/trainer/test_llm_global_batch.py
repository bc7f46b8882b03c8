"""trainer.llm's global batch under real torchrun: the same global batch logs the same losses on
1, 2 and 4 ranks, fresh or resumed from another world size's checkpoint; the global batch is part
of the run's record; a non-finite loss skips the step and N in a row stop the run."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time

import pytest

from config.workloads.llm import AdamWConfig
from trainer.checkpoint import step_dir
from trainer.optim import warmup_cosine
from trainer_procs import REPO, job_env, lone_rank_env, run, torchrun_args

pytestmark = pytest.mark.slow

# tiny-moe: the load-balancing loss is world-size independent too, since every world size cuts
# the same micro-batches from the global batch.
BASE = ["--model", "tiny-moe", "--steps", "6", "--batch-size", "2", "--seq-len", "32", "--log-every", "1",
        "--checkpoint-every", "3", "--dist-timeout", "30"]
GLOBAL = ["--global-batch-size", "8"]
SAME = 0.002  # relative: "the same losses" allowing for another order of float sums


def metrics(path) -> dict[int, dict]:
    return {r["step"]: r for r in map(json.loads, path.read_text().splitlines())}


def llm_run(directory, *extra, nproc: int):
    rc, out = run(torchrun_args("trainer.llm", [*BASE, *extra, "--checkpoint-dir", str(directory),
                                                "--metrics-file", str(directory / "m.jsonl")], nproc=nproc),
                  timeout=300)
    assert rc == 0, out
    return out, metrics(directory / "m.jsonl")


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """The uninterrupted run: 2 ranks x 2 micro-batches of 2 sequences."""
    directory = tmp_path_factory.mktemp("two-ranks")
    out, logged = llm_run(directory, *GLOBAL, nproc=2)
    assert "Global batch 8 sequences (256 tokens) per step: 2 micro-batch(es) of 2 per rank" in out
    return directory, logged


def assert_same_losses(got: dict[int, dict], expected: dict[int, dict], steps) -> None:
    for step in steps:
        for key in ("loss", "moe_aux_loss", "grad_norm"):
            assert got[step][key] == pytest.approx(expected[step][key], rel=SAME), (step, key, got[step], expected[step])
        assert got[step]["lr"] == pytest.approx(expected[step]["lr"])


def test_fresh_runs_on_one_and_two_ranks_with_the_same_global_batch_log_the_same_losses(two_ranks, tmp_path):
    _, expected = two_ranks
    out, one = llm_run(tmp_path, *GLOBAL, nproc=1)
    assert "4 micro-batch(es) of 2 per rank" in out
    assert sorted(one) == sorted(expected) == [1, 2, 3, 4, 5, 6]
    assert_same_losses(one, expected, range(1, 7))
    assert one[6]["loss"] < one[1]["loss"]
    # The rate logged for step 1 is the one step 1 used: a third of the peak with 3 warm-up steps.
    assert one[1]["lr"] == pytest.approx(3e-3 / 3) and one[3]["lr"] == pytest.approx(3e-3)
    assert one[1]["tokens_per_sec"] is None and one[2]["tokens_per_sec"] > 0  # step 1 is warm-up
    assert all(r["nonfinite_steps_total"] == 0 and r["moe_aux_loss"] > 0 for r in one.values())


@pytest.mark.parametrize("nproc", [1, 4])
def test_a_two_rank_checkpoint_resumes_on_another_world_size_with_the_losses_of_the_uninterrupted_run(
        two_ranks, tmp_path, nproc):
    source, expected = two_ranks
    shutil.copytree(step_dir(source, 3), step_dir(tmp_path, 3))
    shutil.copy(source / "model.json", tmp_path / "model.json")
    out, resumed = llm_run(tmp_path, nproc=nproc)  # no --global-batch-size: the record's
    assert re.search(r"Resumed from checkpoint \S+ \(step 3\)", out), out
    assert f"{8 // (2 * nproc)} micro-batch(es) of 2 per rank; starting at sample 24" in out
    assert sorted(resumed) == [4, 5, 6]
    assert_same_losses(resumed, expected, [4, 5, 6])


def _llm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainer.llm", "--seq-len", "16", "--log-every", "1", *args],
                          cwd=REPO, env=job_env(), capture_output=True, text=True, timeout=120)


def test_a_global_batch_that_does_not_divide_stops_every_rank_in_one_line_before_the_process_group():
    # Rank 1 of 2 alone, with no rank 0 to meet: it must exit at once, not wait for a rendezvous.
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "trainer.llm", "--batch-size", "2", "--global-batch-size", "6",
                        "--dist-timeout", "60"], cwd=REPO, env=lone_rank_env(1, 2), capture_output=True, text=True,
                       timeout=60)
    assert time.monotonic() - t0 < 30
    assert p.returncode == 2
    assert p.stderr.strip() == ("error: --global-batch-size: --global-batch-size 6 is not a multiple of 2 ranks x "
                                "--batch-size 2 = 4; choose a multiple, or another --batch-size")


def test_the_global_batch_is_kept_on_resume_and_changes_only_with_the_flag(tmp_path):
    first = _llm("--steps", "2", "--batch-size", "2", "--global-batch-size", "4", "--checkpoint-dir", str(tmp_path))
    assert first.returncode == 0, first.stderr[-2000:]
    assert json.loads((tmp_path / "model.json").read_text())["global_batch_size"] == 4
    changed = _llm("--steps", "3", "--batch-size", "2", "--global-batch-size", "8", "--checkpoint-dir", str(tmp_path))
    assert changed.returncode == 2 and "step " not in changed.stdout
    assert changed.stderr.strip() == (
        "error: --global-batch-size: the checkpoints were trained with a global batch of 4 sequences, not 8; pass "
        "--allow-global-batch-change to change it, or drop --global-batch-size to keep it")
    allowed = _llm("--steps", "3", "--batch-size", "2", "--global-batch-size", "8", "--allow-global-batch-change",
                   "--checkpoint-dir", str(tmp_path))
    assert allowed.returncode == 0, allowed.stderr[-2000:]
    assert "Global batch 8 sequences" in allowed.stdout and "starting at sample 8" in allowed.stdout
    assert json.loads((tmp_path / "model.json").read_text())["global_batch_size"] == 8
    kept = _llm("--steps", "4", "--batch-size", "4", "--checkpoint-dir", str(tmp_path))
    assert kept.returncode == 0, kept.stderr[-2000:]
    assert "Global batch 8 sequences (128 tokens) per step: 2 micro-batch(es) of 4" in kept.stdout
    assert "starting at sample 16" in kept.stdout


def test_non_finite_steps_are_skipped_on_every_rank_counted_and_stop_the_run_lag_steps_after_n_in_a_row(tmp_path):
    # A rate of 1e12 is a real divergence: step 1's update overflows the weights and every later
    # loss is NaN.
    rc, out = run(torchrun_args("trainer.llm", ["--model", "tiny", "--steps", "20", "--batch-size", "2",
                                                "--seq-len", "32", "--lr", "1e12", "--warmup-steps", "0",
                                                "--max-nonfinite-steps", "3", "--log-every", "1",
                                                "--metrics-file", str(tmp_path / "m.jsonl")], nproc=2), timeout=300)
    assert rc != 0 and "exitcode: 3" in out, out
    # The count is read LAG_STEPS (2) steps late (trainer/late_read.py): the limit reached at step 4
    # stops every rank after step 6.
    line = ("error: steps 2 to 4: 3 steps in a row had a non-finite loss or gradient norm and were skipped "
            "(--max-nonfinite-steps 3); stopped after step 6. Lower --lr or check the data; the checkpoints hold "
            "the last good weights")
    assert out.count(line) == 1, out  # both ranks stop at the same step; the pod's local rank 0 says why
    assert "SUMMARY" not in out and "]: Traceback" not in out  # no worker traceback ([rankN]: prefixed)
    logged = metrics(tmp_path / "m.jsonl")
    assert sorted(logged) == [1, 2, 3, 4, 5, 6]
    assert logged[1]["loss"] > 0 and logged[1]["nonfinite_steps"] == 0
    for step in (2, 3, 4, 5, 6):
        assert logged[step]["loss"] is None and logged[step]["nonfinite_steps"] == 1
    assert logged[6]["nonfinite_steps_total"] == 5
    # A skipped step still advances the schedule: each line's rate is the cosine's at its step.
    schedule = AdamWConfig(lr=1e12, warmup_steps=0)
    for step, record in logged.items():
        assert record["lr"] == pytest.approx(1e12 * warmup_cosine(schedule, 20)(step - 1), rel=1e-9)
