"""Names the pods, the add-ons and `ops` share: namespaces, workloads, labels, ports, containers.

Plain data (no cdk8s), so the ops CLI reads the same names the charts write.
"""

from __future__ import annotations

import hashlib
import json

from config.kubernetes import (  # noqa: F401  (re-exported for the add-ons; config/kubernetes.py is their home)
    EFA_DEVICE_PLUGIN, ETCD_SERVICE, KUBE_SYSTEM_NAMESPACE, KUBEFLOW_NAMESPACE, LABEL_PREFIX, NCCL_TEST_NODES,
    NVIDIA_DEVICE_PLUGIN, TRAINING_OPERATOR, TRAINING_OPERATOR_LEASE, nccl_test_name)

# Every object the add-ons render carries these (k8s/charts.py stamps them on each chart's objects);
# the validation objects carry them too.
PART_OF = "eks-distributed-training"
PART_OF_LABEL = "app.kubernetes.io/part-of"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
COMPONENT_LABEL = "app.kubernetes.io/component"
# A readable name on the pods of a workload: `kubectl get pods -l app.kubernetes.io/name=...`,
# selectors and NetworkPolicies find them by it.
NAME_LABEL = "app.kubernetes.io/name"


def project_labels(component: str) -> dict[str, str]:
    """The labels of every object of one component."""
    return {PART_OF_LABEL: PART_OF, MANAGED_BY_LABEL: "cdk8s", **({COMPONENT_LABEL: component} if component else {})}


# The add-ons' workloads are named in config/kubernetes.py (`ops doctor` checks them by those names).
TRAINING_OPERATOR_WEBHOOK_PORT = 9443  # the manager's --webhook-server-port default
# The PriorityClass of etcd and the Training Operator (k8s/addons/priority_classes.py).
CONTROL_PRIORITY_CLASS = "eks-distributed-training-control"

ETCD_CLIENT_PORT = 2379
# Pods carrying this label may reach etcd; the NetworkPolicy admits nobody else.
ETCD_CLIENT_LABEL = f"{LABEL_PREFIX}/etcd-client"
C10D_PORT = 29400
# What else a pod may reach is declared by labels on it, each "true" (k8s/pods/network_policy.py allows them):
API_CLIENT_LABEL = f"{LABEL_PREFIX}/api-client"  # the Kubernetes API server
HTTPS_EGRESS_LABEL = f"{LABEL_PREFIX}/https-egress"  # HTTPS outside the VPC
POD_IDENTITY_LABEL = f"{LABEL_PREFIX}/pod-identity"  # the node's EKS Pod Identity agent

# The operator's webhook rejects a PyTorchJob replica without a container of this name, and the
# operator takes the job's port from it (kubeflow/trainer v1.9.4 pkg/webhooks/pytorch). The PET_*
# variables torchrun reads go to every container of the pod, not only this one
# (pkg/controller.v1/pytorch/envvar.go: setPodEnv loops over all containers).
PYTORCH_CONTAINER = "pytorch"
# MPIJob v1 execs into this container of each worker (spec.mainContainer, kubexec.sh) and gives
# the launcher's first container the hostfile and kubectl (pkg/controller.v1/mpi at v1.9.4).
MPI_CONTAINER = "mpi"

# Where the kubelet looks for device-plugin sockets; every device plugin mounts it.
KUBELET_DEVICE_PLUGINS = "/var/lib/kubelet/device-plugins"

# Cluster validation (k8s/pods/validation.py): one NCCL all-reduce MPIJob template per EFA node group
# that can hold NCCL_TEST_NODES nodes; `ops validate` runs a copy of it per pair of nodes (ops/nccl.py).


def nccl_groups(config) -> list:
    """The GPU node groups (config.environment.Nodegroup) that get an NCCL test: EFA, a
    bus-bandwidth floor in the instance-type table, and room for the two nodes the test spans."""
    return [g for g in config.gpu_nodegroups
            if g.instance_type.supports_efa and g.instance_type.nccl_busbw_floor_gbps is not None
            and g.max_size >= NCCL_TEST_NODES]


def short_digest(value, length: int) -> str:
    """A stable short hash of a JSON-able value, for names that must change when content does."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:length]
