"""kubeconfig: find the environment's cluster, then run the `aws eks update-kubeconfig` command
the cluster stack prints (output KubeconfigCommand) for this caller.

Finding the cluster: `--cluster-name` wins. Otherwise the name stacks/cluster.py gives it
(`Environment.cluster_name`). Clusters created before the stack named them have a generated
name; for those the lookup falls back to the tag CloudFormation puts on every cluster it creates,
`aws:cloudformation:stack-name`: the stage names its cluster stack `<env>-Cluster` (stage id =
environment name, stack id "Cluster"; under the pipeline the stage's stacks carry a further
prefix), and the environment's cluster is the one so tagged.
"""

from __future__ import annotations

import subprocess
from typing import Any

from config import Environment
from config.outputs import CLUSTER_STACK_ID, stack_name
from ops import proc
from ops.errors import OpsError
from ops.machine import AWS_CLI_INSTALL

STACK_NAME_TAG = "aws:cloudformation:stack-name"
UPDATE_TIMEOUT_S = 60


class NoCluster(OpsError):
    """No EKS cluster of that name, or none of the environment: preflight's rows read it as
    "not deployed yet", any other OpsError of find_cluster as a lookup that failed."""


def find_cluster(eks: Any, env: Environment, cluster_name: str | None = None) -> dict:
    if cluster_name:
        try:
            return eks.describe_cluster(name=cluster_name)["cluster"]
        except eks.exceptions.ResourceNotFoundException:
            raise NoCluster(f"no EKS cluster named {cluster_name!r} in {env.region}") from None
    try:
        return eks.describe_cluster(name=env.cluster_name)["cluster"]
    except eks.exceptions.ResourceNotFoundException:
        pass
    stack = stack_name(env.name, CLUSTER_STACK_ID)
    names = [n for page in eks.get_paginator("list_clusters").paginate() for n in page["clusters"]]
    matches = []
    for name in names:
        cluster = eks.describe_cluster(name=name)["cluster"]
        tagged = (cluster.get("tags") or {}).get(STACK_NAME_TAG, "")
        if tagged == stack or tagged.endswith(f"-{stack}"):
            matches.append(cluster)
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise NoCluster(f"no EKS cluster of environment {env.name} in {env.region} (none named {env.cluster_name} "
                       f"or tagged {STACK_NAME_TAG}={stack}); deploy first or pass --cluster-name")
    found = ", ".join(c["name"] for c in matches)
    raise OpsError(f"several clusters belong to environment {env.name} ({found}); pass --cluster-name")


def update(command: list[str], kubeconfig: str | None = None) -> str:
    """Run `aws eks update-kubeconfig ...` (the AWS CLI writes the entry, and kubectl calls the same
    CLI for each token, so the CLI must be there anyway); its one-line report, or OpsError."""
    argv = command + (["--kubeconfig", kubeconfig] if kubeconfig else [])
    try:
        done = proc.run(argv, timeout=UPDATE_TIMEOUT_S)
    except FileNotFoundError:
        raise OpsError(f"the AWS CLI (aws) is not on PATH; install AWS CLI v2 ({AWS_CLI_INSTALL}), then run "
                       f"`{' '.join(command)}`") from None
    except subprocess.TimeoutExpired:
        raise OpsError(f"`{' '.join(argv)}` did not finish in {UPDATE_TIMEOUT_S} s") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise OpsError(f"`{' '.join(argv)}` failed: {lines[-1].strip() if lines else f'exit {done.returncode}'}")
    return " ".join(done.stdout.split())
