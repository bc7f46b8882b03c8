"""kubeconfig: what `aws eks update-kubeconfig` does, from describe_cluster through boto3.

Finding the cluster: `--cluster-name` wins. Otherwise the name stacks/cluster.py gives it
(`Environment.cluster_name`). Clusters created before the stack named them have a generated
name; for those the lookup falls back to the tag CloudFormation puts on every cluster it creates,
`aws:cloudformation:stack-name`: the stage names its cluster stack `<env>-Cluster` (stage id =
environment name, stack id "Cluster"; under the pipeline the stage's stacks carry a further
prefix), and the environment's cluster is the one so tagged.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from config import Environment
from ops.errors import OpsError

STACK_NAME_TAG = "aws:cloudformation:stack-name"
CLUSTER_STACK_ID = "Cluster"  # TrainingClusterStage's id for ClusterStack
EXEC_API_VERSION = "client.authentication.k8s.io/v1beta1"


def find_cluster(eks: Any, env: Environment, cluster_name: str | None = None) -> dict:
    if cluster_name:
        try:
            return eks.describe_cluster(name=cluster_name)["cluster"]
        except eks.exceptions.ResourceNotFoundException:
            raise OpsError(f"no EKS cluster named {cluster_name!r} in {env.region}") from None
    try:
        return eks.describe_cluster(name=env.cluster_name)["cluster"]
    except eks.exceptions.ResourceNotFoundException:
        pass
    stack = f"{env.name}-{CLUSTER_STACK_ID}"
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
        raise OpsError(f"no EKS cluster of environment {env.name} in {env.region} (none named {env.cluster_name} "
                       f"or tagged {STACK_NAME_TAG}={stack}); deploy first or pass --cluster-name")
    found = ", ".join(c["name"] for c in matches)
    raise OpsError(f"several clusters belong to environment {env.name} ({found}); pass --cluster-name")


def default_path() -> Path:
    # kubectl reads the first file of KUBECONFIG when it writes; so do we.
    env_value = os.environ.get("KUBECONFIG", "")
    first = next((p for p in env_value.split(os.pathsep) if p), None)
    return Path(first) if first else Path.home() / ".kube" / "config"


def entry(cluster: dict, region: str) -> tuple[dict, dict, dict]:
    """The cluster, user and context entries, named by the cluster ARN as the AWS CLI names them."""
    if not cluster.get("endpoint") or not (cluster.get("certificateAuthority") or {}).get("data"):
        raise OpsError(f"cluster {cluster['name']} has no endpoint yet (status {cluster.get('status')}); "
                       "wait until it is ACTIVE")
    arn = cluster["arn"]
    cluster_entry = {"name": arn, "cluster": {"server": cluster["endpoint"],
                                              "certificate-authority-data": cluster["certificateAuthority"]["data"]}}
    # Tokens are short-lived, so the entry runs the AWS CLI for a fresh one on each kubectl call.
    user_entry = {"name": arn, "user": {"exec": {
        "apiVersion": EXEC_API_VERSION, "command": "aws",
        "args": ["--region", region, "eks", "get-token", "--cluster-name", cluster["name"], "--output", "json"],
        "interactiveMode": "IfAvailable"}}}
    context_entry = {"name": arn, "context": {"cluster": arn, "user": arn}}
    return cluster_entry, user_entry, context_entry


def merge(existing: dict | None, cluster: dict, region: str) -> dict:
    """Existing kubeconfig with this cluster's entries replaced or added, and made current."""
    doc = dict(existing or {})
    doc.setdefault("apiVersion", "v1")
    doc.setdefault("kind", "Config")
    doc.setdefault("preferences", {})
    for key, new in zip(("clusters", "users", "contexts"), entry(cluster, region)):
        items = [item for item in (doc.get(key) or []) if item.get("name") != new["name"]]
        doc[key] = items + [new]
    doc["current-context"] = cluster["arn"]
    return doc


def write(path: Path, cluster: dict, region: str) -> str:
    try:
        existing = yaml.safe_load(path.read_text()) if path.exists() else None
    except yaml.YAMLError as err:
        raise OpsError(f"{path} is not valid YAML: {str(err).splitlines()[0]}") from None
    if existing is not None and not isinstance(existing, dict):
        raise OpsError(f"{path} is not a kubeconfig (not a mapping)")
    doc = merge(existing, cluster, region)
    path.parent.mkdir(parents=True, exist_ok=True)
    # The file holds cluster endpoints; keep it private as kubectl does.
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)
    return doc["current-context"]
