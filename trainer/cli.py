"""Argument parsing shared by the workloads: one-line errors that name the field, no tracebacks.

A pod log that ends in a 40-line traceback for a typo in `--steps` hides the one fact a person
needs; here every user error is a single `error: --field: what is wrong` line and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import NoReturn


class UsageError(Exception):
    """A bad argument or input file, found after parsing (a missing shard, a foreign tokenizer)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")


class WorkerExit(Exception):
    """A failure that is not the user's typo but still deserves one line and its own exit status
    (config/kubernetes.py), not a traceback: e.g. checkpoints that exist and do not load."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


class Parser(argparse.ArgumentParser):
    def __init__(self, **kwargs):
        kwargs.setdefault("formatter_class", argparse.ArgumentDefaultsHelpFormatter)
        super().__init__(**kwargs)

    def error(self, message: str) -> NoReturn:  # argparse's own errors, e.g. an invalid int
        print(f"error: {message.replace('argument ', '')}", file=sys.stderr)
        raise SystemExit(2)


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be zero or more, got {text}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def run_main(main: Callable[[], int | None], *, finalize: bool = True) -> NoReturn:
    """Run a workload's main, turning UsageError into the one-line form, NCCL off EFA on an EFA
    node group (trainer/nccl_net.py) and a WorkerExit into their own exit statuses. With
    finalize=False (distributed workers) the process then ends without interpreter finalization
    (trainer.dist.exit_without_finalization says why)."""
    code = _run(main)
    if not finalize:
        from trainer.dist import exit_without_finalization
        exit_without_finalization(code)
    raise SystemExit(code)


def _run(main: Callable[[], int | None]) -> int:
    from config.kubernetes import EXIT_NOT_ON_EFA, EXIT_USAGE
    from trainer.nccl_net import NotOnEfa

    try:
        code = main()
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except NotOnEfa as exc:
        print(exc, file=sys.stderr, flush=True)
        return EXIT_NOT_ON_EFA
    except WorkerExit as exc:
        # Every rank raises it (they agree before they stop); one line per pod's log is enough.
        if os.environ.get("LOCAL_RANK", "0") == "0":
            print(f"error: {exc}", file=sys.stderr, flush=True)
        return exc.code
    return code or 0
