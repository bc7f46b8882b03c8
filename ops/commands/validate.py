"""`ops validate --dist dist/ENV`: the post-deploy GPU checks and NCCL tests through kubectl, as the
pipeline's runner runs them after each stage (ops/validate.py)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from ops.arguments import positive_seconds

HELP = "post-deploy GPU checks and NCCL tests through kubectl (the pipeline's runner)"


@dataclass(frozen=True, kw_only=True)
class Options:
    dist: Path
    timeout: float = 1800


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dist", type=Path, required=True, help="dist/<env> folder written by make synth")
    parser.add_argument("--timeout", type=positive_seconds, default=1800,
                        help="seconds each check may take (default 1800)")


def run(options: Options) -> int:
    from ops import validate

    return validate.run_checks(options.dist, options.timeout)
