"""requirements.txt (.venv) and requirements-checkov.txt (.venv-checkov) pin every package the
project installs, what their packages need included: a package they leave out is resolved to the
newest release on the day a fresh machine installs, and CI on a clean clone then tests a set no one
has run before."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ops.lockfile import PIN, canonical

REPO = Path(__file__).resolve().parents[1]
REQUIREMENTS = REPO / "requirements.txt"
CHECKOV_VENV = REPO / ".venv-checkov"


def pinned(text: str) -> dict[str, tuple[str, set[str]]]:
    """Canonical name -> (version, extras asked for) of each line, read with ops.lockfile's PIN; a
    line that is not a comment and is not exactly one such pin (a range, a marker) is an error."""
    pins = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = PIN.match(line)
        if match is None or match.end() != len(line):
            raise ValueError(f"requirements.txt line {number}: {line!r} does not pin one version with ==")
        name, extras, version = match.groups()
        pins[canonical(name)] = (version, set(filter(None, (extras or "").split(","))))
    return pins


def installed_here() -> dict[str, metadata.Distribution]:
    """Canonical name -> the distribution this Python imports."""
    return {canonicalize_name(d.metadata["Name"]): d for d in metadata.distributions()}


def installed_in(venv: Path) -> dict[str, metadata.Distribution]:
    """Canonical name -> distribution, of another virtual environment of the same Python."""
    sites = list(venv.glob("lib/python3*/site-packages"))
    return {canonicalize_name(d.metadata["Name"]): d for d in metadata.distributions(path=[str(s) for s in sites])}


def needed(pins: dict[str, tuple[str, set[str]]], installed: dict[str, metadata.Distribution]) -> dict[str, str]:
    """Every distribution the pinned ones need in `installed`, transitively (markers evaluated for this
    Python and each package's extras asked for), canonical name -> who needs it first."""
    wanted = {name: "requirements.txt" for name in pins}
    todo = [(name, extras) for name, (_, extras) in pins.items()]
    seen: set[tuple[str, frozenset]] = set()
    while todo:
        name, extras = todo.pop()
        key = (name, frozenset(extras))
        if key in seen:
            continue
        seen.add(key)
        if name not in installed:
            continue  # reported by the test that every pin is installed
        requires = installed[name].requires or []
        for text in requires:
            requirement = Requirement(text)
            if requirement.marker is not None and not any(
                    requirement.marker.evaluate({"extra": extra}) for extra in (extras or {""})):
                continue
            child = canonicalize_name(requirement.name)
            wanted.setdefault(child, name)
            todo.append((child, set(requirement.extras)))
    return wanted


# Each pinned set and where it is installed: .venv is the Python running the suite; `make test`
# installs .venv-checkov before it runs.
SETS = {"requirements.txt": (REQUIREMENTS, None), "requirements-checkov.txt": (REPO / "requirements-checkov.txt", CHECKOV_VENV)}


@pytest.fixture(scope="module", params=sorted(SETS))
def pinned_set(request):
    path, venv = SETS[request.param]
    if venv is not None and not (venv / "bin" / "python").exists():
        pytest.skip(f"{venv.name} is not installed (make test installs it)")
    return request.param, pinned(path.read_text()), installed_here() if venv is None else installed_in(venv)


def test_every_package_the_pins_need_is_pinned_too(pinned_set):
    name_of_file, pins, installed = pinned_set
    missing = sorted(f"{name} (needed by {parent})" for name, parent in needed(pins, installed).items()
                     if name not in pins)
    assert missing == [], f"pin these in {name_of_file} at the installed version: " + ", ".join(missing)


def test_every_pin_is_what_is_installed(pinned_set):
    """The set the tests ran on is the set the file names (torch's local build carries a +cpu tag
    that the pin leaves out)."""
    name_of_file, pins, installed = pinned_set
    wrong = []
    for name, (version, _) in pins.items():
        if name not in installed:
            wrong.append(f"{name} is not installed")
        elif installed[name].version.split("+")[0] != version:
            wrong.append(f"{name}=={version} but {installed[name].version} is installed")
    assert wrong == [], f"{name_of_file}: " + "; ".join(wrong)


def test_make_installs_checkov_from_its_pins_and_the_docs_name_that_version():
    text = (REPO / "Makefile").read_text()
    assert "-r requirements-checkov.txt" in text and "$(CHECKOV_VENV)/.installed: requirements-checkov.txt" in text
    version = pinned((REPO / "requirements-checkov.txt").read_text())["checkov"][0]
    for doc in ("README.md", "checkov-accepted.yaml"):
        named = set(re.findall(r"checkov (\d+\.\d+\.\d+)", (REPO / doc).read_text()))
        assert named == {version}, doc


def test_the_closure_follows_extras_and_markers():
    """moto[server] needs flask only through its extra; a marker for another Python needs nothing."""
    here = installed_here()
    assert "flask" in needed({"moto": ("5.2.5", {"server"})}, here)
    assert "flask" not in needed({"moto": ("5.2.5", set())}, here)
    assert needed({"pytest": ("9.2.0", set())}, here).get("pluggy") == "pytest"


@pytest.mark.parametrize("line", ["torch>=2.13", "torch", "torch==2.13.0 ; python_version<'3.12'"])
def test_a_line_that_does_not_pin_one_version_is_refused_with_its_number(line):
    with pytest.raises(ValueError, match=r"line 2: .* does not pin one version with =="):
        pinned("# a comment\n" + line + "\n")
