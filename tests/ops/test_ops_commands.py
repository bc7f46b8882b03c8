"""An ops command is one module of ops/commands/, found by scanning that folder: every module there
is a command the CLI exposes, its --help works, and its typed Options has one field for each flag
it declares and no other, so no argparse Namespace needs to travel below the command layer."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import re
from pathlib import Path

import pytest

from ops.cli import build_parser, main

OPS = Path(__file__).resolve().parents[2] / "ops"
# The step from a Namespace to typed options happens here, and nowhere below.
COMMAND_LAYER = {"cli.py", "arguments.py"}


def command_modules() -> list[str]:
    """Read from the folder, not from ops.commands: a module discovery missed still counts."""
    return sorted(p.stem for p in (OPS / "commands").glob("*.py") if not p.name.startswith("_"))


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {name: sp for a in parser._actions if isinstance(a, argparse._SubParsersAction)
            for name, sp in a.choices.items()}


def dests(parser: argparse.ArgumentParser) -> set[str]:
    """Every value the parser (and its subcommands' parsers) may put in the Namespace."""
    own = {a.dest for a in parser._actions if not isinstance(a, argparse._HelpAction)}
    return own.union(*(dests(sp) for sp in subparsers(parser).values()))


def test_every_module_in_the_commands_folder_is_a_command_the_cli_exposes():
    assert len(command_modules()) >= 19  # the commands ops had when they moved here
    assert set(subparsers(build_parser())) == {m.replace("_", "-") for m in command_modules()}


@pytest.mark.parametrize("module", command_modules())
def test_each_commands_help_works_and_is_listed_with_its_help_line(module, capsys):
    name = module.replace("_", "-")
    command = importlib.import_module(f"ops.commands.{module}")
    with pytest.raises(SystemExit) as exit_:
        main([name, "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: ops {name} ")
    for sub in subparsers(subparsers(build_parser())[name]):  # `ops model token --help` and its siblings
        with pytest.raises(SystemExit) as exit_:
            main([name, sub, "--help"])
        assert exit_.value.code == 0 and capsys.readouterr().out.startswith(f"usage: ops {name} {sub} ")
    [listing] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert {a.dest: a.help for a in listing._choices_actions}[name] == command.HELP  # the line `ops --help` shows


@pytest.mark.parametrize("module", command_modules())
def test_each_commands_options_are_frozen_with_one_field_per_flag(module):
    command = importlib.import_module(f"ops.commands.{module}")
    parser = subparsers(build_parser())[module.replace("_", "-")]
    assert dataclasses.is_dataclass(command.Options) and command.Options.__dataclass_params__.frozen
    assert {f.name for f in dataclasses.fields(command.Options)} == dests(parser)


def test_no_argparse_namespace_below_the_command_layer():
    mentions = [f"{path.relative_to(OPS)}:{n}" for path in sorted(OPS.rglob("*.py")) if path.name not in COMMAND_LAYER
                for n, line in enumerate(path.read_text().splitlines(), 1)
                if re.search(r"\bargparse\.Namespace\b|from argparse import .*\bNamespace\b", line)]
    assert not mentions, mentions


def test_a_module_in_the_commands_package_that_is_no_command_is_refused(tmp_path, monkeypatch):
    from ops.commands import scan

    package = tmp_path / "probe_commands"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "helper.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TypeError, match="helper is in the commands package but is no command: it lacks HELP, "
                                        "Options, add_arguments, run"):
        scan(importlib.import_module("probe_commands"))
