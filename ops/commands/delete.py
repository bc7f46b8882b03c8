"""`ops delete NAME`: delete a training job (with --env of a trainingApi v2 environment, a TrainJob with its
TrainingRuntime and peers NetworkPolicy)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ops.arguments import RunsOptions

HELP = "delete a job"


@dataclass(frozen=True, kw_only=True)
class Options(RunsOptions):
    name: str


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name")
    RunsOptions.add_to(parser)


def run(options: Options) -> int:
    from ops import kube

    api = options.trainjobs()
    if api is not None:
        print(api.delete(options.name, options.namespace))
        return 0
    kube.delete(options.training_client(), options.name, options.namespace)
    print(f"deleted PyTorchJob {options.namespace}/{options.name}")
    return 0
