"""`ops preflight --env ENV`: the account's readiness for a deploy, as a pass/warn/fail table."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ops.arguments import EnvOptions, OutputOptions

HELP = "check the account before a deploy"


@dataclass(frozen=True, kw_only=True)
class Options(EnvOptions, OutputOptions):
    pass


def add_arguments(parser: argparse.ArgumentParser) -> None:
    EnvOptions.add_to(parser)
    OutputOptions.add_to(parser)


def run(options: Options) -> int:
    from ops import aws, checks, preflight

    env = options.environment()
    rows = preflight.run_for_deploy(env, aws.clients(env.region))
    return checks.report(rows, as_json=options.json,
                         about={"environment": env.name, "account": env.account, "region": env.region},
                         title=f"preflight {env.name}: account {env.account}, {env.region}, "
                               f"training AZ {env.training_availability_zone}")
