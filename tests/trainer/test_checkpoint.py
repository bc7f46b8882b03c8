"""CheckpointManager in one real process group: an asynchronous save holds the weights of the
step it was taken at, even while training goes on; only complete checkpoints are listed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading

import pytest

from config.kubernetes import EXIT_CRASH, EXIT_USAGE
from config.workloads.common import CheckpointConfig
from trainer import dist as tdist
from trainer.checkpoint import (
    MARKER, MODEL_FILE, CheckpointManager, CheckpointWriteFailed, existing_checkpoints, list_steps, step_dir,
)
from trainer.cli import UsageError, WorkerExit
from trainer.lease import LEASE_FILE, LOCK_FILE
from trainer.retention import TRASH
from test_retention import Weights
from trainer_procs import REPO, file_size_limited, job_env, lone_rank_env

SCRIPT = r"""
import sys, torch
import torch.distributed.checkpoint as dcp
from config.models import MODELS
from config.workloads.common import CheckpointConfig
from config.workloads.llm import FsdpConfig
from trainer import dist as tdist
from trainer.checkpoint import CheckpointManager, ModelAndOptimizer
from trainer.model import loss_fn
from trainer.parallel import build_decoder

directory = sys.argv[1]
rt = tdist.init(checkpoint_group=True)
cfg = MODELS["tiny"]
model = build_decoder(cfg, rt, fsdp=FsdpConfig(mode="always"))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
ckpt = CheckpointManager(CheckpointConfig(directory, every=1, keep=2), rt, {"app": ModelAndOptimizer(model, opt)},
                         last_step=4)

def step():
    x = torch.randint(cfg.vocab_size, (2, 32))
    loss_fn(model(x), x).backward()
    ckpt.wait_staging()
    opt.step()
    opt.zero_grad()

step()
at_save = {k: v.full_tensor().clone() for k, v in model.state_dict().items()}
ckpt.save(1)
for _ in range(3):
    step()  # the weights change while the save is in flight
ckpt.save(4)
ckpt.close()
fresh = build_decoder(cfg, rt, fsdp=FsdpConfig(mode="always"))
dcp.load({"app": ModelAndOptimizer(fresh, torch.optim.AdamW(fresh.parameters(), lr=1e-2))},
         checkpoint_id=f"{directory}/step-00000001")
