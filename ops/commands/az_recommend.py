"""`ops az-recommend`: the availability zones, by name and ID, that offer an instance type."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ops.arguments import OutputOptions
from ops.output import to_json

HELP = "AZs (names and IDs) offering an instance type"


@dataclass(frozen=True, kw_only=True)
class Options(OutputOptions):
    instance_type: str
    region: str


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--instance-type", required=True)
    parser.add_argument("--region", required=True)
    OutputOptions.add_to(parser)


def run(options: Options) -> int:
    from ops import aws, az

    aws.check_region(options.region)
    clients = aws.clients(options.region)
    aws.caller_account(clients.sts)  # no credentials: one clear line before any other call
    recommendation = az.recommend(clients, options.instance_type, options.region)
    print(to_json(recommendation) if options.json else az.render(recommendation))
    return 0
