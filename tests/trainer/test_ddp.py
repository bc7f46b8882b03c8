"""trainer.ddp: the loss falls, snapshots are atomic and resume at the next epoch, a killed
worker is restarted by torchrun and the job finishes from the newest snapshot."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

from config.kubernetes import EXIT_PREEMPTED, TORCHRUN_FAILED
from crafted import CreatesMarker
from trainer import ddp
from trainer_procs import REPO, Job, file_size_limited, job_env, preempt, run, torchrun_args

EPOCH = re.compile(r"\[RANK (\d+)\] Epoch (\d+) \| Batchsize (\d+) \| Steps (\d+) \| Loss ([\d.]+)$")


def epochs_logged(output: str, rank: int = 0) -> list[tuple[int, float]]:
    return [(int(m[2]), float(m[5])) for line in output.splitlines()
            if (m := EPOCH.search(line)) and int(m[1]) == rank]


@pytest.mark.slow
def test_loss_falls_and_a_rerun_resumes_at_the_epoch_after_the_snapshot(tmp_path):
    snap = tmp_path / "snap" / "snapshot.pt"
    args = ["--epochs", "4", "--save-every", "2", "--batch-size", "32", "--snapshot-path", str(snap)]
    rc, out = run(torchrun_args("trainer.ddp", args))
    assert rc == 0, out
    logged = epochs_logged(out)
    assert [e for e, _ in logged] == [0, 1, 2, 3]
    assert logged[-1][1] < 0.5 * logged[0][1], f"loss did not fall: {logged}"
    assert len(epochs_logged(out, rank=1)) == 4  # both ranks train and log in the seeds' format
    assert torch.load(snap, weights_only=True)["epochs_run"] == 4

    rc, out = run(torchrun_args("trainer.ddp", [*args[:1], "6", *args[2:]]))
    assert rc == 0, out
    assert "Resuming from snapshot" in out and "at epoch 4" in out
    assert [e for e, _ in epochs_logged(out)] == [4, 5]
    assert '"final_loss"' in out and "SUMMARY" in out


@pytest.mark.slow
def test_a_sigkilled_worker_is_restarted_and_the_job_finishes_from_the_newest_snapshot(tmp_path):
    snap = tmp_path / "snapshot.pt"
    save_every = 2
    job = Job(torchrun_args("trainer.ddp", ["--epochs", "30", "--save-every", str(save_every), "--snapshot-path",
                                            str(snap), "--dist-timeout", "20"], max_restarts=2))
    try:
        job.wait_for(r"\[RANK 0\] Epoch 5 \| Snapshot saved")
        last_seen = max(e for e, _ in epochs_logged(job.output))
        job.kill_worker(1)
        rc = job.finish(timeout=150)
    finally:
        job.stop()
    out = job.output
    assert rc == 0, out
    resumed = [int(m[1]) for m in re.finditer(r"Resuming from snapshot \S+ at epoch (\d+)", out)]
    assert resumed, out
    # No epoch is lost beyond one snapshot interval.
    assert resumed[0] >= last_seen + 1 - save_every
    assert max(e for e, _ in epochs_logged(out)) == 29
    assert torch.load(snap, weights_only=True)["epochs_run"] == 30


@pytest.mark.slow
def test_sigterm_snapshots_the_epoch_in_flight_and_exits_non_zero(tmp_path):
    snap = tmp_path / "snapshot.pt"
    rc, out = preempt(torchrun_args("trainer.ddp", ["--epochs", "500", "--save-every", "100", "--snapshot-path",
                                                    str(snap)]), after=r"\[RANK 0\] Epoch 1 \|")
    assert rc == TORCHRUN_FAILED, out[-3000:]
    m = re.search(rf"SIGTERM: checkpoint saved at epoch (\d+); exiting with status {EXIT_PREEMPTED}", out)
    assert m, out[-3000:]
    assert torch.load(snap, weights_only=True)["epochs_run"] == int(m[1]) + 1  # nothing finished is lost


# trainer.ddp with SIGTERM sent to itself as its last epoch begins (the sampler is set to it).
SIGTERM_IN_LAST_EPOCH = """
import os, signal, sys
from torch.utils.data import DistributedSampler
from trainer import ddp
from trainer.cli import run_main

