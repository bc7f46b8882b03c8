"""`ops kubeconfig --env ENV`: the cluster's entry in a kubeconfig, written by the AWS CLI."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from config import paths
from ops.arguments import EnvOptions
from ops.errors import OpsError

HELP = "write the cluster's kubeconfig entry (aws eks update-kubeconfig)"


@dataclass(frozen=True, kw_only=True)
class Options(EnvOptions):
    cluster_name: str | None = None
    kubeconfig: str | None = None
    role_arn: str | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    EnvOptions.add_to(parser)
    parser.add_argument("--cluster-name", help="skip the lookup by CloudFormation stack tag")
    parser.add_argument("--kubeconfig", help="file to update (default: KUBECONFIG or ~/.kube/config)")
    parser.add_argument("--role-arn", help="role kubectl assumes (default: none if you are an admin principal, "
                                           "else the first of adminRoleArns)")


def run(options: Options) -> int:
    from ops import access, aws, kubeconfig

    env = options.environment()
    if options.kubeconfig:  # the AWS CLI updates it at the end: a file it cannot write or parse is found first
        try:
            paths.output_file(options.kubeconfig)
        except paths.PathProblem as problem:
            raise OpsError(f"--kubeconfig: {problem}") from None
        from ops.kube import check_kubeconfig

        check_kubeconfig(options.kubeconfig, allow_empty=True)
    clients = aws.clients(env.region)
    who = access.caller(clients)  # no credentials: one line before any other call
    cluster = kubeconfig.find_cluster(clients.eks, env, options.cluster_name)
    command = access.kubeconfig_command(env, who, role_arn=options.role_arn)
    command[command.index("--name") + 1] = cluster["name"]
    print(f"$ {' '.join(command)}")
    print(kubeconfig.update(command, options.kubeconfig))
    return 0
