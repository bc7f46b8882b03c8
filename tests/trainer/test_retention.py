"""Old and unfinished checkpoint folders are deleted off the training thread: the save that
retires a checkpoint returns while its deletion waits; a folder leaves its name at once (renamed
into DIR/.deleting/), so a half-done deletion never looks like a checkpoint; nothing is deleted
once the lease is lost, nor is a save that finishes after it marked complete; what a run left
half-deleted, the next one deletes."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

import pytest
import torch

from config.workloads.common import CheckpointConfig
from config.kubernetes import EXIT_USAGE, RUN_ID_ENV
from trainer import dist as tdist
from trainer.checkpoint import MARKER, CheckpointManager, list_steps, step_dir
from trainer.cli import WorkerExit
from trainer.lease import LEASE_FILE, TTL_S, Lease, Owner
from trainer.retention import TRASH, BackgroundRemover
from trainer_procs import REPO, job_env


class Weights:
    """A small Stateful: a checkpoint of a few KiB."""

    def __init__(self):
        self.w = torch.arange(1024, dtype=torch.float32)

    def state_dict(self):
        return {"w": self.w}

    def load_state_dict(self, state):
        self.w.copy_(state["w"])


@pytest.fixture(scope="module")
def rt():
    runtime = tdist.init(checkpoint_group=True)
    yield runtime
    tdist.shutdown()


def manager(rt, directory, keep=1, synchronous=True) -> CheckpointManager:
    directory.mkdir(exist_ok=True)
    return CheckpointManager(CheckpointConfig(str(directory), every=1, keep=keep, synchronous=synchronous), rt,
                             {"app": Weights()})


def test_the_save_that_retires_a_checkpoint_returns_while_its_deletion_waits(rt, tmp_path):
    ckpt = manager(rt, tmp_path)
    assert ckpt.resume() == 0
    gate = threading.Event()
    ckpt.remover.run(gate.wait)  # the background thread is busy: deletions queue behind this
    ckpt.save(1)
    ckpt.save(2)  # retires step 1
    assert list_steps(tmp_path) == [1, 2]  # the training thread deleted nothing
    gate.set()
    ckpt.close(finished=True)  # a finished run waits for its deletions before giving the lease back
    assert list_steps(tmp_path) == [2] and not (tmp_path / TRASH).exists()


def test_resume_frees_an_unfinished_save_s_name_at_once_and_deletes_what_a_run_left(rt, tmp_path):
    first = manager(rt, tmp_path, keep=2)
    first.resume()
    first.save(3)
    first.close(finished=True)
    unfinished = step_dir(tmp_path, 6)
    unfinished.mkdir()
    (unfinished / "__0_0.distcp").write_bytes(b"half")
    leftover = tmp_path / TRASH / "step-00000002.0badc0de"  # a deletion cut short by a pod's end
    leftover.mkdir(parents=True)
    (leftover / MARKER).write_text("2\n")

    ckpt = manager(rt, tmp_path, keep=2)
    gate = threading.Event()
    ckpt.remover.run(gate.wait)
    assert ckpt.resume() == 3
    assert not unfinished.exists() and list_steps(tmp_path, complete=False) == []  # renamed away, not yet deleted
    ckpt.save(6)  # the same step saves again while the old folder still waits for deletion
    gate.set()
    ckpt.close(finished=True)
    assert list_steps(tmp_path) == [3, 6] and not (tmp_path / TRASH).exists()


def test_nothing_is_deleted_once_the_lease_is_lost(tmp_path):
    allowed = [True]
    remover = BackgroundRemover(tmp_path, allowed=lambda: allowed[0])
    kept = tmp_path / "step-00000001"
    kept.mkdir()
    allowed[0] = False
    assert remover.discard(kept) is False and kept.exists()
    allowed[0] = True
    assert remover.discard(kept) is True and not kept.exists()
    allowed[0] = False
    remover.run(remover.empty_trash)
    remover.close(wait=True)
    assert [p.name.split(".")[0] for p in (tmp_path / TRASH).iterdir()] == ["step-00000001"]


def saving_step_2_when_another_run_takes_over(rt, tmp_path, monkeypatch) -> CheckpointManager:
    """Run A stalls past the lease's life with the save of step 2 in flight and run B takes the
    directory over (the real lease files)."""
    monkeypatch.setenv(RUN_ID_ENV, "job-a-1234567890")
    ckpt = manager(rt, tmp_path, keep=3, synchronous=False)
    assert ckpt.resume() == 0
    ckpt.save(1)
    ckpt.wait()
    ckpt.save(2)  # written in the background
    Lease(tmp_path, Owner("job-b-0987654321", "job-b-worker-0", 61), clock=lambda: time.time() + TTL_S + 1).acquire()
    return ckpt


def test_a_save_that_finishes_after_its_run_lost_the_lease_is_never_marked_complete(rt, tmp_path, monkeypatch,
                                                                                      capsys):
    # Were A's save then marked COMPLETE, B's next restart would resume from A's diverged step.
    ckpt = saving_step_2_when_another_run_takes_over(rt, tmp_path, monkeypatch)
    capsys.readouterr()
    ckpt.close()
    assert list_steps(tmp_path) == [1] and not (step_dir(tmp_path, 2) / MARKER).exists()
    assert '"run": "job-b-0987654321"' in (tmp_path / LEASE_FILE).read_text()
    out = capsys.readouterr()
    assert re.fullmatch(rf"WARNING: the lease on {re.escape(str(tmp_path))} was taken over by run job-b-0987654321 "
                        rf"\(host job-b-worker-0, pid 61\); checkpoint {re.escape(str(step_dir(tmp_path, 2)))} is "
                        r"left incomplete \(not marked COMPLETE\) and this run writes no more checkpoints there\n",
                        out.err), out.err
    assert "Checkpoint saved" not in out.out


def test_a_run_whose_final_save_finishes_after_it_lost_the_lease_fails_naming_the_checkpoint(rt, tmp_path, monkeypatch,
                                                                                             capsys):
    # The last step's save is the user's final model: a run that lost the directory while writing
    # it must not end as finished (exit 0 marks the PyTorchJob Succeeded) with that checkpoint left
    # incomplete. Every rank raises (torchrun's other agents would exit 0 otherwise).
    ckpt = saving_step_2_when_another_run_takes_over(rt, tmp_path, monkeypatch)
    capsys.readouterr()
    with pytest.raises(WorkerExit) as stopped:
        ckpt.close(finished=True)
    assert stopped.value.code == EXIT_USAGE
    assert str(stopped.value) == (f"this run reached its end, but the lease on {tmp_path} was taken over by run "
                                  f"job-b-0987654321 (host job-b-worker-0, pid 61) while its last checkpoint "
                                  f"{step_dir(tmp_path, 2)} was being written: that checkpoint is left incomplete "
                                  "(not marked COMPLETE), so this run's final model is not there")
    assert list_steps(tmp_path) == [1] and not (step_dir(tmp_path, 2) / MARKER).exists()
    assert '"run": "job-b-0987654321"' in (tmp_path / LEASE_FILE).read_text()  # the other run's lease stays
    out = capsys.readouterr()
    assert "Checkpoint saved: " + str(step_dir(tmp_path, 2)) not in out.out, out


FINAL_SAVE_LOST = r"""
import sys, time
from pathlib import Path
import torch
from config.workloads.common import CheckpointConfig
from trainer import dist as tdist
from trainer.checkpoint import CheckpointManager
from trainer.cli import run_main
from trainer.lease import TTL_S, Lease, Owner

