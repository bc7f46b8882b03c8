"""`ops capacity-block`: operate node groups that run on EC2 Capacity Blocks for ML.

"Create a managed node group with Capacity Blocks for ML", Amazon EKS User Guide
(https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html):
- a block launches no instance before it starts; a group created at desired size 0 is scaled up
  "with a scheduled scaling policy for the ASG that aligns to the Capacity Block reservation start
  time" or with `eks update-nodegroup-config`;
- "When upgrading managed node groups with Capacity Blocks, make sure that the desired size of the
  node group is set to 0";
- EKS itself schedules "Amazon EKS Node Group Capacity Scaledown Before Reservation End" forty
  minutes before the block ends (EC2 starts shutting instances down thirty minutes before).

`schedule` does the first for every capacity-block group (or one), `scale-to-zero` the second.
The template keeps such groups at 0 (config/nodegroup_parser.py), so a deploy never fights either.
Given a Kubernetes client, `schedule` also creates each group's stop CronJob, which suspends the
group's runs with a checkpoint before EKS drains it (k8s/pods/capacity_block_stop.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from config import Environment, Nodegroup
from config.kubernetes import KUBEFLOW_NAMESPACE, NODEGROUP_LABEL, TRAINING_NAMESPACE, TRAINING_OPERATOR
from ops.errors import OpsError
from ops.kube import api_error_line
from ops.kubeconfig import find_cluster

ACTION_PREFIX = "eks-distributed-training"
EKS_SCALEDOWN_BEFORE_END = timedelta(minutes=40)


@dataclass(frozen=True)
class Result:
    group: str
    ok: bool
    message: str


def block_groups(env: Environment, group: str | None = None) -> list[Nodegroup]:
    """The environment's capacity-block groups, or the one named; OpsError before any AWS call."""
    blocks = [g for g in env.gpu_nodegroups if g.capacity.type == "capacityBlock"]
    if group is None:
        if not blocks:
            raise OpsError(f"environments.{env.name} has no gpuNodegroups with capacity type capacityBlock; "
                           "nothing to schedule")
        return blocks
    names = [g.name for g in env.training_nodegroups]
    if group not in names:
        raise OpsError(f"environments.{env.name} has no node group {group!r}; it has {', '.join(names)}")
    chosen = [g for g in blocks if g.name == group]
    if not chosen:
        raise OpsError(f"{group} is not a capacityBlock group in environments.{env.name}")
    return chosen


def utc(when: datetime) -> str:
    return f"{when.astimezone(timezone.utc):%Y-%m-%d %H:%M} UTC"


def describe_block(reservations: Any, reservation_id: str) -> dict:
    items = reservations.describe_capacity_reservations(CapacityReservationIds=[reservation_id]).get(
        "CapacityReservations", [])
    if not items:
        raise OpsError(f"capacity reservation {reservation_id} does not exist for this account and region")
    block = items[0]
    if not block.get("StartDate") or not block.get("EndDate"):
        raise OpsError(f"{reservation_id} has no start and end date; is it a capacity block?")
    return block


def schedule(env: Environment, aws: Any, *, group: str | None = None, cluster_name: str | None = None,
             now: datetime | None = None, kube_client: Any = None) -> list[Result]:
    """Bring each group's nodes up when its block starts: a scheduled action on the group's Auto
    Scaling group for a block that has not started, the node group's desired size now for one that
    has. The size is the group's maxSize, capped at what the block holds. With `kube_client`, also
    create (or replace) the group's stop CronJob for the block's end."""
    groups = block_groups(env, group)
    now = now or datetime.now(timezone.utc)
    cluster = find_cluster(aws.eks, env, cluster_name)["name"]
    results = []
    for g in groups:
        block = describe_block(aws.reservations, g.capacity.reservation_id)
        start, end = block["StartDate"], block["EndDate"]
        window = f"{g.capacity.reservation_id} starts {utc(start)}, ends {utc(end)}"
        if end <= now:
            results.append(Result(g.name, False, f"{g.capacity.reservation_id} ended {utc(end)}; nothing scheduled "
                                                 "(put a new block's id in capacity.reservationId and deploy)"))
            continue
        nodegroup = nodegroup_of(aws.eks, cluster, g.name)
        size = min(g.max_size, block.get("TotalInstanceCount", g.max_size))
        if start > now:
            [asg] = [a["name"] for a in nodegroup["resources"]["autoScalingGroups"]]
            aws.autoscaling.put_scheduled_update_group_action(
                AutoScalingGroupName=asg, ScheduledActionName=f"{ACTION_PREFIX}-{g.name}-block-start",
                StartTime=start, DesiredCapacity=size)
            message = f"{window}: {asg} scales to {size} at the start"
        else:
            _set_desired(aws.eks, cluster, nodegroup, size)
            message = f"{window}: active, desired size {size} now"
        scaledown = utc(end - EKS_SCALEDOWN_BEFORE_END)
        if kube_client is not None:
            stop = put_stop_cronjob(env, kube_client, g, end=end, now=now)
            message += f"; its runs are suspended with a checkpoint at {stop}"
        results.append(Result(g.name, True, f"{message}; EKS scales it to 0 at {scaledown}"))
    return results


