"""`ops logs NAME [-f]`: worker 0's log, where rank 0 writes the metrics (a TrainJob's: its index-0 pod's,
with --env of a trainingApi v2 environment)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ops.arguments import RunsOptions

HELP = "worker 0's log (rank 0 logs the metrics)"


@dataclass(frozen=True, kw_only=True)
class Options(RunsOptions):
    name: str
    follow: bool = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name")
    parser.add_argument("-f", "--follow", action="store_true")
    RunsOptions.add_to(parser)


def run(options: Options) -> int:
    from ops import kube

    api = options.trainjobs()
    if api is not None:
        api.logs(options.name, options.namespace, options.follow, print)
        return 0
    kube.logs(options.training_client(), options.name, options.namespace, follow=options.follow)
    return 0
