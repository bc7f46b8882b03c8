"""`ops preflight --env ENV`: the account's readiness for a deploy, as a pass/warn/fail table.
--kubeconfig/--context reach a live cluster, to refuse a trainingApi switch that would delete its runs;
--abandon-file-system lets the deploy replace the named FSx file system (ops/redeploy.py);
--assume-role reads the account as another role; --pipeline is the pipeline's pre-deploy step
(stacks/pipeline.py), which runs it as the environment's CDK bootstrap lookup role."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ops.arguments import ClusterOptions, EnvOptions, OutputOptions, file_system_id, role_arn
from ops.errors import OpsError

HELP = "check the account before a deploy"
SESSION_NAME = "ops-preflight"
SESSION_S = 900  # AssumeRole's shortest session; preflight takes seconds


@dataclass(frozen=True, kw_only=True)
class Options(EnvOptions, ClusterOptions, OutputOptions):
    abandon_file_system: str | None = None
    assume_role: str | None = None
    pipeline: bool = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    EnvOptions.add_to(parser)
    ClusterOptions.add_to(parser)
    OutputOptions.add_to(parser)
    parser.add_argument("--abandon-file-system", type=file_system_id, metavar="FS_ID",
                        help="let this deploy replace the deployed FSx file system FS_ID with a new, empty one "
                             "(it is kept outside the stack); `make deploy ABANDON_FSX=FS_ID`")
    parser.add_argument("--assume-role", type=role_arn, metavar="ROLE_ARN",
                        help="read the account as this role, assumed with the current credentials")
    parser.add_argument("--pipeline", action="store_true",
                        help="the pipeline's pre-deploy step: skip the rows about this machine and the cluster's "
                             "API (each shown with why), and fail a file system replacement, which only "
                             "`make deploy ... ABANDON_FSX=FS_ID` can acknowledge")


def run(options: Options) -> int:
    from ops import aws, checks, preflight

    env = options.environment()
    if options.pipeline:
        _check_pipeline_flags(options, env.name)
    session = None
    if options.assume_role:
        sts = aws.session(env.region).client("sts", config=aws.CLIENT_CONFIG)
        try:
            credentials = aws.assumed_credentials(sts, options.assume_role, SESSION_NAME, SESSION_S)
        except OpsError as err:
            raise OpsError(f"--assume-role {options.assume_role}: {err}") from None
        session = aws.credentials_session(credentials, env.region)
    clients = aws.clients(env.region, session)
    if options.pipeline:
        rows = preflight.run_for_pipeline(env, clients)
    else:
        connect = options.api_client
        if options.kubeconfig or options.context:
            # Named on the command line: one that cannot be used is a usage error now, not a warning row
            # after a minute of AWS calls. The default kubeconfig may well be absent before a first deploy.
            client = options.api_client()
            connect = lambda: client  # noqa: E731
        rows = preflight.run_for_deploy(env, clients, connect=connect,
                                        abandon_file_system=options.abandon_file_system)
    return checks.report(rows, as_json=options.json,
                         about={"environment": env.name, "account": env.account, "region": env.region},
                         title=f"preflight {env.name}{' (pipeline)' if options.pipeline else ''}: account "
                               f"{env.account}, {env.region}, training AZ {env.training_availability_zone}")


def _check_pipeline_flags(options: Options, env_name: str) -> None:
    """The flags --pipeline has no use for are refused, not ignored."""
    for flag, given in (("--kubeconfig", options.kubeconfig), ("--context", options.context)):
        if given:
            raise OpsError(f"{flag} does not apply with --pipeline: the pipeline's step reaches no cluster")
    if options.abandon_file_system:
        raise OpsError(f"--abandon-file-system does not apply with --pipeline: the pipeline acknowledges no file "
                       f"system replacement; deploy it by hand with `make deploy ENV={env_name} FORCE=1 "
                       f"ABANDON_FSX={options.abandon_file_system}`")