changed = [k for k, v in fresh.state_dict().items() if not torch.equal(v.full_tensor(), at_save[k])]
print("CHANGED", len(changed), "OF", len(at_save))
tdist.shutdown()
from trainer.cli import exit_without_finalization
exit_without_finalization(0)  # as the trainers end: no gloo thread meets a finalizing interpreter
"""


def test_an_async_save_holds_the_weights_of_its_step_and_only_complete_saves_count(tmp_path):
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=REPO, env=job_env(), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "CHANGED 0 OF" in p.stdout, p.stdout
    assert list_steps(tmp_path) == [1, 4]
    assert all((step_dir(tmp_path, s) / MARKER).exists() for s in (1, 4))


def test_a_folder_without_the_marker_is_not_a_checkpoint(tmp_path):
    step_dir(tmp_path, 7).mkdir()
    (step_dir(tmp_path, 7) / ".metadata").write_bytes(b"partial")
    step_dir(tmp_path, 3).mkdir()
    (step_dir(tmp_path, 3) / MARKER).write_text("3\n")
    assert list_steps(tmp_path) == [3]
    assert list_steps(tmp_path, complete=False) == [7]


def _llm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainer.llm", "--seq-len", "32", "--batch-size", "2",
                           "--log-every", "2", *args], cwd=REPO, env=job_env(), capture_output=True, text=True,
                          timeout=120)


def test_checkpoints_of_another_model_shape_are_refused_in_one_line_not_moved_aside(tmp_path):
    first = _llm("--model", "tiny", "--steps", "2", "--checkpoint-dir", str(tmp_path))
    assert first.returncode == 0, first.stderr[-2000:]
    assert list_steps(tmp_path) == [2] and (tmp_path / "model.json").is_file()
    other = _llm("--model", "tiny-moe", "--steps", "4", "--checkpoint-dir", str(tmp_path))
    assert other.returncode == 2
    assert other.stderr.strip() == (
        f"error: --checkpoint-dir: {tmp_path} holds checkpoints of another model: ffn_dim is 192 in the "
        "checkpoints but 96 in this run; use another directory, or the model they were written by")
    assert "step " not in other.stdout  # refused before any training
    assert list_steps(tmp_path) == [2] and not list(tmp_path.glob("*.unloadable*"))
    deeper = _llm("--model", "tiny", "--layers", "3", "--steps", "4", "--checkpoint-dir", str(tmp_path))
    assert deeper.returncode == 2 and "n_layers is 2 in the checkpoints but 3 in this run" in deeper.stderr
    (tmp_path / "model.json").unlink()  # as an older trainer left its folders
    older = _llm("--model", "tiny", "--steps", "4", "--checkpoint-dir", str(tmp_path))
    assert older.returncode == 2 and "holds checkpoints without model.json" in older.stderr


def test_a_checkpoint_directory_that_cannot_be_created_is_one_line_before_training(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    p = _llm("--steps", "2", "--checkpoint-dir", str(blocker / "ckpt"))
    assert p.returncode == 2
    assert p.stderr.strip() == f"error: --checkpoint-dir: cannot create {blocker / 'ckpt'}: {blocker} is a file, not a folder"
    assert "step " not in p.stdout


def test_a_model_record_that_the_disk_refuses_ends_the_run_and_leaves_no_temporary_file(tmp_path):
    # The lease (about 150 bytes) fits under the cap; model.json (about 450) does not.
    p = subprocess.run(file_size_limited([sys.executable, "-m", "trainer.llm", "--seq-len", "32", "--batch-size", "2",
                                          "--steps", "2", "--checkpoint-dir", str(tmp_path)], 350),
                       cwd=REPO, env=job_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "File too large" in p.stderr.splitlines()[-1], p.stderr[-2000:]
    assert "step " not in p.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == [".LEASE.lock", "LEASE"]



def test_a_checkpoint_write_the_disk_refuses_names_the_disk_s_error_not_the_zip_writer_s(tmp_path):
    # torch.save's zip writer turns the failed write into "RuntimeError: [enforce fail at
    # inline_container.cc:672] . unexpected pos 704 vs 598": on a full disk (ENOSPC, seen on a
    # small tmpfs) as under this file-size limit (EFBIG), no line of the log said why.
    p = subprocess.run(file_size_limited([sys.executable, "-m", "trainer.llm", "--seq-len", "32", "--batch-size", "2",
                                          "--steps", "2", "--checkpoint-dir", str(tmp_path)], 200_000),
                       cwd=REPO, env=job_env(), capture_output=True, text=True, timeout=120)
    last = p.stderr.splitlines()[-1]
    assert p.returncode == 1, p.stderr[-2000:]
    assert (f"CheckpointWriteFailed: checkpoint {step_dir(tmp_path, 2)} was not written; the checkpoints before it "
            "are kept (rank 0: OSError: [Errno 27] File too large)); the traceback is above") in last, last
    assert list_steps(tmp_path) == [] and list_steps(tmp_path, complete=False) == [2]

BUFFERS_SCRIPT = r"""
import sys, threading, torch
import torch.distributed.checkpoint as dcp
from trainer import dist as tdist
from config.workloads.common import CheckpointConfig
from trainer.checkpoint import CheckpointManager, ModelAndOptimizer

