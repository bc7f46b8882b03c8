"""`ops status [NAME]`: the phase of one training job, or of every one in the namespace."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ops.arguments import KubeOptions, OutputOptions
from ops.output import to_json

HELP = "phase of one job, or of all jobs in the namespace"


@dataclass(frozen=True, kw_only=True)
class Options(KubeOptions, OutputOptions):
    name: str | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?")
    OutputOptions.add_to(parser)
    KubeOptions.add_to(parser)


def run(options: Options) -> int:
    from ops import kube

    rows = kube.status(options.training_client(), options.name, options.namespace)
    print(to_json(rows) if options.json else kube.render_status(rows))
    return 0
