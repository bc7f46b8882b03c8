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

from constructs import Construct

from k8s.base import ProjectChart, raw_object
from k8s.common import CONTROL_PRIORITY_CLASS

# Far below the reserved range (> 1,000,000,000), far above the default 0.
CONTROL_PRIORITY = 100_000_000


class PriorityClassesChart(ProjectChart):
    component = "scheduling"
    addon = "priority-classes"

    def __init__(self, scope: Construct, id: str):
        super().__init__(scope, id)
        self.control = raw_object(self, "Control", {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": self.meta(CONTROL_PRIORITY_CLASS, cluster_scoped=True),
            "value": CONTROL_PRIORITY,
            "globalDefault": False,
            "preemptionPolicy": "PreemptLowerPriority",
            "description": "eks-distributed-training cluster services the jobs depend on (etcd, the Training Operator)",
        })
