"""`ops stop RUN|PRESET`: suspend a run, or every active run of a preset (ops/runs.py)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ops.arguments import KubeOptions

HELP = "suspend a run, or every active run of a preset: its pods stop, the run stays"


@dataclass(frozen=True, kw_only=True)
class Options(KubeOptions):
    target: str


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="RUN|PRESET", help="a PyTorchJob's name, or a preset")
    KubeOptions.add_to(parser)


def run(options: Options) -> int:
    from ops import runs

    for line in runs.stop(options.training_client(), options.target, options.namespace):
        print(line)
    return 0
