"""trainer.llm under torchrun with real faults: killed workers, a kill mid-checkpoint, a corrupt
checkpoint, preemption (SIGTERM) and a rendezvous that never completes. The faults that touch
the model's state run for the dense model and for the mixture of experts (sharded differently:
its expert weights along their rows)."""

from __future__ import annotations

import json
import os
import pickle
import re
import select
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from config.kubernetes import (
    EXIT_CHECKPOINT_READ_FAILED, EXIT_CHECKPOINTS_UNLOADABLE, EXIT_PREEMPTED, TORCHRUN_FAILED,
)
from crafted import CreatesMarker
from trainer.checkpoint import MARKER, list_steps, step_dir
from trainer.lease import LEASE_FILE, LOCK_FILE
from trainer_procs import REPO, Job, file_size_limited, llm_args, lone_rank_env, preempt, run, torchrun_args

pytestmark = pytest.mark.slow

RESUMED = re.compile(r"Resumed from checkpoint \S+ \(step (\d+)\)")
LOGGED = re.compile(r"^step\s+(\d+) \| loss ([\d.]+)")


MODELS = ["tiny", "tiny-moe"]


llm = llm_args


def logged_steps(output: str) -> list[int]:
    return [int(m[1]) for line in output.splitlines() if (m := LOGGED.search(line))]


def metrics(path) -> dict[int, dict]:
    return {r["step"]: r for r in map(json.loads, path.read_text().splitlines())}


@pytest.mark.parametrize("model", MODELS)
def test_loss_falls_and_resume_restores_model_optimizer_schedule_and_data_position_exactly(tmp_path, model):
    a, b = tmp_path / "a", tmp_path / "b"
    rc, out = run(torchrun_args("trainer.llm", llm(a, "--metrics-file", str(a / "m.jsonl"), model=model)))
    assert rc == 0, out
    ma = metrics(a / "m.jsonl")
    assert sorted(ma) == [5, 10, 15, 20]  # steps count from 1: the line for step N follows the N-th step
    for record in ma.values():
        assert {"step", "loss", "lr", "tokens_per_sec", "mfu"} <= record.keys() and record["mfu"] is None
    assert ma[20]["loss"] < ma[5]["loss"] - 0.5, ma
    assert list_steps(a) == [10, 20]

    # Resume from the step-10 checkpoint alone: steps 11..20 must retrace run a exactly.
    shutil.copytree(step_dir(a, 10), step_dir(b, 10))
    shutil.copy(a / "model.json", b / "model.json")
    rc, out = run(torchrun_args("trainer.llm", llm(b, "--metrics-file", str(b / "m.jsonl"), model=model)))
    assert rc == 0, out
    assert [int(s) for s in RESUMED.findall(out)] == [10]
    mb = metrics(b / "m.jsonl")
    assert sorted(mb) == [15, 20]
    for step in (15, 20):
        assert mb[step]["loss"] == pytest.approx(ma[step]["loss"], abs=1e-4)
        assert mb[step]["lr"] == pytest.approx(ma[step]["lr"])

    # A truncated newest checkpoint: fall back to the previous one, with a warning naming why.
    shard = step_dir(a, 20) / "__1_0.distcp"
    shard.write_bytes(shard.read_bytes()[:100])
    rc, out = run(torchrun_args("trainer.llm", llm(a, steps=25, model=model)))
    assert rc == 0, out
    assert re.search(r"WARNING: checkpoint \S+step-00000020 is damaged \(__1_0.distcp is truncated: 100 bytes", out), out
    assert [int(s) for s in RESUMED.findall(out)] == [10]
    assert logged_steps(out) == [15, 20, 25]
    # The run's own save of step 20 replaced the damaged folder, and retention kept it.
    assert list_steps(a) == [20, 25] and (step_dir(a, 20) / MARKER).exists()
    assert shard.stat().st_size > 100


