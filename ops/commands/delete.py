"""`ops delete NAME`: delete a training job."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ops.arguments import KubeOptions

HELP = "delete a job"


@dataclass(frozen=True, kw_only=True)
class Options(KubeOptions):
    name: str


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name")
    KubeOptions.add_to(parser)


def run(options: Options) -> int:
    from ops import kube

    kube.delete(options.training_client(), options.name, options.namespace)
    print(f"deleted PyTorchJob {options.namespace}/{options.name}")
    return 0
