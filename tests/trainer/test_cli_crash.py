"""trainer.cli.run_main: a crash keeps its traceback in the log between markers and ends with one line."""

from __future__ import annotations

import json

import pytest

from trainer.cli import CRASH_END, CRASH_MARKER, UsageError, run_main


def crashing_main():
    raise RuntimeError("NCCL error: remote process exited\nsecond line")


def test_a_crash_ends_the_log_with_one_line_below_the_marked_traceback(monkeypatch, capsys):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE", raising=False)
    with pytest.raises(SystemExit) as exit_:
        run_main(crashing_main)
    assert exit_.value.code == 1  # retryable: torchrun and the Job's backoff try again
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == CRASH_MARKER.format(command=__name__)
    assert lines[1] == "Traceback (most recent call last):"
    assert lines[-2] == CRASH_END
    assert lines[-1] == (f"error: python -m {__name__} (rank 3) failed unexpectedly (RuntimeError: NCCL error: "
                         "remote process exited second line); the traceback is above")


def test_under_torchrun_the_crash_is_also_the_agents_error_file(monkeypatch, tmp_path, capsys):
    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    with pytest.raises(SystemExit):
        run_main(crashing_main)
    message = json.loads(error_file.read_text())["message"]
    assert message["message"].startswith("RuntimeError: NCCL error")
    assert "crashing_main" in message["extraInfo"]["py_callstack"]


def test_a_usage_error_stays_one_line_without_a_traceback(capsys):
    def bad():
        raise UsageError("--steps", "must be positive")
    with pytest.raises(SystemExit) as exit_:
        run_main(bad)
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "error: --steps: must be positive\n"


# A worker whose collective failed because a peer died: its DistributedDataParallel (in a frame
# the traceback holds) owns a gloo process group whose destructor waits for a work thread still
# blocked on that peer. Here the owner is an object whose destructor never returns.
WORKER = """
import threading
from trainer.cli import run_main, WorkerExit

class HeldByTheFailedFrame:
    def __del__(self):
        print("destructor entered", flush=True)
        threading.Event().wait()

def main():
    group = HeldByTheFailedFrame()
    {raise_}

run_main(main, finalize=False)
"""


@pytest.mark.parametrize("raise_, code", [
    ("raise RuntimeError('Connection closed by peer')", 1),
    ("raise WorkerExit('stopped on purpose', 4)", 4),
    # A save that failed on a full disk: torch.distributed.checkpoint raises a BaseException.
    ("from torch.distributed.checkpoint.api import CheckpointException; "
     "raise CheckpointException('save failed', {0: (OSError(28, 'No space left on device'), None)})", 1),
])
def test_a_failed_distributed_worker_exits_without_destroying_what_its_failure_holds(raise_, code):
    """Before: the except clause ended, the traceback and with it the frame's objects were freed,
    and the worker hung in a process group's destructor after printing its crash, so torchrun
    never restarted it (a make test run caught it in test_vision_faults; py-spy showed the
    destructor). Now it exits with its status and the destructor never runs."""
    import subprocess
    import sys

    from trainer_procs import REPO, job_env

    p = subprocess.run([sys.executable, "-c", WORKER.format(raise_=raise_)], cwd=REPO, env=job_env(),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == code, p.stdout + p.stderr
    assert "destructor entered" not in p.stdout


GLOO_CLOSED = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
               "[127.0.0.1]:5317. This is typically caused by a remote worker crashing. Check the logs of the remote "
               "worker before reporting an error. GLHF!")  # what torch 2.13's gloo raised in test_vision_faults


@pytest.mark.parametrize("exc, words", [
    (RuntimeError(GLOO_CLOSED), "gloo: Connection closed by peer"),
    (RuntimeError("[../gloo/transport/tcp/pair.cc:598] Read error [10.0.0.2]:41234: Connection reset by peer"),
     "gloo: Connection reset by peer"),
])
def test_a_collective_that_lost_its_peer_is_one_line_saying_another_rank_stopped_first(monkeypatch, capsys, exc,
                                                                                         words):
    """The rank whose peer stopped first printed a crash report for gloo's socket error, which buried
    the peer's own line; now one line, exit 1 (torchrun restarts on it); its error file (below) lets
    torchrun's summary name the rank that stopped first."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE", raising=False)

    def main():
        raise exc
    with pytest.raises(SystemExit) as exit_:
        run_main(main)
    assert exit_.value.code == 1
    assert capsys.readouterr().err == (f"error: rank 0 stops: another rank of the run stopped first ({words}); "
                                       "that rank's log says why\n")


def test_torchruns_summary_names_the_rank_that_stopped_first_not_its_peer_in_the_same_second(monkeypatch, tmp_path):
    """torchrun's summary names as root cause the failure of the lowest timestamp, in whole seconds,
    and one without an error file gets the time torchrun reads it (torch 2.13 ProcessFailure,
    ChildFailedError.get_first_failure): a peer that stopped in the same second as the rank that
    crashed was named instead, as 'error_file: <N/A>' (seen once in CI in
    test_a_save_that_the_disk_refuses_ends_the_run_with_one_line_naming_it_and_keeps_the_checkpoints_before).
    The peer's error file records it one second later, with its line as the message."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    crash, peer = tmp_path / "crash.json", tmp_path / "peer.json"
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(crash))
    with pytest.raises(SystemExit):
        run_main(lambda: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(peer))
    with pytest.raises(SystemExit) as exit_:
        run_main(lambda: (_ for _ in ()).throw(RuntimeError(GLOO_CLOSED)))
    assert exit_.value.code == 1  # still a failure torchrun restarts on
    failures = {0: ProcessFailure(local_rank=0, pid=10, exitcode=1, error_file=str(peer)),
                1: ProcessFailure(local_rank=1, pid=11, exitcode=1, error_file=str(crash))}
    root, failure = ChildFailedError("trainer.llm", failures).get_first_failure()
    assert root == 1 and "No space left on device" in failure.message["message"]
    assert "another rank of the run stopped first" in failures[0].message


@pytest.mark.parametrize("exc", [
    RuntimeError("Connection closed by peer"),  # a bug's RuntimeError, not torch.distributed's
    ConnectionResetError(104, "Connection reset by peer"),  # a socket of our own (S3, the hub)
    RuntimeError("[../gloo/transport/tcp/pair.cc:446] op.preamble.length <= op.nbytes. 8 vs 4"),  # a bug in gloo use
])
def test_other_errors_that_name_a_peer_or_gloo_keep_their_traceback(capsys, exc):
    def main():
        raise exc
    with pytest.raises(SystemExit) as exit_:
        run_main(main)
    assert exit_.value.code == 1
    assert "traceback follows" in capsys.readouterr().err
