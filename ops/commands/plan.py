"""`ops plan --env ENV`: the scale plan on paper (ops/plan.py); exit 1 when something is over."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from config.presets import PRESETS
from ops.arguments import EnvOptions, OutputOptions, positive_int
from ops.errors import EXIT_PROBLEM
from ops.output import to_json

HELP = "scale plan on paper: addresses, checkpoint time, cost, limits (exit 1 if OVER)"


@dataclass(frozen=True, kw_only=True)
class Options(EnvOptions, OutputOptions):
    nodes: int | None = None
    preset: str | None = None
    vcpu_quota: int | None = None


# Each node takes at least one address of the VPC, which AWS caps at a /16: a count past that cannot
# fit any subnet, and one of a few hundred digits overflowed the plan's float arithmetic.
MAX_NODES = 2 ** 16


def node_count(text: str) -> int:
    value = positive_int(text)
    if value > MAX_NODES:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_NODES} (a /16 VPC's addresses), got {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    EnvOptions.add_to(parser)
    parser.add_argument("--nodes", type=node_count, help="node count to plan for (default: maxSize)")
    parser.add_argument("--preset", choices=PRESETS, metavar="PRESET",
                        help="job preset (default: the first preset on a GPU group)")
    parser.add_argument("--vcpu-quota", type=positive_int, help="On-Demand vCPU quota to plan against")
    OutputOptions.add_to(parser)


def run(options: Options) -> int:
    from ops import plan

    result = plan.build(options.environment(), options.preset, options.nodes, options.vcpu_quota)
    print(to_json(plan.as_data(result)) if options.json else plan.render(result))
    return EXIT_PROBLEM if result.exceeded else 0
