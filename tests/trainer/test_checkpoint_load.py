"""Which load failures are a checkpoint's own damage (fall back past it), which are refusals (a
checkpoint that asks to run code, or lacks an entry the trainer resumes from: stop, change
nothing) and which are anything else (stop, change nothing): trainer/checkpoint_load.py on real
DCP checkpoints and the errors DCP raises."""

from __future__ import annotations

import errno
import os
import pickle

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed import DistBackendError
from torch.distributed.checkpoint.api import CheckpointException

from crafted import CreatesMarker
from trainer import safe_load
from trainer.checkpoint_load import (DAMAGED, FAILED, METADATA_FILE, REFUSED, Damaged, Refused, Verdict, classify,
                                     precheck)
from trainer.safe_load import UnsafeCheckpoint


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A real checkpoint: one process, no group, two tensors."""
    path = tmp_path_factory.mktemp("ckpt") / "step-00000001"
    dcp.save({"w": torch.arange(4096.0), "b": torch.ones(7)}, checkpoint_id=str(path))
    return path


def copy(saved, tmp_path):
    import shutil
    target = tmp_path / saved.name
    shutil.copytree(saved, target)
    return target


def data_file(path):
    return next(p for p in path.iterdir() if p.suffix == ".distcp")


def test_a_complete_checkpoint_passes_and_loads(saved):
    precheck(saved)
    state = {"w": torch.zeros(4096), "b": torch.zeros(7)}
    dcp.load(state, checkpoint_id=str(saved))
    assert torch.equal(state["w"], torch.arange(4096.0))


@pytest.mark.parametrize("damage, reason", [
    (lambda p: (p / METADATA_FILE).unlink(), ".metadata is missing"),
    (lambda p: (p / METADATA_FILE).write_bytes(b"\x80\x04garbage"), ".metadata does not decode"),
    (lambda p: data_file(p).unlink(), "__0_0.distcp is missing"),
    (lambda p: data_file(p).write_bytes(data_file(p).read_bytes()[:100]), "__0_0.distcp is truncated: 100 bytes"),
])
def test_missing_truncated_or_undecodable_files_are_damage(saved, tmp_path, damage, reason):
    path = copy(saved, tmp_path)
    damage(path)
    with pytest.raises(Damaged, match=reason) as info:
        precheck(path)
    assert classify(info.value).kind == DAMAGED


def test_an_io_error_on_the_metadata_is_not_damage(saved, tmp_path):
    path = copy(saved, tmp_path)
    (path / METADATA_FILE).unlink()
    (path / METADATA_FILE).mkdir()  # open() fails with EISDIR: an I/O error, not a missing file
    with pytest.raises(OSError) as info:
        precheck(path)
    verdict = classify(info.value)
    assert verdict.kind == FAILED and "IsADirectoryError" in verdict.reason


@pytest.mark.parametrize("special, what", [("pipe", "a named pipe"), ("device", "a character device")])
def test_a_metadata_file_that_is_a_pipe_or_a_device_is_damage_found_without_waiting(saved, tmp_path, special, what):
    # Opened to read, a named pipe waits for a writer for ever: the resume hung before any line.
    from cli_sweep import run_in_process

    path = copy(saved, tmp_path)
    (path / METADATA_FILE).unlink()
    if special == "pipe":
        os.mkfifo(path / METADATA_FILE)
    else:
        (path / METADATA_FILE).symlink_to("/dev/zero")
    verdicts = []

    def attempt(_):
        with pytest.raises(Damaged) as info:
            precheck(path)
        verdicts.append(classify(info.value))

    outcome = run_in_process(attempt, [], timeout_s=20)
    assert not outcome.hung and not outcome.escaped, outcome.escaped or "precheck gave no answer in 20 s"
    assert verdicts == [Verdict(DAMAGED, f"{path / METADATA_FILE} is {what}, expected a regular file")]


def test_bytes_that_do_not_decode_are_damage_even_at_full_length(saved, tmp_path):
    path = copy(saved, tmp_path)
    f = data_file(path)
    f.write_bytes(bytes(len(f.read_bytes())))  # right size, all zeros
    precheck(path)  # sizes alone cannot see it
    with pytest.raises(CheckpointException) as info:
        dcp.load({"w": torch.zeros(4096), "b": torch.zeros(7)}, checkpoint_id=str(path))
    assert classify(info.value).kind == DAMAGED


def test_a_tensor_of_another_shape_is_damage(saved):
    with pytest.raises(CheckpointException) as info:
        dcp.load({"w": torch.zeros(2048), "b": torch.zeros(7)}, checkpoint_id=str(saved))
    verdict = classify(info.value)
    assert verdict.kind == DAMAGED and "Size mismatch" in verdict.reason


@pytest.mark.parametrize("error", [
    OSError(errno.EIO, "Input/output error"),
    OSError(errno.ESTALE, "Stale file handle"),
    PermissionError(errno.EACCES, "Permission denied"),
    TimeoutError("timed out"),
    MemoryError(),
    torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    DistBackendError("NCCL communicator was aborted"),
    RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer"),
    AssertionError("metadata is None; global metadata read failed: [Errno 5] Input/output error"),
])
def test_errors_that_say_nothing_about_the_checkpoint_are_failures(error):
    assert classify(error).kind == FAILED


@pytest.mark.parametrize("error", [
    EOFError(), pickle.UnpicklingError("invalid load key"), FileNotFoundError(errno.ENOENT, "gone"),
    RuntimeError("PytorchStreamReader failed reading zip archive: failed finding central directory"),
    RuntimeError("Missing key in checkpoint state_dict: app.model.layers.2.attention_norm.weight."),
])
def test_errors_of_the_files_themselves_are_damage(error):
    assert classify(error).kind == DAMAGED


def test_one_rank_failing_for_another_reason_outweighs_damage_seen_by_others():
    """DCP hands every rank the failures of all ranks: the verdict must be the same everywhere."""
    both = CheckpointException("read", {0: (EOFError(), None), 1: (OSError(errno.EIO, "Input/output error"), None)})
    verdict = classify(both)
    assert verdict.kind == FAILED and verdict.rank == 1 and str(verdict).startswith("rank 1: OSError: [Errno 5]")
    only_damage = CheckpointException("read", {0: (EOFError(), None), 1: (pickle.UnpicklingError("x"), None)})
    assert classify(only_damage).kind == DAMAGED


def test_a_crafted_metadata_file_is_refused_by_the_precheck_without_running_it(saved, tmp_path):
    path = copy(saved, tmp_path)
    marker = tmp_path / "marker"
    (path / METADATA_FILE).write_bytes(pickle.dumps(CreatesMarker(marker)))
    with pytest.raises(Refused, match="unsafe checkpoint: its metadata refers to") as info:
        precheck(path)
    assert not marker.exists()
    assert classify(info.value).kind == REFUSED


def test_a_crafted_value_that_dcp_meets_is_a_refusal(tmp_path):
    marker = tmp_path / "marker"
    dcp.save({"w": torch.ones(3), "extra": CreatesMarker(marker)}, checkpoint_id=str(tmp_path / "c"), no_dist=True)
    precheck(tmp_path / "c", entries=["w", "extra"])  # the metadata is DCP's own: the value is found by the load
    with pytest.raises(CheckpointException) as info:
        safe_load.load({"w": torch.zeros(3), "extra": None}, str(tmp_path / "c"), no_dist=True)
    verdict = classify(info.value)
    assert verdict.kind == REFUSED and "unsafe checkpoint: its value extra" in verdict.reason, verdict
    assert not marker.exists()


def test_a_refusal_on_any_rank_outweighs_a_failure_or_damage_on_the_others():
    unsafe = UnsafeCheckpoint("unsafe checkpoint: its value train.x: it refers to os.system")
    mixed = CheckpointException("read", {0: (OSError(errno.EIO, "Input/output error"), None), 1: (unsafe, None),
                                         2: (EOFError(), None)})
    verdict = classify(mixed)
    assert verdict.kind == REFUSED and verdict.rank == 1
    # DCP's coordinator wraps a metadata read error in its own text: the refusal is still seen.
    wrapped = AssertionError("metadata is None; global metadata read failed: unsafe checkpoint: its metadata refers "
                             "to builtins.eval")
    assert classify(wrapped).kind == REFUSED


def test_a_checkpoint_without_an_entry_the_trainer_resumes_from_is_refused_not_damage(tmp_path):
    """An LLM checkpoint written before the data position was saved holds "app" and "train" but no
    "data": its files are whole, and falling back past it would throw good work away."""
    path = tmp_path / "step-00000002"
    dcp.save({"app": {"w": torch.ones(3)}, "train": {"step": 2}}, checkpoint_id=str(path), no_dist=True)
    precheck(path, entries=["app", "train"])
    with pytest.raises(Refused, match=r"it has no 'data' entry, which this trainer resumes from") as info:
        precheck(path, entries=["app", "train", "data"])
    assert classify(info.value).kind == REFUSED
