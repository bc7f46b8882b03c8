"""`ops status [NAME]`: the phase of one training job, or of every one in the namespace; with --env of a
trainingApi v2 environment, TrainJobs with their restarts and, under Kueue, their queue position."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ops.arguments import OutputOptions, RunsOptions
from ops.errors import OpsError
from ops.output import to_json

HELP = "phase of one job, or of all jobs in the namespace"


@dataclass(frozen=True, kw_only=True)
class Options(RunsOptions, OutputOptions):
    name: str | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?")
    OutputOptions.add_to(parser)
    RunsOptions.add_to(parser)


def run(options: Options) -> int:
    from ops import kube, trainjobs

    api = options.trainjobs()
    if api is not None:
        found, problem = api.status(options.namespace, options.name)
        print(to_json(found) if options.json else trainjobs.render_status(found))
        if problem:  # the table is printed; the missing queue positions are the error
            raise OpsError(problem)
        return 0
    rows = kube.status(options.training_client(), options.name, options.namespace)
    print(to_json(rows) if options.json else kube.render_status(rows))
    return 0
