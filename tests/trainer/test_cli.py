"""The trainer CLIs' output paths: a folder that cannot be created, an output that is a folder
and a read-only mount are one line naming the argument, never a traceback, and nothing is left
half-made."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainer.cli import UsageError, create_folder, open_for_append, staging_folder


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
