"""config.options: an option declared once on a dataclass field gives the parser, the typed
configuration and the argument list; sections keep flat flags and take their defaults from
their default instance."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from config.options import (add_to_parser, build, fraction, fraction_below_one, leaf, leaves, non_negative_float,
                            option, positive_int, render, section, switch)


@dataclass(frozen=True)
class Saving:
    """Saving: where and how often."""
    unit: ClassVar[str] = "steps"
    directory: str | None = option(None, "where to save", flag="--save-dir")
    every: int = option(10, "{unit} between saves", flag="--save-every", parse=positive_int)
    quiet: bool = switch("say nothing")


@dataclass(frozen=True)
class Job:
    """A job."""
    steps: int = option(5, "steps to run", parse=positive_int)
    saving: Saving = section(Saving(every=50))
    rate: float = option(0.5, "a fraction", parse=fraction_below_one)
    derived: str = "not an option"  # a value the program fills in after parsing


def _parse(argv: list[str]) -> Job:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_to_parser(parser, Job)
    return build(Job, vars(parser.parse_args(argv)))


def test_flags_are_flat_in_declaration_order_and_a_section_takes_its_default_instances_defaults():
    assert [(x.flag, x.dest, x.default) for x in leaves(Job)] == [
        ("--steps", "steps", 5), ("--save-dir", "save_dir", None), ("--save-every", "save_every", 50),
        ("--quiet", "quiet", False), ("--rate", "rate", 0.5)]
    assert leaf(Job, "save_every").help == "steps between saves"  # class attributes fill the help's braces


def test_a_command_line_builds_the_typed_configuration_and_defaults_fill_the_rest():
    job = _parse(["--save-every", "7", "--quiet", "--rate", "0.25"])
    assert job == Job(steps=5, saving=Saving(directory=None, every=7, quiet=True), rate=0.25)
    assert _parse([]) == Job() and Job().saving.every == 50 and job.derived == "not an option"


def test_a_value_is_checked_by_the_options_parse_function():
    with pytest.raises(argparse.ArgumentError, match="must be a positive integer, got 0"):
        _parse(["--save-every", "0"])
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be in \[0, 1\), got 1"):
        leaf(Job, "rate").typed(1)
    with pytest.raises(argparse.ArgumentTypeError, match="must be zero or more, got nan"):
        non_negative_float("nan")
    assert (fraction("0"), fraction("1"), fraction("0.9")) == (0, 1, 0.9)  # --hw-decoder-load: both ends allowed
    for bad in ("1.5", "-0.1", "nan"):
        with pytest.raises(argparse.ArgumentTypeError, match=rf"must be in \[0, 1\], got {bad}"):
            fraction(bad)


def test_render_asks_for_values_in_declaration_order_whatever_order_they_come_in():
    argv = render(Job, {"rate": 0.25, "quiet": True, "save_every": 7, "save_dir": None})
    assert argv == ["--save-every", "7", "--quiet", "--rate", "0.25"]
    assert _parse(argv) == build(Job, {"save_every": 7, "quiet": True, "rate": 0.25})
    with pytest.raises(KeyError, match="no option speed"):
        render(Job, {"speed": 3})


def test_a_flag_declared_twice_is_refused_when_the_class_is_read():
    @dataclass(frozen=True)
    class Twice:
        first: Saving = section(Saving())
        second: Saving = field(default_factory=Saving, metadata={"config.options.section": True})

    with pytest.raises(TypeError, match="declares flag --quiet, --save-dir, --save-every more than once"):
        leaves(Twice)


def test_an_option_with_a_bare_value_takes_it_from_the_flag_alone_and_is_rendered_with_its_value():
    @dataclass(frozen=True)
    class Modes:
        mode: str = option("none", "how", choices=("none", "some", "all"), bare="all")
        steps: int = option(5, "steps to run", parse=positive_int)

    parser = argparse.ArgumentParser(exit_on_error=False)
    add_to_parser(parser, Modes)

    def parsed(argv):
        return build(Modes, vars(parser.parse_args(argv)))

    assert parsed([]).mode == "none" and parsed(["--mode"]).mode == "all"
    assert parsed(["--mode", "--steps", "3"]) == Modes(mode="all", steps=3)
    assert parsed(["--mode", "some"]).mode == "some" and parsed(["--mode=none"]).mode == "none"
    with pytest.raises(argparse.ArgumentError, match="invalid choice: 'most'"):
        parsed(["--mode", "most"])
    assert render(Modes, {"mode": "all"}) == ["--mode", "all"]  # never the bare flag: the argv says what it asks
