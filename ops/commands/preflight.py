"""`ops preflight --env ENV`: the account's readiness for a deploy, as a pass/warn/fail table.
--kubeconfig/--context reach a live cluster, to refuse a trainingApi switch that would delete its runs;
--abandon-file-system lets the deploy replace the named FSx file system (ops/redeploy.py)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ops.arguments import ClusterOptions, EnvOptions, OutputOptions, file_system_id

HELP = "check the account before a deploy"


@dataclass(frozen=True, kw_only=True)
class Options(EnvOptions, ClusterOptions, OutputOptions):
    abandon_file_system: str | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    EnvOptions.add_to(parser)
    ClusterOptions.add_to(parser)
    OutputOptions.add_to(parser)
    parser.add_argument("--abandon-file-system", type=file_system_id, metavar="FS_ID",
                        help="let this deploy replace the deployed FSx file system FS_ID with a new, empty one "
                             "(it is kept outside the stack); `make deploy ABANDON_FSX=FS_ID`")


def run(options: Options) -> int:
    from ops import aws, checks, preflight

    env = options.environment()
    connect = options.api_client
    if options.kubeconfig or options.context:
        # Named on the command line: one that cannot be used is a usage error now, not a warning row
        # after a minute of AWS calls. The default kubeconfig may well be absent before a first deploy.
        client = options.api_client()
        connect = lambda: client  # noqa: E731
    rows = preflight.run_for_deploy(env, aws.clients(env.region), connect=connect,
                                    abandon_file_system=options.abandon_file_system)
    return checks.report(rows, as_json=options.json,
                         about={"environment": env.name, "account": env.account, "region": env.region},
                         title=f"preflight {env.name}: account {env.account}, {env.region}, "
                               f"training AZ {env.training_availability_zone}")
