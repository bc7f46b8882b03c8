"""The PriorityClass of the cluster services the jobs depend on: etcd (rendezvous) and the Training
Operator (its webhook admits every PyTorchJob and fails closed).

Kubernetes reserves the `system-` names and the values above one billion for its own classes,
which are meant for kube-system's critical add-ons; a cluster may also limit them outside
kube-system with a ResourceQuota ("Pod Priority and Preemption",
https://kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption/#priorityclass;
"Resource Quotas", "Limit Priority Class consumption by default"). So our services in `kubeflow`
and `training` get a class of their own: above every training, data and download pod (no class,
priority 0), so the scheduler preempts one of those rather than leave rendezvous or admission
unscheduled; below the node-critical device plugins.
"""

from __future__ import annotations

from k8s.addons import AddOn
from k8s.pods.names import CONTROL_PRIORITY_CLASS

# Far below the reserved range (> 1,000,000,000), far above the default 0.
CONTROL_PRIORITY = 100_000_000


def control_priority_class() -> dict:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": CONTROL_PRIORITY_CLASS},
        "value": CONTROL_PRIORITY,
        "globalDefault": False,
        "preemptionPolicy": "PreemptLowerPriority",
        "description": "eks-distributed-training cluster services the jobs depend on (etcd, the Training Operator)",
    }


ADDON = AddOn(name="priority-classes", component="scheduling",
              objects=lambda config, values: [control_priority_class()])
