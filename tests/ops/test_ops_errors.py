"""A bug in ops is one line naming the command and the file holding the full trace."""

from __future__ import annotations

import stat
import tempfile

import pytest

from ops import cli
from ops.commands import model as model_command
from ops.commands import plan as plan_command


@pytest.fixture
def crash_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _crash(options):
    raise KeyError("nodegroups")


def test_an_unexpected_exception_is_one_line_naming_the_command_and_the_trace_file(crash_dir, monkeypatch, capsys):
    monkeypatch.setattr(plan_command, "run", _crash)
    assert cli.main(["plan", "--env", "dev"]) == 1
    err = capsys.readouterr().err
    [line] = err.splitlines()
    [trace] = crash_dir.glob("ops-crash-*.txt")
    assert line.startswith("error: `ops plan` failed unexpectedly (KeyError: 'nodegroups')")
    assert line.endswith(f"the full trace is in {trace}")
    text = trace.read_text()
    assert text.startswith("python -m ops plan --env dev\n") and "Traceback" in text and "_crash" in text
    assert stat.S_IMODE(trace.stat().st_mode) == 0o600  # arguments may name private paths


def test_two_crashes_in_one_second_keep_both_traces(crash_dir, monkeypatch, capsys):
    monkeypatch.setattr(plan_command, "run", _crash)
    assert cli.main(["plan", "--env", "dev"]) == cli.main(["plan", "--env", "dev"]) == 1
    assert len(list(crash_dir.glob("ops-crash-*.txt"))) == 2
    assert "trace follows" not in capsys.readouterr().err


def test_a_subcommand_crash_names_the_subcommand(crash_dir, monkeypatch, capsys):
    monkeypatch.setattr(model_command, "run", _crash)
    assert cli.main(["model", "status"]) == 1
    assert capsys.readouterr().err.startswith("error: `ops model status` failed unexpectedly")


def test_a_trace_that_cannot_be_written_follows_the_line_instead(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(blocker))  # a "directory" that is a file
    monkeypatch.setattr(plan_command, "run", _crash)
    assert cli.main(["plan", "--env", "dev"]) == 1
    first, *rest = capsys.readouterr().err.splitlines()
    assert first.endswith("its trace follows") and rest[0].startswith("Traceback")


def test_user_errors_are_not_reported_as_crashes(crash_dir, capsys):
    assert cli.main(["plan", "--env", "nope"]) == 2
    assert "unexpectedly" not in capsys.readouterr().err
    assert not list(crash_dir.iterdir())