def main():
    rt = tdist.init(checkpoint_group=True)
    directory = Path(sys.argv[1])
    ckpt = CheckpointManager(CheckpointConfig(str(directory), every=1, keep=3, synchronous=False), rt,
                             {"app": torch.nn.Linear(4, 4)}, last_step=1)
    ckpt.resume()
    ckpt.save(1)  # the last step's save, written in the background
    if rt.is_main:  # another run takes the folder over before it is marked complete
        Lease(directory, Owner("job-b-0987654321", "job-b-worker-0", 61), clock=lambda: time.time() + TTL_S + 1).acquire()
    ckpt.close(finished=True)
    print(f"rank {rt.rank} finished", flush=True)

run_main(main, finalize=False)
"""


def test_every_rank_of_a_run_whose_final_save_lost_the_lease_exits_non_zero(tmp_path):
    # One worker pod that exits 0 marks an elastic PyTorchJob Succeeded: rank 1 must fail too.
    script = tmp_path / "final_save_lost.py"
    script.write_text(FINAL_SAVE_LOST)
    (tmp_path / "ckpt").mkdir()
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "--max-restarts=0",
            "--monitor-interval=0.2", str(script), str(tmp_path / "ckpt")]
    p = subprocess.run(argv, cwd=REPO, env=job_env(**{RUN_ID_ENV: "job-a-1234567890"}), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0 and "finished" not in p.stdout, p.stdout + p.stderr
    assert p.stderr.count("this run reached its end, but the lease on") == 1, p.stderr  # rank 0's line only
    # torchrun's failure report lists each failed worker with its exit code.
    assert sorted(re.findall(r"^\s*exitcode\s*:\s*(-?\d+) \(pid", p.stderr, re.M)) == [str(EXIT_USAGE)] * 2, p.stderr


def test_a_failing_deletion_is_logged_and_never_raised_into_training(tmp_path, capsys):
    remover = BackgroundRemover(tmp_path)

    def fails():
        raise PermissionError(13, "Permission denied", str(tmp_path / "step-00000001"))
    remover.run(fails)
    remover.run(lambda: print("next task ran"))
    remover.close(wait=True)
    out = capsys.readouterr()
    assert "WARNING: deleting old checkpoint folders failed: PermissionError" in out.err
    assert "next task ran" in out.out


def test_a_deletion_that_fails_is_a_warning_naming_the_path_not_a_line_saying_it_was_deleted(tmp_path, capsys):
    # A file where a folder belongs (as an older trainer moved one in) fails the deletion of that
    # entry only: the others are still deleted, and the trash stays for the next run.
    stuck = tmp_path / TRASH / "step-00000008.0badc0de"
    stuck.parent.mkdir()
    stuck.write_text("a user's file")
    (tmp_path / TRASH / "step-00000004.0badc0de").mkdir()
    remover = BackgroundRemover(tmp_path)
    remover.run(remover.empty_trash)
    remover.run(remover.empty_trash)  # as after the next save: said once a run, not at every save
    remover.close(wait=True)
    out = capsys.readouterr()
    assert "Deleted step-00000004 in the background" in out.out
    assert "step-00000008" not in out.out
    assert out.err == f"WARNING: could not delete {stuck} ({stuck}: Not a directory); it stays for the next run to try again\n"
    assert [p.name for p in (tmp_path / TRASH).iterdir()] == [stuck.name]
