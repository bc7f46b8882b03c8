"""`ops stop RUN|PRESET`: suspend a run, or every active run of a preset (ops/runs.py); with --env of a
trainingApi v2 environment, TrainJobs (under Kueue: their Workloads deactivated)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ops.arguments import RunsOptions

HELP = "suspend a run, or every active run of a preset: its pods stop, the run stays"


@dataclass(frozen=True, kw_only=True)
class Options(RunsOptions):
    target: str


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="RUN|PRESET", help="a PyTorchJob's or TrainJob's name, or a preset")
    RunsOptions.add_to(parser)


def run(options: Options) -> int:
    from ops import runs

    api = options.trainjobs() or options.training_client()
    for line in runs.stop(api, options.target, options.namespace):
        print(line)
    return 0
