"""requirements.txt pins every package the project installs, what its packages need included: a
package it leaves out is resolved to the newest release on the day a fresh machine installs, and
CI on a clean clone then tests a set no one has run before."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REQUIREMENTS = Path(__file__).resolve().parents[1] / "requirements.txt"
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)(\[[A-Za-z0-9_,\-]+\])?==(\S+)\s*$")


def pinned(text: str) -> dict[str, tuple[str, set[str]]]:
    """Canonical name -> (version, extras asked for) of each line; a line that is not a comment and
    pins nothing with == is an error."""
    pins = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = PIN.match(line)
        if match is None:
            raise ValueError(f"requirements.txt line {number}: {line!r} does not pin one version with ==")
        name, extras, version = match.groups()
        pins[canonicalize_name(name)] = (version, set(filter(None, (extras or "").strip("[]").split(","))))
    return pins


def needed(pins: dict[str, tuple[str, set[str]]]) -> dict[str, str]:
    """Every distribution the pinned ones need here, transitively (markers evaluated for this Python
    and each package's extras asked for), canonical name -> who needs it first."""
    wanted = {name: "requirements.txt" for name in pins}
    todo = [(name, extras) for name, (_, extras) in pins.items()]
    seen: set[tuple[str, frozenset]] = set()
    while todo:
        name, extras = todo.pop()
        key = (name, frozenset(extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # reported by the test that every pin is installed
        for text in requires:
            requirement = Requirement(text)
            if requirement.marker is not None and not any(
                    requirement.marker.evaluate({"extra": extra}) for extra in (extras or {""})):
                continue
            child = canonicalize_name(requirement.name)
            wanted.setdefault(child, name)
            todo.append((child, set(requirement.extras)))
    return wanted


@pytest.fixture(scope="module")
def pins():
    return pinned(REQUIREMENTS.read_text())


def test_every_package_the_pins_need_is_pinned_too(pins):
    missing = sorted(f"{name} (needed by {parent})" for name, parent in needed(pins).items() if name not in pins)
    assert missing == [], "pin these in requirements.txt at the installed version: " + ", ".join(missing)


def test_every_pin_is_what_is_installed(pins):
    """The set the tests ran on is the set requirements.txt names (torch's local build carries a +cpu
    tag that the pin leaves out)."""
    wrong = []
    for name, (version, _) in pins.items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            wrong.append(f"{name} is not installed")
            continue
        if installed.split("+")[0] != version:
            wrong.append(f"{name}=={version} but {installed} is installed")
    assert wrong == [], "; ".join(wrong)


def test_the_closure_follows_extras_and_markers():
    """moto[server] needs flask only through its extra; a marker for another Python needs nothing."""
    assert "flask" in needed({"moto": ("5.2.5", {"server"})})
    assert "flask" not in needed({"moto": ("5.2.5", set())})
    assert needed({"pytest": ("9.2.0", set())}).get("pluggy") == "pytest"


@pytest.mark.parametrize("line", ["torch>=2.13", "torch", "torch==2.13.0 ; python_version<'3.12'"])
def test_a_line_that_does_not_pin_one_version_is_refused_with_its_number(line):
    with pytest.raises(ValueError, match=r"line 2: .* does not pin one version with =="):
        pinned("# a comment\n" + line + "\n")
