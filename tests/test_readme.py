"""The README's commands exist: every `python -m ops COMMAND`, every row of the Operations CLI
table, every `make TARGET` and every `python -m trainer.MODULE` it names. A user reading it top to
bottom must never meet a command that is not there (issue 14: "every command it names exists")."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from ops.cli import build_parser

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def ops_commands() -> set[str]:
    [sub] = [a for a in build_parser()._actions if a.dest == "command"]
    return set(sub.choices)


def make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z-]*):", (REPO / "Makefile").read_text(), flags=re.M))


def test_the_readme_names_commands_at_all():
    """Guards the extraction below: a README without these would make every other test vacuous."""
    assert len(re.findall(r"python -m ops [a-z]", README)) >= 10
    assert len(set(re.findall(r"\bmake ([a-z][a-z-]*)", README))) >= 5


@pytest.mark.parametrize("command", sorted(set(re.findall(r"python -m ops ([a-z][a-z-]*)", README))))
def test_every_ops_command_the_readme_names_exists(command):
    assert command in ops_commands(), f"README names `python -m ops {command}`, which the CLI does not have"


def test_every_row_of_the_operations_table_is_a_command():
    table = README[README.index("## Operations CLI"):]
    table = table[:table.index("\n## ", 1)]
    first_cells = re.findall(r"^\|((?:[^|\\]|\\\|)+)\|", table, flags=re.M)  # a cell may hold an escaped \|
    named = {code.split()[0] for cell in first_cells for code in re.findall(r"`([^`]+)`", cell)}
    assert len(named) >= 10, f"the Operations CLI table names too few commands: {sorted(named)}"
    missing = {c for c in named if re.fullmatch(r"[a-z][a-z-]*", c)} - ops_commands()
    assert not missing, f"Operations CLI rows name commands that do not exist: {sorted(missing)}"


@pytest.mark.parametrize("target", sorted(set(re.findall(r"\bmake ([a-z][a-z-]*)", README))))
def test_every_make_target_the_readme_names_exists(target):
    assert target in make_targets(), f"README names `make {target}`, which the Makefile does not have"


@pytest.mark.parametrize("module", sorted(set(re.findall(r"python -m (trainer\.[a-z_0-9]+)", README))))
def test_every_trainer_module_the_readme_names_exists(module):
    assert importlib.util.find_spec(module) is not None, f"README names `python -m {module}`, which does not exist"


RUN_COMMANDS = re.compile(r"python -m ops ((?:start|stop|submit)\b[^`#\n|]*)")
# The README's placeholders, as a user would fill them in.
FILLED = {"PRESET": "cpu-ddp", "P": "cpu-ddp", "NAME": "dev", "RUN": "cpu-ddp-0123abcd", "N": "my-run",
          "KEY=VALUE": "max_restarts=1", "URI": "registry/trainer:1"}


@pytest.mark.parametrize("line", sorted(set(m.strip() for m in RUN_COMMANDS.findall(README))))
def test_every_start_stop_and_submit_the_readme_shows_parses(line):
    """A run needs its environment (`start PRESET --env NAME`); a README line the parser rejects is
    a command a user cannot run as written."""
    import shlex

    words = [FILLED.get(w, w) for w in shlex.split(line.replace("[", " ").replace("]", " ").replace("\\|", "|"))
             if w not in ("...",)]
    words = [w.split("|")[0] for w in words]
    try:
        build_parser().parse_args(words)
    except SystemExit as exit_:
        pytest.fail(f"README shows `python -m ops {line}`, which the CLI rejects (exit {exit_.code})")