set_epoch = DistributedSampler.set_epoch
def set_epoch_then_sigterm(self, epoch):
    set_epoch(self, epoch)
    os.kill(os.getpid(), signal.SIGTERM)
DistributedSampler.set_epoch = set_epoch_then_sigterm
run_main(lambda: ddp.main(sys.argv[1:]), finalize=False)
"""


def test_sigterm_in_the_last_epoch_finishes_the_run_and_says_nothing_of_exiting_143(tmp_path):
    """Before: the run logged "exiting with status 143 so that the job restarts" and exited 0."""
    snap = tmp_path / "s.pt"
    p = subprocess.run([sys.executable, "-c", SIGTERM_IN_LAST_EPOCH, "--epochs", "1", "--snapshot-path", str(snap)],
                       cwd=REPO, env=job_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "SIGTERM" not in p.stdout and '"epochs_this_run": 1' in p.stdout
    assert torch.load(snap, weights_only=True)["epochs_run"] == 1


def test_snapshot_round_trip_restores_model_optimizer_epoch_and_rng(tmp_path):
    task = ddp.TaskConfig()
    model = ddp.make_model(task)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, task.features)).sum().backward()
    opt.step()
    path = tmp_path / "s.pt"
    ddp.save_snapshot(path, model, opt, epochs_run=7)
    expected_next = torch.rand(3)  # drawn after the save: a restored RNG must replay it

    fresh = ddp.make_model(task)
    fresh_opt = torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9)
    assert ddp.load_snapshot(path, fresh, fresh_opt) == 7
    assert torch.equal(torch.rand(3), expected_next)
    for a, b in zip(model.parameters(), fresh.parameters()):
        assert torch.equal(a, b)
    assert fresh_opt.state_dict()["state"].keys() == opt.state_dict()["state"].keys()
    assert not list(tmp_path.glob(".*tmp*")), "the temporary file must be renamed away"


def test_the_old_snapshot_survives_a_write_that_never_finished(tmp_path):
    """What a SIGKILL mid-write leaves behind (a temporary file) never replaces the snapshot."""
    task = ddp.TaskConfig()
    model, path = ddp.make_model(task), tmp_path / "s.pt"
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ddp.save_snapshot(path, model, opt, epochs_run=2)
    (tmp_path / ".s.pt.tmp-12345").write_bytes(b"half a snapshot")
    assert ddp.load_snapshot(path, ddp.make_model(task), torch.optim.SGD(model.parameters(), lr=0.1)) == 2


def test_a_snapshot_write_that_the_disk_refuses_leaves_the_old_snapshot_and_no_partial_file(tmp_path):
    """Before: each failed attempt (a full disk, so every restart of the job) left its half-written
    temporary file beside the snapshot, taking more of the space that had run out."""
    path = tmp_path / "s.pt"
    args = [sys.executable, "-m", "trainer.ddp", "--epochs", "1", "--snapshot-path", str(path)]
    first = subprocess.run(args, cwd=REPO, env=job_env(), capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr[-2000:]
    snapshot = path.read_bytes()
    assert len(snapshot) > 20_000
    args[args.index("--epochs") + 1] = "2"
    p = subprocess.run(file_size_limited(args, 20_000), cwd=REPO, env=job_env(), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 1
    assert p.stderr.strip().splitlines()[-1] == ("error: python -m trainer.ddp (rank 0) failed unexpectedly "
                                                 "(OSError: [Errno 27] File too large); the traceback is above")
    assert [f.name for f in tmp_path.iterdir()] == ["s.pt"] and path.read_bytes() == snapshot


def test_two_ranks_see_disjoint_samples():
    from torch.utils.data import DistributedSampler
    data = ddp.make_dataset(ddp.TaskConfig(samples=256))
    seen = [set(DistributedSampler(data, num_replicas=2, rank=r, seed=1)) for r in (0, 1)]
    assert not seen[0] & seen[1] and len(seen[0] | seen[1]) == 256


def test_the_synthetic_task_is_learnable_not_constant():
    x, y = ddp.make_dataset(ddp.TaskConfig(samples=1024)).tensors
    counts = torch.bincount(y, minlength=ddp.TaskConfig.classes)
    assert (counts > 0).sum() >= ddp.TaskConfig.classes - 1  # many classes, not one logit


@pytest.mark.parametrize("argv, field", [
    (["--epochs", "0"], "--epochs"),
    (["--batch-size", "many"], "--batch-size"),
    (["--save-every", "-1"], "--save-every"),
    (["--dist-timeout", "inf"], "--dist-timeout"),  # each was an OverflowError traceback
    (["--startup-timeout", "1e300"], "--startup-timeout"),
    (["--samples", str(10**20)], "--samples"),
])
def test_bad_arguments_give_one_line_naming_the_field(argv, field):
    p = subprocess.run([sys.executable, "-m", "trainer.ddp", *argv], cwd=REPO, env=job_env(),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in p.stderr, p.stderr


def test_a_snapshot_that_is_not_one_gives_one_line(tmp_path):
    bad = tmp_path / "snap.pt"
    bad.write_text("not a snapshot")
    p = subprocess.run([sys.executable, "-m", "trainer.ddp", "--snapshot-path", str(bad)], cwd=REPO, env=job_env(),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--snapshot-path" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_crafted_snapshot_is_refused_in_one_line_and_its_code_never_runs(tmp_path):
    """The snapshot lives on shared, writable FSx: whoever can write it must not run code in the
    next pod that resumes."""
    crafted, marker = tmp_path / "snap.pt", tmp_path / "marker"
    task = ddp.TaskConfig()
    state = {"model": ddp.make_model(task).state_dict(), "epochs_run": CreatesMarker(marker)}
    torch.save(state, crafted)
    p = subprocess.run([sys.executable, "-m", "trainer.ddp", "--snapshot-path", str(crafted)], cwd=REPO,
                       env=job_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr == (
        f"error: --snapshot-path: {crafted}: it refers to io.open, which is neither a tensor nor plain data; "
        "refused without running it (snapshots load with weights_only=True)\n"), p.stderr
    assert not marker.exists()


@pytest.mark.parametrize("damage", ["python-rng", "epochs", "missing-optimizer"])
def test_a_snapshot_of_plain_data_but_the_wrong_shape_is_one_line(tmp_path, damage):
    task = ddp.TaskConfig()
    model, path = ddp.make_model(task), tmp_path / "s.pt"
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ddp.save_snapshot(path, model, opt, epochs_run=2)
    state = torch.load(path, weights_only=True)
    if damage == "python-rng":
        state["rng"]["python"] = "not a state"
    elif damage == "epochs":
        state["epochs_run"] = -3
    else:
        del state["optimizer"]
    torch.save(state, path)
    with pytest.raises(ddp.UsageError) as err:
        ddp.load_snapshot(path, ddp.make_model(task), torch.optim.SGD(model.parameters(), lr=0.1))
    assert str(err.value).startswith(f"--snapshot-path: {path} is not a snapshot this job can resume from (")
    assert "\n" not in str(err.value)


def test_a_snapshot_path_below_a_file_is_refused_before_training(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(ddp.UsageError) as err:
        ddp.main(["--snapshot-path", str(blocker / "snap.pt"), "--epochs", "1"])
    assert str(err.value) == f"--snapshot-path: cannot create {blocker / 'snap.pt'}: {blocker} exists and is not a directory"


def test_every_argument_has_help():
    p = subprocess.run([sys.executable, "-m", "trainer.ddp", "--help"], cwd=REPO, env=job_env(),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0
    for flag in ("--epochs", "--save-every", "--batch-size", "--snapshot-path"):
        assert flag in p.stdout
