"""`ops capacity-block schedule|scale-to-zero --env ENV`: capacity-block node groups up at the
block's start, or down to 0 before an update (ops/capacity_blocks.py). `schedule` also creates each
group's stop CronJob in the cluster, which suspends the group's runs with a checkpoint before EKS
scales the group to zero (k8s/pods/capacity_block_stop.py: PyTorchJobs, or under trainingApi v2
TrainJobs, through their Kueue Workloads where Kueue queues them); --no-stop leaves it out."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ops.arguments import ClusterOptions, EnvOptions
from ops.errors import EXIT_PROBLEM, OpsError

HELP = "bring capacity-block groups up at the block's start, or to 0 before an update"


@dataclass(frozen=True, kw_only=True)
class Options(EnvOptions, ClusterOptions):
    action: str
    group: str | None = None
    cluster_name: str | None = None
    if_any: bool = False
    no_stop: bool = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["schedule", "scale-to-zero"])
    EnvOptions.add_to(parser)
    ClusterOptions.add_to(parser)
    parser.add_argument("--group", help="one capacity-block group (required for scale-to-zero)")
    parser.add_argument("--cluster-name", help="skip the lookup by CloudFormation stack tag")
    parser.add_argument("--if-any", action="store_true",
                        help="do nothing when the environment has no capacity-block groups (make deploy uses it)")
    parser.add_argument("--no-stop", action="store_true",
                        help="schedule the scale-up only, without the stop CronJob: runs on the group are then cut "
                             "when EKS scales it to zero and resume from their last periodic checkpoint")


def run(options: Options) -> int:
    from ops import aws, capacity_blocks

    stops = options.action == "schedule" and not options.no_stop
    # A kubeconfig named on the command line is checked first, like every path argument; without
    # one, the cluster is reached only when there is a block to schedule (make deploy's --if-any).
    kube_client = options.api_client() if stops and options.kubeconfig else None
    env = options.environment()
    if options.action == "scale-to-zero" and not options.group:
        raise OpsError("scale-to-zero needs --group: the capacity-block group to take to 0")
    if options.if_any and not options.group and not any(g.capacity.type == "capacityBlock"
                                                        for g in env.gpu_nodegroups):
        return 0
    capacity_blocks.block_groups(env, options.group)  # a bad group is one line before any AWS call
    clients = aws.clients(env.region)
    aws.caller_account(clients.sts)
    if options.action == "scale-to-zero":
        print(capacity_blocks.scale_to_zero(env, clients, group=options.group, cluster_name=options.cluster_name))
        return 0
    # The cluster is reached before anything is scheduled: a missing kubeconfig is one line, and no
    # scale-up is left without the stop that ends its runs cleanly.
    if stops and kube_client is None:
        kube_client = options.api_client()
    if kube_client is not None:
        capacity_blocks.kubectl_image(kube_client)  # the deployed operator names it; else "deploy first"
    results = capacity_blocks.schedule(env, clients, group=options.group, cluster_name=options.cluster_name,
                                       kube_client=kube_client)
    for result in results:
        print(f"{result.group}: {result.message}")
    return 0 if all(r.ok for r in results) else EXIT_PROBLEM