def test_a_damaged_newer_checkpoint_stays_in_place_and_retention_keeps_what_the_run_resumes_from(tmp_path):
    rc, out = run(torchrun_args("trainer.llm", llm(tmp_path, steps=20)))
    assert rc == 0, out
    assert list_steps(tmp_path) == [10, 20]
    shard = step_dir(tmp_path, 20) / "__1_0.distcp"
    shard.write_bytes(shard.read_bytes()[:100])
    # Resume at 10 and save 15 with one checkpoint kept: the damaged step 20 must neither be
    # touched nor count as the one kept.
    rc, out = run(torchrun_args("trainer.llm", llm(tmp_path, "--keep-checkpoints", "1", steps=15, every=5)))
    assert rc == 0, out
    assert [int(s) for s in RESUMED.findall(out)] == [10]
    assert re.search(r"WARNING: checkpoint \S+step-00000020 is damaged .*; it stays in place", out), out
    assert list_steps(tmp_path) == [15, 20] and shard.stat().st_size == 100
    assert not list(tmp_path.glob("*unloadable*"))
    # The restart passes over it again; its own save of step 20 replaces it, and retention keeps that.
    rc, out = run(torchrun_args("trainer.llm", llm(tmp_path, "--keep-checkpoints", "1", steps=20, every=5)))
    assert rc == 0, out
    assert [int(s) for s in RESUMED.findall(out)] == [15]
    assert list_steps(tmp_path) == [20] and (step_dir(tmp_path, 20) / MARKER).exists()


def tree(directory) -> dict[str, int]:
    """Every file under `directory` with its size: what a run must leave as it was (its lease
    aside, which a run that stops early keeps for its restart)."""
    return {str(p.relative_to(directory)): p.stat().st_size for p in sorted(directory.rglob("*"))
            if p.is_file() and p.name not in (LEASE_FILE, LOCK_FILE)}


def test_when_every_checkpoint_is_damaged_each_attempt_stops_non_zero_and_changes_nothing(tmp_path):
    # One process writes them (the global batch that 2 ranks resume with, kept in model.json).
    rc, out = run([sys.executable, "-m", "trainer.llm", *llm(tmp_path, "--global-batch-size", "4", steps=10, every=5)])
    assert rc == 0, out
    assert list_steps(tmp_path) == [5, 10]
    truncated = step_dir(tmp_path, 10) / "__0_0.distcp"
    truncated.write_bytes(truncated.read_bytes()[:100])
    (step_dir(tmp_path, 5) / ".metadata").write_bytes(b"not a pickle")
    before = tree(tmp_path)
    for attempt in (1, 2):  # a restarted pod must find the same directory, not a "clean" one
        rc, out = run(torchrun_args("trainer.llm", llm(tmp_path, steps=20, every=5)))
        assert rc != 0, out
        assert re.search(rf"exitcode\s*:\s*{EXIT_CHECKPOINTS_UNLOADABLE}\b", out), out[-3000:]
        [message] = [line for line in out.splitlines() if line.startswith("error: none of the")]
        assert f"none of the 2 checkpoints in {tmp_path} loads" in message
        assert "step-00000010: __0_0.distcp is truncated: 100 bytes" in message
        assert "step-00000005: .metadata does not decode" in message and "--allow-fresh-start" in message
        assert not logged_steps(out), f"attempt {attempt} trained"
        assert tree(tmp_path) == before, f"attempt {attempt} changed the directory"
    rc, out = run([sys.executable, "-m", "trainer.llm", *llm(tmp_path, "--allow-fresh-start", steps=5, every=5)])
    assert rc == 0, out
    assert "--allow-fresh-start: none of the checkpoints" in out and logged_steps(out) == [5]
    assert (step_dir(tmp_path, 10) / "__0_0.distcp").stat().st_size == 100  # kept, damaged as it was


