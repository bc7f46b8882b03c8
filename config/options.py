"""Command-line options declared once, on the dataclass fields they fill.

A configuration is a frozen dataclass whose fields are options (`option`, `switch`) or sections
(`section`: another such dataclass, a group of options such as the checkpoint's). From that one
declaration come the command line (`add_to_parser`), the typed configuration a command line
gives (`build`) and the argument list that asks for given values (`render`), so a trainer's
parser and the job presets that write its arguments cannot drift apart.

Flags are flat (`--checkpoint-every`, not `--checkpoint.every`): they are the names presets,
scripts and users already write, and each names its value in an error line. A section's defaults
are its default instance's values, so one section class serves workloads that differ only in a
default (trainer.vision checkpoints every 500 steps, trainer.llm every 100). Fields that are
neither options nor sections are not on the command line: values a trainer derives after parsing.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import Field, dataclass, field, fields, replace
from functools import cache
from typing import Any, TypeVar

T = TypeVar("T")
_OPTION, _SECTION = "config.options.option", "config.options.section"


# --- value checks (argparse `type` functions: text in, value or ArgumentTypeError out) -----------

# Counts and sizes become tensor sizes, indices and slice bounds, which hold at most a 64-bit
# index: a larger number ended a run in an OverflowError traceback (--batch-size, --train-samples).
LARGEST_COUNT = sys.maxsize


def _count(value: int, text: str) -> int:
    if value > LARGEST_COUNT:
        raise argparse.ArgumentTypeError(f"must be at most {LARGEST_COUNT}, got {text}")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return _count(value, text)


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be zero or more, got {text}")
    return _count(value, text)


# A seed is mixed with counters (epoch, sample index) into generator seeds, which torch holds in 64 bits.
LARGEST_SEED = 2**32 - 1


def seed_int(text: str) -> int:
    value = int(text)
    if not 0 <= value <= LARGEST_SEED:
        raise argparse.ArgumentTypeError(f"must be in [0, {LARGEST_SEED}], got {text}")
    return value


def _finite(value: float, text: str) -> float:
    if value == math.inf:  # an infinite rate, momentum or decay trains nothing but NaN
        raise argparse.ArgumentTypeError(f"must be finite, got {text}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return _finite(value, text)


def non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be zero or more, got {text}")
    return _finite(value, text)


# A timeout bounds a wait on other ranks: it must end. Beyond about 292 years gloo's nanosecond
# clock overflows (and beyond 10^9 days, timedelta); a week is longer than any start-up.
LONGEST_TIMEOUT_S = 7 * 24 * 3600


def timeout_seconds(text: str) -> float:
    value = positive_float(text)
    if value > LONGEST_TIMEOUT_S:
        raise argparse.ArgumentTypeError(f"must be at most {LONGEST_TIMEOUT_S} seconds (a week), got {text}")
    return value


def fraction_below_one(text: str) -> float:
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:  # NaN too
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return value


# --- declaring -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Option:
    help: str  # may name class attributes of its dataclass in braces: "{unit} per rank"
    flag: str | None = None  # default: --field-name
    parse: Callable[[str], Any] | None = None  # text to value; None: the text itself
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    switch: bool = False  # a flag without a value: True when given
    bare: Any = None  # the value the flag alone means, for an option whose value may be left out


def option(default: Any, help: str, *, flag: str | None = None, parse: Callable[[str], Any] | None = None,
           choices: Iterable[str] | None = None, metavar: str | None = None, bare: Any = None) -> Any:
    """A field that is a command-line option taking one value; with `bare`, the value may be left
    out and the flag alone means `bare` (a former switch that grew choices keeps its old meaning)."""
    meta = Option(help, flag, parse, tuple(choices) if choices is not None else None, metavar, bare=bare)
    return field(default=default, metadata={_OPTION: meta})


def switch(help: str, *, flag: str | None = None) -> Any:
    """A field that is a flag without a value: False unless given."""
    return field(default=False, metadata={_OPTION: Option(help, flag, switch=True)})


def section(default: Any) -> Any:
    """A field holding a group of options; `default` (an instance) gives the group's defaults."""
    return field(default_factory=lambda: default, metadata={_SECTION: True})


