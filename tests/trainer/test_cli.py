"""The trainer CLIs' output paths: a folder that cannot be created, an output that is a folder
and a read-only mount are one line naming the argument, never a traceback, and nothing is left
half-made."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.cli import UsageError, create_folder, open_for_append, stale_staging, staging_folder
from trainer_procs import REPO, job_env


@pytest.fixture
def blocker(tmp_path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("x")
    return path


def test_a_folder_below_a_file_names_the_file(blocker):
    with pytest.raises(UsageError) as err:
        create_folder(blocker / "deep" / "out", "--out")
    assert str(err.value) == f"--out: cannot create {blocker / 'deep' / 'out'}: {blocker} is a file, not a folder"


def test_a_folder_that_the_system_refuses_gives_its_reason():
    with pytest.raises(UsageError, match=r"^--dest: cannot create /proc/no-such/x: No such file or directory$"):
        create_folder(Path("/proc/no-such/x"), "--dest")


def test_a_staging_folder_is_made_beside_the_output_and_named_for_it(tmp_path, blocker):
    staging = staging_folder(tmp_path / "new" / "out", "--output")
    assert staging.parent == tmp_path / "new" and staging.name.startswith(".out.") and staging.is_dir()
    with pytest.raises(UsageError, match=rf"^--output: cannot create {blocker / 'out'}: {blocker} is a file"):
        staging_folder(blocker / "out", "--output")


def test_an_output_made_in_a_staging_folder_gets_the_mode_of_any_new_folder_not_0700(tmp_path):
    """The staging folder becomes the output (prepare's token shards, hf export's model). mkdtemp's
    0700 made every output readable by its writer alone: a serving pod or a colleague of another
    uid on the same FSx could not read the exported model."""
    import stat

    old = os.umask(0o022)
    try:
        staging = staging_folder(tmp_path / "out", "--output")
        plain = tmp_path / "plain"
        plain.mkdir()
    finally:
        os.umask(old)
    assert stat.S_IMODE(staging.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode) == 0o755
    assert stale_staging(tmp_path / "out") == [staging]


def test_a_folder_this_user_cannot_write_is_refused(tmp_path):
    """Asked of os.access(), root's answer came from its capabilities: it said yes."""
    from cli_sweep import denied_as_a_user

    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with denied_as_a_user(), pytest.raises(UsageError) as err:
        create_folder(locked, "--out")
    assert str(err.value) == f"--out: {locked} is not writable by this user (uid {os.getuid()})"
    assert list(locked.iterdir()) == []


def test_an_append_file_that_is_a_folder_or_below_a_file_is_one_line(tmp_path, blocker):
    with pytest.raises(UsageError, match=rf"^--metrics-file: {tmp_path} is a folder, expected a file$"):
        open_for_append(tmp_path, "--metrics-file")
    with pytest.raises(UsageError, match=rf"^--metrics-file: cannot create {blocker / 'm.jsonl'}: {blocker} is a file"):
        open_for_append(blocker / "m.jsonl", "--metrics-file")
    with open_for_append(tmp_path / "logs" / "m.jsonl", "--metrics-file") as f:
        f.write("{}\n")
    assert (tmp_path / "logs" / "m.jsonl").read_text() == "{}\n"


# --- error lines stay whole on a shared pipe -----------------------------------------------------

class Writes(io.RawIOBase):
    """What reaches the file descriptor, one entry per write(): python -u's stderr (PYTHONUNBUFFERED,
    set in the training image) is a TextIOWrapper writing straight through to it."""

    def __init__(self):
        self.calls: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.calls.append(bytes(data))
        return len(data)


def test_each_line_a_worker_ends_with_is_one_write_so_ranks_sharing_a_pipe_never_split_it(monkeypatch):
    # Two workers of one torchrun share its stderr. A write of up to PIPE_BUF (4096) bytes to a
    # pipe is never interleaved with another; a line written as text and then its newline is.
    from trainer.cli import Parser, WorkerExit, _exit_status
    from trainer.nccl_net import NotOnEfa

    raw = Writes()
    monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(raw, write_through=True))
    monkeypatch.setenv("LOCAL_RANK", "0")
    _exit_status(None, UsageError("--data", "x" * 2000))
    _exit_status(None, WorkerExit("the lease was taken over", 2))
    _exit_status(None, NotOnEfa("NCCL is on Socket, not EFA"))
    with pytest.raises(SystemExit):
        Parser(prog="p").parse_args(["--no-such"])
    assert [c.count(b"\n") for c in raw.calls] == [1, 1, 1, 1] and all(c.endswith(b"\n") for c in raw.calls), \
        raw.calls


WRITERS = r"""
import multiprocessing, sys
from trainer.cli import UsageError, _exit_status

def write(rank, start):
    start.wait()  # all start writing together
    for n in range(300):
        _exit_status(None, UsageError("--data", f"rank {rank} line {n:03d} " + "x" * 1000))

ctx = multiprocessing.get_context("fork")
start = ctx.Barrier(8)
writers = [ctx.Process(target=write, args=(rank, start)) for rank in range(8)]
for w in writers:
    w.start()
for w in writers:
    w.join()
sys.exit(max(w.exitcode for w in writers))
"""


def test_error_lines_of_many_processes_on_one_pipe_arrive_whole():
    # Eight processes share the one stderr pipe that run() reads, as torchrun's workers share a pod's.
    done = subprocess.run([sys.executable, "-c", WRITERS], cwd=REPO, env=job_env(), capture_output=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stderr.decode().splitlines()
    pattern = re.compile(r"error: --data: rank [0-7] line \d{3} x{1000}")
    assert len(lines) == 8 * 300 and all(pattern.fullmatch(line) for line in lines), \
        next((line[:200] for line in lines if not pattern.fullmatch(line)), f"{len(lines)} lines")