directory = sys.argv[1]
rt = tdist.init(checkpoint_group=True)
torch.manual_seed(0)
net = lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
model = net()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
ckpt = CheckpointManager(CheckpointConfig(directory, every=1), rt, {"app": ModelAndOptimizer(model, opt)})
assert ckpt.stager is not None, "this torch stages in the background"
# Hold the background staging until the next forward has run: the race, made certain.
gate, stage = threading.Event(), ckpt.stager._stage
ckpt.stager._stage = lambda state, **kw: (gate.wait(60), stage(state, **kw))[1]
model(torch.randn(8, 3, 8, 8)).sum().backward()
opt.step()
at_save = {k: v.clone() for k, v in model.state_dict().items()}
ckpt.save(1)
model(torch.randn(8, 3, 8, 8) + 5)  # the next step's forward moves the running statistics
gate.set()
ckpt.wait_staging()
ckpt.close()
fresh = net()
dcp.load({"app": ModelAndOptimizer(fresh, torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9))},
         checkpoint_id=f"{directory}/step-00000001")
changed = sorted(k for k, v in fresh.state_dict().items() if not torch.equal(v, at_save[k]))
print("CHANGED", changed)
tdist.shutdown()
from trainer.cli import exit_without_finalization
exit_without_finalization(0)  # as the trainers end: no gloo thread meets a finalizing interpreter
"""


def test_an_async_save_holds_the_batchnorm_statistics_of_its_step_though_the_next_forward_moves_them(tmp_path):
    p = subprocess.run([sys.executable, "-c", BUFFERS_SCRIPT, str(tmp_path)], cwd=REPO, env=job_env(),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "CHANGED []" in p.stdout, p.stdout


RANKS_BUFFERS_SCRIPT = r"""
import json, sys, torch
import torch.distributed.checkpoint as dcp
from trainer import dist as tdist
from config.workloads.common import CheckpointConfig
from trainer.checkpoint import CheckpointManager, ModelAndOptimizer

directory = sys.argv[1]
rt = tdist.init(checkpoint_group=True)
net = lambda: torch.nn.Sequential(*(torch.nn.BatchNorm1d(4) for _ in range(8)))
torch.manual_seed(0)
model = net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
ckpt = CheckpointManager(CheckpointConfig(directory, every=1), rt,
                         {"app": ModelAndOptimizer(model, opt, replicated_buffers=True)})
model(torch.randn(16, 4) + 3 * rt.rank)  # each rank's own micro-batch moves its running statistics
if rt.rank == 0:
    at_save = {k: v.clone() for k, v in model.state_dict().items()}
ckpt.save(1, blocking=True)
ckpt.close()
tdist.shutdown()
if rt.rank == 0:
    fresh = net()
    dcp.load({"app": ModelAndOptimizer(fresh, torch.optim.SGD(fresh.parameters(), lr=0.1))},
             checkpoint_id=f"{directory}/step-00000001")
    print("NOT_RANK_0", sorted(k for k, v in fresh.state_dict().items() if not torch.equal(v, at_save[k])))