@dataclass(frozen=True)
class Leaf:
    """One option as it sits in a configuration: where (`path`), its flag, and its default there."""
    path: tuple[str, ...]  # attribute names from the top: ("checkpoint", "every")
    option: Option
    default: Any
    owner: type  # the dataclass that declares the field

    @property
    def flag(self) -> str:
        return _flag(self.path[-1], self.option)

    @property
    def dest(self) -> str:
        """The option's flat name: its flag's, with underscores (--batch-size: batch_size)."""
        return _dest(self.flag)

    @property
    def help(self) -> str:
        text = self.option.help
        return text.format_map(_Attributes(self.owner)) if "{" in text else text

    def value(self, config: Any) -> Any:
        for name in self.path:
            config = getattr(config, name)
        return config

    def typed(self, value: Any) -> Any:
        """`value` as the command line would give it: its text through the option's parse and
        choices (ValueError or argparse.ArgumentTypeError when it is not allowed)."""
        if self.option.switch:
            if not isinstance(value, bool):
                raise ValueError(f"must be true or false, got {value!r}")
            return value
        if value is None:
            return None
        text = str(value)
        if self.option.choices is not None and text not in self.option.choices:
            raise ValueError(f"must be one of {', '.join(self.option.choices)}, got {text!r}")
        return self.option.parse(text) if self.option.parse else text


def _flag(name: str, opt: Option) -> str:
    return opt.flag or "--" + name.replace("_", "-")


def _dest(flag: str) -> str:
    return flag[2:].replace("-", "_")


class _Attributes(dict):
    def __init__(self, owner: type):
        super().__init__()
        self.owner = owner

    def __missing__(self, key: str) -> Any:
        return getattr(self.owner, key)


def _is_section(f: Field) -> bool:
    return bool(f.metadata.get(_SECTION))


@cache
def leaves(cls: type) -> tuple[Leaf, ...]:
    """Every option of configuration class `cls`, in declaration order, sections flattened."""
    found: list[Leaf] = []

    def walk(instance: Any, path: tuple[str, ...]) -> None:
        for f in fields(instance):
            if _OPTION in f.metadata:
                found.append(Leaf((*path, f.name), f.metadata[_OPTION], getattr(instance, f.name), type(instance)))
            elif _is_section(f):
                walk(getattr(instance, f.name), (*path, f.name))

    walk(cls(), ())
    for kind in ("flag", "dest"):
        names = [getattr(leaf, kind) for leaf in found]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise TypeError(f"{cls.__name__} declares {kind} {', '.join(repeated)} more than once")
    return tuple(found)


def leaf(cls: type, dest: str) -> Leaf:
    for candidate in leaves(cls):
        if candidate.dest == dest:
            return candidate
    raise KeyError(f"{cls.__name__} has no option {dest!r}")


# --- using ---------------------------------------------------------------------------------------

def add_to_parser(parser: argparse.ArgumentParser, cls: type) -> None:
    """Every option of `cls` as an argparse argument; a section's options in a group of its own,
    titled by its field name and described by its class docstring's first line."""
    groups: dict[tuple[str, ...], Any] = {}
    for item in leaves(cls):
        where = item.path[:-1]
        if where and where not in groups:
            doc = (item.owner.__doc__ or "").strip().split("\n")[0]
            groups[where] = parser.add_argument_group(" ".join(where), doc or None)
        target = groups.get(where, parser)
        opt = item.option
        if opt.switch:
            target.add_argument(item.flag, dest=item.dest, action="store_true", help=item.help)
        else:
            optional = {} if opt.bare is None else {"nargs": "?", "const": opt.bare}
            target.add_argument(item.flag, dest=item.dest, default=item.default, type=opt.parse, choices=opt.choices,
                                metavar=opt.metavar, help=item.help, **optional)


def _known(cls: type, values: Mapping[str, Any]) -> None:
    unknown = set(values) - {item.dest for item in leaves(cls)}
    if unknown:
        raise KeyError(f"{cls.__name__} has no option {', '.join(sorted(unknown))}")


def build(cls: type[T], values: Mapping[str, Any]) -> T:
    """The configuration with `values` (by flat name, as typed values) and defaults elsewhere."""
    _known(cls, values)

    def make(instance: Any) -> Any:
        changes = {}
        for f in fields(instance):
            if _OPTION in f.metadata:
                dest = _dest(_flag(f.name, f.metadata[_OPTION]))
                if dest in values:
                    changes[f.name] = values[dest]
            elif _is_section(f):
                changes[f.name] = make(getattr(instance, f.name))
        return replace(instance, **changes)

    return make(cls())


def render(cls: type, values: Mapping[str, Any]) -> list[str]:
    """The arguments that ask for `values` (by flat name): in `cls`'s declaration order, a true
    switch as its bare flag, a value as its text; None and false are left out (the default)."""
    _known(cls, values)
    out: list[str] = []
    for item in leaves(cls):
        value = values.get(item.dest)
        if value is None or value is False:
            continue
        out += [item.flag] if value is True else [item.flag, str(value)]
    return out
