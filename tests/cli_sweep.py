"""The machinery of the hostile-path sweep (tests/test_cli_paths.py): finding every command's
path-like arguments, building hostile files, and running a command in this process with a deadline.

A command runs in-process (its main(argv) under run_main, as `python -m` would run it) because
starting Python and importing torch for each of ~150 cases would take many minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import importlib
import io
import os
import re
import signal
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]

# --- finding the arguments -----------------------------------------------------------------------

# Names that suggest a path. An argument matching one is either swept or listed as not a path.
PATH_WORDS = re.compile(r"file|dir|path|root|out|kubeconfig|dist|etcd|checkpoint|snapshot|data|tokenizer|input|"
                        r"src|dest|init|metrics|runs?$|output", re.I)


@dataclass(frozen=True)
class Argument:
    cli: str  # "ops", "trainer.hf", ...
    command: str  # the subcommand path, "" for none: "model token", "export", "scaling"
    name: str  # the first option string, or the positional's metavar
    names: tuple[str, ...]  # every way the error line may name it
    is_path_type: bool  # argparse type=Path

    @property
    def key(self) -> str:
        return " ".join(p for p in (self.cli, self.command, self.name) if p)


def _arguments(cli: str, command: str, parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, subparser in action.choices.items():
                yield from _arguments(cli, f"{command} {sub}".strip(), subparser)
            continue
        if isinstance(action, (argparse._HelpAction, argparse._StoreTrueAction, argparse._StoreFalseAction,
                               argparse._VersionAction)):
            continue
        if action.option_strings:
            name, names = action.option_strings[-1], tuple(action.option_strings)
        else:
            name = action.metavar or action.dest
            names = (name, action.dest, action.dest.upper())
        yield Argument(cli, command, name, names, action.type is Path)


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        self.parser = parser


def captured_parser(main: Callable[[list[str]], object], argv: list[str]) -> argparse.ArgumentParser:
    """The parser a main() builds inside itself: caught at its parse_args call."""
    original = argparse.ArgumentParser.parse_args

    def capture(self, *args, **kwargs):
        raise _Captured(self)

    argparse.ArgumentParser.parse_args = capture
    try:
        main(argv)
    except _Captured as caught:
        return caught.parser
    finally:
        argparse.ArgumentParser.parse_args = original
    raise AssertionError(f"{main} did not parse arguments")


def arguments_of(cli: str, parser: argparse.ArgumentParser, command: str = "") -> list[Argument]:
    return list(_arguments(cli, command, parser))


def looks_like_a_path(arg: Argument) -> bool:
    return arg.is_path_type or bool(PATH_WORDS.search(arg.name.lstrip("-")))


def modules_with_a_main() -> list[str]:
    """Every module a user can run: `python -m X` or `python X.py`, found by its __main__ guard."""
    found = []
    for folder in ("ops", "trainer", "bench", "config", "k8s"):
        for path in sorted((REPO / folder).rglob("*.py")):
            text = path.read_text()
            if path.name == "__main__.py" or 'if __name__ == "__main__"' in text:
                module = ".".join(path.relative_to(REPO).with_suffix("").parts)
                found.append(module.removesuffix(".__main__"))
    return found + (["app"] if (REPO / "app.py").exists() else [])


def entry(cli: str) -> Callable[[list[str]], object]:
    """main(argv) as `python -m cli` runs it: ops.cli.main's status, or run_main around a trainer main."""
    if cli == "ops":
        from ops.cli import main
        return lambda argv: main(argv)
    from trainer.cli import run_main
    module = importlib.import_module(cli)
    return lambda argv: run_main(lambda: module.main(argv))


# --- hostile files -------------------------------------------------------------------------------

BINARY = bytes(range(256)) * 8  # NUL bytes and invalid UTF-8
NOT_UTF8 = "café, naïve: latin-1 text\n".encode("latin-1")  # no NUL, but not UTF-8
PROC = Path("/proc")  # a directory whose children no one can create, root included


# A folder no one may enter or list (mode 000). The trainer image runs as uid 1000, to whom it is
# closed; root passes every permission check through CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH,
# so a case that uses one runs with those two dropped (denied_as_a_user below).
UNENTERABLE = "unenterable"


def unenterable(tmp: Path) -> Path:
    folder = tmp / "locked"
    folder.mkdir(exist_ok=True)
    folder.chmod(0)
    return folder


_DAC_CAPABILITIES = (1 << 1) | (1 << 2)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH (linux/capability.h)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


@contextlib.contextmanager
def denied_as_a_user():
    """File permissions bite in this thread as they do for an ordinary user: the two capabilities
    that let root past them leave the effective set, and come back after (they stay permitted).
    Capabilities are per thread; the commands check their paths in the thread that runs main()."""
    libc = ctypes.CDLL(None, use_errno=True)
    header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()  # _LINUX_CAPABILITY_VERSION_3
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget failed")
    effective = data[0].effective
    data[0].effective &= ~_DAC_CAPABILITIES
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")
    try:
        yield
    finally:
        data[0].effective = effective
        libc.capset(ctypes.byref(header), data)


def tree(root: Path) -> dict[str, str]:
    """Every file under root with a hash of its content; directories as 'dir'."""
    out = {}
    if not root.exists():
        return out
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink() or not path.is_dir() and not path.is_file():
            out[rel] = "other"
        elif path.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return out


def new_files(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Files that appeared or changed; a new empty directory is not output."""
    return [p for p, h in after.items() if h != "dir" and before.get(p) != h]


# --- running a command ---------------------------------------------------------------------------

class Hung(BaseException):
    """Raised by the alarm in the command's stack: a BaseException, so `except Exception` cannot eat it."""


@dataclass
class Outcome:
    code: object
    stdout: str
    stderr: str
    hung: bool = False
    escaped: str = ""  # a traceback that left main() entirely

    @property
    def lines(self) -> list[str]:
        """stderr's lines; progress-bar redraws (carriage returns) are not lines a person reads."""
        return [line for line in self.stderr.split("\n") if line.strip() and "\r" not in line]


def run_in_process(main: Callable[[list[str]], object], argv: list[str], timeout_s: float) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    environ = dict(os.environ)

    def fire(*_):
        raise Hung(f"no answer in {timeout_s} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    outcome = Outcome(None, "", "")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                outcome.code = main(argv) or 0
            except SystemExit as exc:
                if isinstance(exc.code, str):  # `raise SystemExit("error: ...")`: Python prints it, exit 1
                    print(exc.code, file=err)
                    outcome.code = 1
                else:
                    outcome.code = exc.code or 0
    except Hung:
        outcome.hung = True
    except Exception:
        outcome.escaped = traceback.format_exc()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        os.environ.clear()  # tdist.init sets RANK, MASTER_PORT, ... for a one-process job
        os.environ.update(environ)
    outcome.stdout, outcome.stderr = out.getvalue(), err.getvalue()
    return outcome


@dataclass(frozen=True)
class Case:
    cli: str  # whose main runs it
    arg: str  # Argument.key
    names: tuple[str, ...]  # what the error line may call the argument
    what: str  # missing, directory, binary, ...
    argv: tuple[str, ...]  # with {path}, {good} (shared inputs) and {tmp} (this case's folder)
    make: Callable[[Path], Path] = field(compare=False)  # builds the hostile path in the case's folder

    @property
    def id(self) -> str:
        return f"{self.arg} [{self.what}]"