KUBECTL_IMAGE_ARG = "--mpi-kubectl-delivery-image="


def kubectl_image(kube_client: Any) -> str:
    """The environment's kubectl-delivery image, as the deployed Training Operator names it."""
    from kubernetes.client import AppsV1Api
    from kubernetes.client.exceptions import ApiException

    try:
        operator = AppsV1Api(kube_client).read_namespaced_deployment(TRAINING_OPERATOR, KUBEFLOW_NAMESPACE)
    except ApiException as err:
        raise OpsError(f"cannot read deployment {KUBEFLOW_NAMESPACE}/{TRAINING_OPERATOR} for the kubectl image "
                       f"({api_error_line(err)}); deploy first") from None
    for arg in operator.spec.template.spec.containers[0].args or []:
        if arg.startswith(KUBECTL_IMAGE_ARG):
            return arg[len(KUBECTL_IMAGE_ARG):]
    raise OpsError(f"deployment {KUBEFLOW_NAMESPACE}/{TRAINING_OPERATOR} names no {KUBECTL_IMAGE_ARG[:-1]}")


def put_stop_cronjob(env: Environment, kube_client: Any, group: Nodegroup, *, end: datetime, now: datetime) -> str:
    """Create or replace `group`'s stop CronJob; returns when it stops the runs, as text."""
    from kubernetes.client import BatchV1Api
    from kubernetes.client.exceptions import ApiException

    # Here, not at the top: k8s.pods validates with kubernetes-validate, and preflight imports this
    # module for its dates in the pipeline's preflight step, which installs only boto3 and jsonschema.
    from k8s.pods.capacity_block_stop import stop_cronjob

    body = stop_cronjob(env, group.name, reservation_id=group.capacity.reservation_id, end=end,
                        image=kubectl_image(kube_client), now=now)
    batch, name = BatchV1Api(kube_client), body["metadata"]["name"]
    try:
        batch.delete_namespaced_cron_job(name, TRAINING_NAMESPACE)
    except ApiException as err:
        if err.status != 404:
            raise OpsError(f"cannot replace cronjob {TRAINING_NAMESPACE}/{name}: {api_error_line(err)}") from None
    batch.create_namespaced_cron_job(TRAINING_NAMESPACE, body)
    return body["metadata"]["annotations"]["eks-distributed-training.io/stop-at"].replace("T", " ").replace("Z", " UTC")


def scale_to_zero(env: Environment, aws: Any, *, group: str, cluster_name: str | None = None) -> str:
    """Desired size 0, which EKS requires before it updates a capacity-block group."""
    [g] = block_groups(env, group)
    cluster = find_cluster(aws.eks, env, cluster_name)["name"]
    nodegroup = nodegroup_of(aws.eks, cluster, g.name)
    _set_desired(aws.eks, cluster, nodegroup, 0)
    return (f"{g.name} ({nodegroup['nodegroupName']}): desired size 0; its nodes drain and terminate. Deploy once "
            f"`aws eks describe-nodegroup --cluster-name {cluster} --nodegroup-name {nodegroup['nodegroupName']}` "
            "shows no nodes, then run `ops capacity-block schedule` again to bring them back")


def nodegroup_of(eks: Any, cluster: str, group: str) -> dict:
    """The managed node group CloudFormation created for config group `group`: the one carrying
    its NODEGROUP_LABEL (CloudFormation generates the node group's name)."""
    names = [n for page in eks.get_paginator("list_nodegroups").paginate(clusterName=cluster)
             for n in page["nodegroups"]]
    for name in names:
        nodegroup = eks.describe_nodegroup(clusterName=cluster, nodegroupName=name)["nodegroup"]
        if (nodegroup.get("labels") or {}).get(NODEGROUP_LABEL) == group:
            return nodegroup
    raise OpsError(f"no node group labelled {NODEGROUP_LABEL}={group} in cluster {cluster}; deploy first")


def _set_desired(eks: Any, cluster: str, nodegroup: dict, desired: int) -> None:
    scaling = nodegroup["scalingConfig"]
    eks.update_nodegroup_config(clusterName=cluster, nodegroupName=nodegroup["nodegroupName"], scalingConfig={
        "minSize": min(scaling["minSize"], desired), "maxSize": scaling["maxSize"], "desiredSize": desired})
