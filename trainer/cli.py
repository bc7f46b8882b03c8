"""Argument parsing shared by the workloads: one-line errors that name the field, no tracebacks.

A pod log that ends in a 40-line traceback for a typo in `--steps` hides the one fact a person
needs; here every user error is a single `error: --field: what is wrong` line and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn


class UsageError(Exception):
    """A bad argument or input file, found after parsing (a missing shard, a foreign tokenizer)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")


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


def run_main(main: Callable[[], int | None]) -> NoReturn:
    """Run a workload's main, turning UsageError into the one-line form, and NCCL off EFA on an
    EFA node group (trainer/nccl_net.py) and a run that stopped on non-finite losses
    (trainer/batching.py) into their own exit statuses."""
    from trainer.batching import NonFiniteLoss
    from trainer.nccl_net import EXIT_NOT_ON_EFA, NotOnEfa

    try:
        code = main()
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except NotOnEfa as exc:
        print(exc, file=sys.stderr, flush=True)
        raise SystemExit(EXIT_NOT_ON_EFA) from None
    except NonFiniteLoss as exc:
        print(exc, file=sys.stderr, flush=True)
        raise SystemExit(exc.exit_code) from None
    raise SystemExit(code or 0)