def older_trainers_checkpoint(path, scratch) -> None:
    """Rewrite the checkpoint at `path` as a trainer before the data position left it: the same
    model, optimizer and schedule, no "data" entry."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(str(path), str(scratch / "full.pt"))
    state = torch.load(scratch / "full.pt", weights_only=False)  # our own file, just written
    del state["data"]
    dcp.save(state, checkpoint_id=str(scratch / "older"), no_dist=True)
    for f in path.iterdir():
        if f.name != MARKER:
            f.unlink()
    for f in (scratch / "older").iterdir():
        shutil.copy(f, path / f.name)


def test_a_refused_checkpoint_stops_every_attempt_without_falling_back_or_starting_fresh(tmp_path):
    """Refused, not damaged: a crafted checkpoint (pickled code in its metadata) and one an older
    trainer wrote without the data position. Neither loads, no older one loads in its place, even
    --allow-fresh-start does not train over them, and nothing in the directory changes."""
    ckpt, scratch = tmp_path / "ckpt", tmp_path / "scratch"
    scratch.mkdir()
    rc, out = run([sys.executable, "-m", "trainer.llm", *llm(ckpt, steps=10, every=5)])
    assert rc == 0, out
    metadata = step_dir(ckpt, 10) / ".metadata"
    good = metadata.read_bytes()
    marker = tmp_path / "marker"
    metadata.write_bytes(pickle.dumps(CreatesMarker(marker)))
    before = tree(ckpt)
    rc, out = run([sys.executable, "-m", "trainer.llm", *llm(ckpt, "--allow-fresh-start", steps=20, every=5)])
    assert rc == EXIT_CHECKPOINTS_UNLOADABLE, out[-3000:]
    assert re.search(r"^error: checkpoint \S+step-00000010 is refused \(unsafe checkpoint: its metadata refers to "
                     r"\S+open, which a checkpoint never holds; refused without running it", out, re.M), out[-3000:]
    assert not marker.exists() and not RESUMED.search(out) and not logged_steps(out)
    assert tree(ckpt) == before and metadata.read_bytes() != good

    metadata.write_bytes(good)
    older_trainers_checkpoint(step_dir(ckpt, 10), scratch)
    before = tree(ckpt)
    rc, out = run([sys.executable, "-m", "trainer.llm", *llm(ckpt, "--allow-fresh-start", steps=20, every=5)])
    assert rc == EXIT_CHECKPOINTS_UNLOADABLE, out[-3000:]
    assert re.search(r"^error: checkpoint \S+step-00000010 is refused \(it has no 'data' entry, which this "
                     r"trainer resumes from", out, re.M), out[-3000:]
    assert not RESUMED.search(out) and not logged_steps(out) and "falling back" not in out
    assert tree(ckpt) == before and list_steps(ckpt) == [5, 10]


def test_a_transient_read_error_on_one_rank_stops_every_rank_and_leaves_every_checkpoint_in_place(tmp_path):
    rc, out = run([sys.executable, "-m", "trainer.llm",  # loads on 2 ranks too, with the global batch kept
                   *llm(tmp_path, "--global-batch-size", "4", steps=10, every=5)])
    assert rc == 0, out
    before = tree(tmp_path)
    argv = torchrun_args("trainer.llm", llm(tmp_path, steps=20, every=5))
    at = argv.index("-m", 3)  # torchrun runs the injecting script instead of the module
    rc, out = run([*argv[:at], str(REPO / "tests" / "trainer" / "inject_eio.py"), "llm", *argv[at + 2:]])
    assert rc != 0, out
    assert re.search(rf"exitcode\s*:\s*{EXIT_CHECKPOINT_READ_FAILED}\b", out), out[-3000:]
    assert re.search(r"error: checkpoint \S+step-00000010 could not be read \(rank 1: OSError: \[Errno 5\] "
                     r"Input/output error \(injected\)", out), out[-3000:]
    assert "falling back" not in out and not logged_steps(out)
    assert tree(tmp_path) == before and list_steps(tmp_path) == [5, 10]


def token_shards_with_one_bad_id(directory, *, step: int, rank: int) -> None:
    """64 windows of 65 tokens (llm_args' --seq-len 64) inside the tiny model's vocabulary of 1024,
    but for one id past it in a window that `rank` of two (a global batch of 4) reads at `step`.
    meta.json names no vocab_size, so nothing at start-up catches it."""
    from config.workloads.llm import SequenceBatchConfig, TokenDataConfig
    from trainer.data import RankBatches

    directory.mkdir()
    (directory / "meta.json").write_text(json.dumps({"dtype": "uint16", "shards": ["shard-00000.bin"]}))
    tokens = torch.randint(1024, (64 * 65,), generator=torch.Generator().manual_seed(0)).to(torch.int32)
    (directory / "shard-00000.bin").write_bytes(tokens.to(torch.uint16).numpy().tobytes())
    batches = RankBatches(TokenDataConfig(str(directory)), SequenceBatchConfig(batch_size=2, seq_len=64), seed=0,
                          rank=rank, world_size=2, vocab_size=1024, global_batch=4)
    [[sample, _]] = batches.step_samples((step - 1) * 4)
    tokens[batches.window(sample) * 65 + 5] = 5000
    (directory / "shard-00000.bin").write_bytes(tokens.to(torch.uint16).numpy().tobytes())


# Found at start-up (which checks the first LAG_STEPS + 1 steps), or by step 4's look-ahead (read at step 6).
@pytest.mark.parametrize("bad_step, trained", [(2, 0), (7, 6)])
def test_a_token_id_past_the_vocabulary_on_one_rank_stops_every_rank_with_the_same_line(tmp_path, bad_step, trained):
    # Only the rank that read the id stopped (exit 2); the other waited in the step's collectives,
    # for the collective timeout across nodes, or crashed with a traceback when its peer's socket closed.
    data, ckpt = tmp_path / "data", tmp_path / "ckpt"
    token_shards_with_one_bad_id(data, step=bad_step, rank=1)
    rc, out = run(torchrun_args("trainer.llm", llm(ckpt, "--data", str(data), "--log-every", "1", steps=20)))
    assert rc == TORCHRUN_FAILED, out[-3000:]
    line = (f"error: --data: {data / 'shard-00000.bin'} holds token id 5000, outside the model's vocabulary of 1024 "
            "(ids 0 to 1023)")
    # The two workers share torchrun's stderr; each writes its line whole (trainer.log), so none is split.
    assert [text for text in out.splitlines() if "error:" in text] == [line, line], out[-3000:]
    assert re.findall(r"exitcode\s*:\s*(-?\d+)", out) and set(re.findall(r"exitcode\s*:\s*(-?\d+)", out)) == {"2"}, \
        out[-3000:]
    assert "crashed" not in out and "failed unexpectedly" not in out
    # Every rank stopped before training on the bad batch, and kept the steps it did train.
    assert logged_steps(out) == list(range(1, trained + 1)), out[-3000:]
    assert list_steps(ckpt) == ([trained] if trained else [])


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("nproc_before, nproc_after", [(1, 2), (2, 1)])
def test_a_checkpoint_resumes_on_a_different_number_of_ranks(tmp_path, nproc_before, nproc_after, model):
    # One rank trains unsharded, two under FSDP2: the checkpoint crosses that boundary too. The
    # global batch of 4 is 2 micro-batches on one rank and 1 on two.
    rc, out = run(torchrun_args("trainer.llm", llm(tmp_path, "--global-batch-size", "4", steps=10, model=model),
                                nproc=nproc_before))
    assert rc == 0, out
    assert list_steps(tmp_path) == [10]
    rc, out = run(torchrun_args("trainer.llm", llm(tmp_path, steps=15, model=model), nproc=nproc_after))
    assert rc == 0, out
    assert "does not load" not in out, out
    assert [int(s) for s in RESUMED.findall(out)] == [10]
    assert logged_steps(out) == [15]


@pytest.mark.parametrize("model", MODELS)
def test_a_sigkilled_worker_restarts_and_resumes_losing_at_most_one_interval(tmp_path, model):
    every = 10
    job = Job(torchrun_args("trainer.llm", llm(tmp_path, steps=70, every=every, model=model), max_restarts=2))
    try:
        job.wait_for(r"Checkpoint saved: \S+step-00000020")
        before = max(logged_steps(job.output))
        job.kill_worker(1)
        rc = job.finish(timeout=200)
    finally:
        job.stop()
    out = job.output
    assert rc == 0, out
    resumed = [int(s) for s in RESUMED.findall(out)]
    assert resumed and resumed[0] >= before - every, (before, resumed)
    assert logged_steps(out)[-1] == 70 and '"steps": 70' in out
    assert list_steps(tmp_path)[-1] == 70


def test_a_kill_during_a_checkpoint_write_leaves_the_previous_checkpoint_loadable(tmp_path):
    # Rank 0's file of the step-20 checkpoint is a FIFO with no reader: its writer blocks inside
    # the save (in open) for as long as the test likes, so the kill lands mid-write by
    # construction. Rank 1's file appearing shows the save is under way on every rank.
    job = Job(torchrun_args("trainer.llm", llm(tmp_path, steps=30), max_restarts=1))
    try:
        # After start-up (resume clears unfinished checkpoint folders), well before step 20.
        job.wait_for(r"^step\s+5 ")
        target = step_dir(tmp_path, 20)
        target.mkdir(parents=True)
        os.mkfifo(target / "__0_0.distcp")
        other_rank_file = target / "__1_0.distcp"
        deadline = time.monotonic() + 90
        while not other_rank_file.exists():
            assert time.monotonic() < deadline, "the step-20 save never started:\n" + job.output[-3000:]
            select.select([], [], [], 0.05)  # a bounded poll of the file, not a synchronising sleep
        assert not (target / ".metadata").exists() and not (target / MARKER).exists()
        job.kill_worker(0)
        rc = job.finish(timeout=200)
    finally:
        job.stop()
    out = job.output
    assert rc == 0, out
    assert [int(s) for s in RESUMED.findall(out)] == [10]  # the previous checkpoint loads
    assert list_steps(tmp_path) == [20, 30] and (step_dir(tmp_path, 20) / MARKER).exists()
    assert not list_steps(tmp_path, complete=False)
    assert not (step_dir(tmp_path, 20) / "__0_0.distcp").is_fifo()  # the half-written save was cleared


def test_a_save_that_the_disk_refuses_ends_the_run_with_one_line_naming_it_and_keeps_the_checkpoints_before(tmp_path):
    rc, out = run(torchrun_args("trainer.llm", llm(tmp_path, steps=20)))
    assert rc == 0, out
    before = tree(tmp_path)
    rc, out = run(file_size_limited(torchrun_args("trainer.llm", llm(tmp_path, steps=40)), 200_000))  # a shard is about 1.5 MB
    assert rc == TORCHRUN_FAILED, out[-3000:]
    # Each rank learns of the failed background write when it polls its own save, which may be a
    # step apart: the first to know stops, and the other may end on the broken step collective
    # instead, saying so (trainer.cli.peer_gone). Whichever ranks say it, the cause is named, and no
    # line is a traceback.
    ends = [line for line in out.splitlines()
            if line.startswith("error: python -m trainer.llm") or re.match(r"error: rank \d stops: another rank", line)]
    assert len(ends) == 2, out[-3000:]  # each worker's log ends with its line
    named = [line for line in ends if re.search(
        r"failed unexpectedly \(CheckpointWriteFailed: checkpoint \S+step-00000030 was not written; the "
        r"checkpoints before it are kept \(ranks? [01].*: \w+: .+\)", line)]
    assert named, ends
    assert not any("Traceback" in line for line in ends), ends
    assert "error_file: <N/A>" not in out
    assert list_steps(tmp_path) == [10, 20] and list_steps(tmp_path, complete=False) == [30]
    assert {k: v for k, v in tree(tmp_path).items() if not k.startswith("step-00000030")} == before
    # With room again the restart resumes from the last complete checkpoint and clears the unfinished one.
    rc, out = run(torchrun_args("trainer.llm", llm(tmp_path, steps=40)))
    assert rc == 0, out
    assert [int(s) for s in RESUMED.findall(out)] == [20]
    assert list_steps(tmp_path) == [30, 40] and not list_steps(tmp_path, complete=False)


def test_sigterm_saves_a_final_checkpoint_exits_non_zero_and_the_next_run_resumes_from_it(tmp_path):
    rc, out = preempt(torchrun_args("trainer.llm", llm(tmp_path, steps=2000, every=1000)), after=r"^step\s+10 ")
    assert rc == TORCHRUN_FAILED, out[-3000:]  # never success: the run has 2000 steps
    m = re.search(rf"SIGTERM: checkpoint saved at step (\d+); exiting with status {EXIT_PREEMPTED}", out)
    assert m, out
    step = int(m[1])
    assert (step_dir(tmp_path, step) / MARKER).exists()
    rc, out = run(torchrun_args("trainer.llm", llm(tmp_path, steps=step + 3, every=1000)))
    assert rc == 0, out
    assert [int(s) for s in RESUMED.findall(out)] == [step]
    assert logged_steps(out) == [s for s in range(step + 1, step + 4) if s % 5 == 0 or s == step + 3]  # --log-every 5


def test_sigterm_in_the_last_steps_finishes_the_run_and_says_nothing_of_exiting_143(tmp_path):
    """With two steps the signal, sent before the first, is read at the last one (LAG_STEPS later).
    Before: the run logged "exiting with status 143 so that the job restarts" and exited 0."""
    job = Job([sys.executable, "-m", "trainer.llm", *llm(tmp_path, steps=2)])
    try:
        job.wait_for(r"^Global batch ")  # rank 0's last line before the first step; the handler is in place
        job.proc.send_signal(signal.SIGTERM)
        rc = job.finish(timeout=120)
    finally:
        job.stop()
    out = job.output
    assert rc == 0, out
    assert "SIGTERM" not in out and '"steps": 2' in out
    assert list_steps(tmp_path) == [2] and not (tmp_path / LEASE_FILE).exists()  # finished: the lease given back


def test_a_rendezvous_that_never_completes_fails_within_its_timeout_instead_of_hanging():
    env = lone_rank_env(0, 2)
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "trainer.llm", "--startup-timeout", "3"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1  # a crash, which torchrun and the Job's backoff retry
    assert time.monotonic() - t0 < 30
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("error: python -m trainer.llm (rank 0) failed unexpectedly (DistStoreError: Timed out")
    assert "1/2 clients joined" in last
