"""Kueue's queue objects for `"queueing": "kueue"` (kueue.x-k8s.io/v1beta2, Kueue v0.19.2): one
ResourceFlavor per training node group (its nodes' label and taint, from the same config the node
groups are built from), one ClusterQueue whose quota per flavor is what the group's nodes hold at
maxSize, in the resources a run's pod requests, and the LocalQueue `default` in the training
namespace. Kueue also gives a job created there without a queue label `kueue.x-k8s.io/queue-name:
default` (jobframework/defaults.go), so nothing bypasses the queue.

The quota is a ceiling, not a promise of nodes: a group at 0 nodes admits a run, which then waits
for nodes; waitForPodsReady evicts and requeues it if its pods are not all Ready in time.
"""

from __future__ import annotations

from config.environment import Environment, Nodegroup
from config.kubernetes import (
    EFA_POD_HUGEPAGES_MIB, EFA_RESOURCE, GPU_RESOURCE, GPU_TAINT_EFFECT, GPU_TAINT_KEY, GPU_TAINT_VALUE,
    HUGEPAGES_RESOURCE, NODEGROUP_LABEL, TRAINING_NAMESPACE,
)
from k8s.pods.resources import node_share

API_VERSION = "kueue.x-k8s.io/v1beta2"
CLUSTER_QUEUE = "training"
LOCAL_QUEUE = "default"  # Kueue's DefaultLocalQueueName
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
# The order of every flavor's resources: Kueue validates that it follows coveredResources.
COVERED = ("cpu", "memory", GPU_RESOURCE, EFA_RESOURCE, HUGEPAGES_RESOURCE)


def queue_labels(config: Environment) -> dict[str, str]:
    """The labels that put a run in the LocalQueue: on every TrainJob and PyTorchJob of a queued
    environment, none elsewhere (so an unqueued environment renders its runs unchanged)."""
    return {QUEUE_NAME_LABEL: LOCAL_QUEUE} if config.queueing == "kueue" else {}


def resource_flavor(group: Nodegroup) -> dict:
    spec: dict = {"nodeLabels": {NODEGROUP_LABEL: group.name}}
    if group.instance_type.is_gpu:
        spec["nodeTaints"] = [{"key": GPU_TAINT_KEY, "value": GPU_TAINT_VALUE, "effect": GPU_TAINT_EFFECT}]
    return {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": group.name}, "spec": spec}


def group_quota(group: Nodegroup) -> dict[str, str]:
    """What `group`'s nodes hold at maxSize, in the units a node-filling run pod requests. EFA is
    counted on both EFA paths: Kueue maps DRA claims of the EFA DeviceClass to the same resource
    (its resources.deviceClassMappings)."""
    instance, n = group.instance_type, group.max_size
    cpu, memory = node_share(instance)
    memory_gib = int(memory.removesuffix("Gi"))
    efa = instance.supports_efa
    return {"cpu": str(n * int(cpu)), "memory": f"{n * memory_gib}Gi",
            GPU_RESOURCE: str(n * instance.gpus),
            EFA_RESOURCE: str(n * instance.efa_interfaces if efa else 0),
            HUGEPAGES_RESOURCE: f"{n * EFA_POD_HUGEPAGES_MIB if efa else 0}Mi"}


def cluster_queue(config: Environment) -> dict:
    flavors = [{"name": g.name, "resources": [{"name": r, "nominalQuota": group_quota(g)[r]} for r in COVERED]}
               for g in config.training_nodegroups]
    return {"apiVersion": API_VERSION, "kind": "ClusterQueue", "metadata": {"name": CLUSTER_QUEUE},
            "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": TRAINING_NAMESPACE}},
                     "queueingStrategy": "BestEffortFIFO",
                     "resourceGroups": [{"coveredResources": list(COVERED), "flavors": flavors}]}}


def local_queue() -> dict:
    return {"apiVersion": API_VERSION, "kind": "LocalQueue",
            "metadata": {"name": LOCAL_QUEUE, "namespace": TRAINING_NAMESPACE},
            "spec": {"clusterQueue": CLUSTER_QUEUE}}


def queue_objects(config: Environment) -> list[dict]:
    """Flavors first: the ClusterQueue names them."""
    return [*(resource_flavor(g) for g in config.training_nodegroups), cluster_queue(config), local_queue()]
