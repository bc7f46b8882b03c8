"""The one error type the ops CLI raises for a problem the user can fix, and the report of one it cannot."""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

EXIT_PROBLEM = 1  # the command ran and a check failed, or a crash (ops/cli.py's docstring)


class OpsError(Exception):
    """A bad argument or an unmet precondition; the CLI prints it as one line and exits 2."""


def report_crash(command: str, argv: list[str], err: BaseException) -> Path | None:
    """An unexpected exception (a bug in ops): its full trace goes to a file only this user can
    read, and one line on stderr names the command and the file. A terminal full of traceback
    would bury that line; a trace that cannot be written is printed after it instead."""
    trace = "".join(traceback.format_exception(err))
    try:  # mkstemp: a new file, mode 0600, never another crash's
        fd, name = tempfile.mkstemp(prefix=f"ops-crash-{time.strftime('%Y%m%d-%H%M%S')}-", suffix=".txt")
        with os.fdopen(fd, "w") as f:
            f.write(f"python -m ops {' '.join(argv)}\n\n{trace}")
        path: Path | None = Path(name)
    except OSError:
        path = None
    what = " ".join(f"{type(err).__name__}: {err}".split())[:300]
    where = f"the full trace is in {path}" if path else "its trace follows"
    print(f"error: `ops {command}` failed unexpectedly ({what}); this is a bug in ops, {where}", file=sys.stderr)
    if path is None:
        print(trace, file=sys.stderr, end="")
    return path