from trainer.cli import exit_without_finalization
exit_without_finalization(0)
"""


def test_a_checkpoint_of_a_replicated_model_holds_rank_0s_batchnorm_statistics_whichever_rank_writes_them(tmp_path):
    # DCP writes each replicated tensor once, from whichever rank its plan balances it to; each
    # rank's running statistics last moved with its own micro-batch (DDP broadcasts rank 0's only
    # before the next training forward), so a save mid-epoch mixed the ranks' statistics.
    script = tmp_path / "ranks_buffers.py"
    script.write_text(RANKS_BUFFERS_SCRIPT)
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                        "--max-restarts=0", str(script), str(tmp_path / "ckpt")],
                       cwd=REPO, env=job_env(), capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "NOT_RANK_0 []" in p.stdout, p.stdout


@pytest.mark.parametrize("name", ["step-00000008", TRASH])
def test_a_file_where_the_trainer_keeps_a_folder_is_refused_in_one_line_and_left_alone(tmp_path, name):
    # Not the trainer's to delete: resume would move a file named like a checkpoint into .deleting/
    # (where it never goes away), and a file named .deleting stopped the resume with a traceback.
    step_dir(tmp_path, 4).mkdir()  # an unfinished save, which a resume would clear away
    (tmp_path / name).write_text("a user's file")
    with pytest.raises(UsageError) as refused:
        existing_checkpoints(CheckpointConfig(str(tmp_path)))
    assert str(refused.value) == (f"--checkpoint-dir: {tmp_path / name} is not a folder, but the trainer keeps "
                                  f"folders of its own under that name; move it out of {tmp_path}")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, "step-00000004"])
    assert (tmp_path / name).read_text() == "a user's file"


@pytest.mark.parametrize("name", ["step-00000008", TRASH])
def test_a_symlink_where_the_trainer_keeps_a_folder_is_refused_in_one_line_and_its_target_left_alone(tmp_path, name):
    # Followed, a link named .deleting had the trash emptied into its target: every folder there was
    # deleted, outside the checkpoint directory. A link named like a checkpoint was resumed from
    # and, once retired, its link sat in the trash for good (rmtree refuses links), warned of at
    # every run.
    ckpt, elsewhere = tmp_path / "ckpt", tmp_path / "someone-elses"
    ckpt.mkdir()
    (elsewhere / "data").mkdir(parents=True)
    (elsewhere / "data" / MARKER).write_text("")
    (ckpt / name).symlink_to(elsewhere / "data" if name != TRASH else elsewhere)
    with pytest.raises(UsageError) as refused:
        existing_checkpoints(CheckpointConfig(str(ckpt)))
    assert str(refused.value) == (f"--checkpoint-dir: {ckpt / name} is a symbolic link, but the trainer keeps "
                                  f"folders of its own under that name; move it out of {ckpt}")
    assert (ckpt / name).is_symlink() and (elsewhere / "data" / MARKER).exists()


@pytest.mark.parametrize("name", [LEASE_FILE, LOCK_FILE])
@pytest.mark.parametrize("special", ["pipe", "device", "folder"])
def test_a_lease_file_that_is_a_pipe_a_device_or_a_folder_is_refused_in_one_line_before_it_is_read(
        tmp_path, name, special):
    # Rank 0 read LEASE with open(): a named pipe held the run there for ever (trainer.llm and
    # trainer.vision printed nothing), a link to /dev/zero was read until memory ran out, and a
    # folder stopped it with "cannot take the lease" as a read failure to retry.
    step_dir(tmp_path, 4).mkdir()
    (step_dir(tmp_path, 4) / MARKER).write_text("4\n")
    if special == "pipe":
        os.mkfifo(tmp_path / name)
    elif special == "device":
        (tmp_path / name).symlink_to("/dev/zero")
    else:
        (tmp_path / name).mkdir()
    with pytest.raises(UsageError) as refused:
        existing_checkpoints(CheckpointConfig(str(tmp_path)))
    what = {"pipe": "is a named pipe, expected a regular file", "device": "is a character device, expected a regular "
            "file", "folder": f"is a folder, but the trainer keeps its lease in a file of that name; move it out of "
                              f"{tmp_path}"}[special]
    assert str(refused.value) == f"--checkpoint-dir: {tmp_path / name} {what}"


def test_every_rank_refuses_a_file_where_a_checkpoint_folder_belongs_before_the_process_group(tmp_path):
    (tmp_path / "step-00000008").write_text("a user's file")
    # Rank 1 of 2 alone, with no rank 0 to meet: it must stop on its own, not wait for a rendezvous
    # (it would wait out --dist-timeout, past this subprocess's timeout).
    p = subprocess.run([sys.executable, "-m", "trainer.llm", "--seq-len", "32", "--batch-size", "2", "--steps", "2",
                        "--checkpoint-dir", str(tmp_path), "--dist-timeout", "120"], cwd=REPO,
                       env=lone_rank_env(1, 2), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip() == (f"error: --checkpoint-dir: {tmp_path / 'step-00000008'} is not a folder, but the "
                                f"trainer keeps folders of its own under that name; move it out of {tmp_path}")


@pytest.fixture
def rt():
    runtime = tdist.init(checkpoint_group=True)
    yield runtime
    tdist.shutdown()


@pytest.mark.parametrize("replaced", [False, True])
def test_a_checkpoint_directory_gone_mid_run_stops_the_run_in_one_line_not_saving_into_a_new_one(rt, tmp_path,
                                                                                                 replaced):
    # Deleted, or its file system unmounted (FSx lost): DCP made the folder again and the run went
    # on saving there, exit 0 at the end, into checkpoints without model.json (which no resume
    # accepts: "written by a trainer with another rotary layout") and without a lease.
    directory = tmp_path / "ckpt"
    directory.mkdir()
    ckpt = CheckpointManager(CheckpointConfig(str(directory), every=1, synchronous=True), rt, {"app": Weights()},
                             model_record={"model": {}})
    assert ckpt.resume() == 0
    ckpt.save(1)
    ckpt.remover.wait()
    shutil.rmtree(directory)
    if replaced:  # made again at the same path, or another file system mounted there
        directory.mkdir()
    with pytest.raises(WorkerExit) as stopped:
        ckpt.save(2)
    ckpt.close()
    assert stopped.value.code == EXIT_CRASH  # retryable: the restart of a lost mount resumes
    what = "is no longer the folder this run resumed in" if replaced else "is gone"
    assert str(stopped.value) == (
        f"--checkpoint-dir: {directory} {what} (deleted, or its file system unmounted); this run stops without "
        f"writing {step_dir(directory, 2)}: a folder made anew holds neither the run's {MODEL_FILE} nor its lease, "
        "and no run would resume from its checkpoints")
    assert list(directory.iterdir()) == [] if replaced else not directory.exists()


def test_a_completion_marker_the_disk_refuses_names_the_checkpoint_and_keeps_the_one_before(rt, tmp_path):
    # The disk filled up between a save's data and its COMPLETE marker (seen on a small tmpfs): the
    # run's last line was "OSError: [Errno 28] No space left on device", naming no checkpoint or
    # directory. Here the marker's temporary name is taken by a folder, so its write fails alike.
    ckpt = CheckpointManager(CheckpointConfig(str(tmp_path), every=1, keep=1, synchronous=True), rt,
                             {"app": Weights()})
    assert ckpt.resume() == 0
    ckpt.save(1)
    (step_dir(tmp_path, 2) / f".{MARKER}.tmp-{os.getpid()}").mkdir(parents=True)
    with pytest.raises(CheckpointWriteFailed) as failed:
        ckpt.save(2)
    ckpt.close()
    assert str(failed.value).startswith(f"checkpoint {step_dir(tmp_path, 2)} was not written; the checkpoints before "
                                        f"it are kept (rank 0, its {MARKER} marker: IsADirectoryError: "), failed.value
    assert list_steps(tmp_path) == [1]


def test_a_final_save_whose_directory_is_deleted_while_it_stages_is_not_marked_and_the_run_fails(rt, tmp_path):
    # The directory deleted after the save's check but before DCP made the step's folder (it does,
    # with its parents, once the background staging is done): the final checkpoint was written and
    # marked COMPLETE in a folder made anew, without model.json, and the run ended as finished.
    directory = tmp_path / "ckpt"
    directory.mkdir()
    ckpt = CheckpointManager(CheckpointConfig(str(directory), every=1), rt, {"app": Weights()}, last_step=2,
                             model_record={"model": {}})
    assert ckpt.resume() == 0 and ckpt.stager is not None
    ckpt.save(1)
    ckpt.wait()
    gate, stage = threading.Event(), ckpt.stager._stage
    ckpt.stager._stage = lambda state, **kw: (gate.wait(60), stage(state, **kw))[1]
    ckpt.save(2)
    ckpt.remover.wait()
    shutil.rmtree(directory)
    gate.set()
    with pytest.raises(WorkerExit) as stopped:
        ckpt.close(finished=True)
    assert stopped.value.code == EXIT_CRASH
    assert str(stopped.value) == (
        f"this run reached its end, but --checkpoint-dir {directory} is no longer the folder this run resumed in "
        f"(deleted, or its file system unmounted) while its last checkpoint {step_dir(directory, 2)} was being "
        "written: that checkpoint is left incomplete (not marked COMPLETE), so this run's final model is not there")
    assert not (step_dir(directory, 2) / MARKER).exists()
