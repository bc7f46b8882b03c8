"""Names, images and pod-shape rules shared by the charts and the job renderer.

Everything here is plain data or a pure function, so the ops CLI can import it without cdk8s.
"""

from __future__ import annotations

import hashlib
import json

from config.instance_types import InstanceType
from config.kubernetes import GPU_TAINT_EFFECT, GPU_TAINT_KEY, GPU_TAINT_VALUE, LABEL_PREFIX

KUBEFLOW_NAMESPACE = "kubeflow"

# Rendezvous: torch's etcd-v2 backend talks to this Service in the training namespace.
ETCD_SERVICE = "etcd"
ETCD_CLIENT_PORT = 2379
# Pods carrying this label may reach etcd; the NetworkPolicy admits nobody else.
ETCD_CLIENT_LABEL = f"{LABEL_PREFIX}/etcd-client"
C10D_PORT = 29400

# The Training Operator injects its PET_* variables only into the container of this name.
PYTORCH_CONTAINER = "pytorch"
# MPIJob v1 injects the hostfile and kubectl-exec agent into, and execs into, this container.
MPI_CONTAINER = "mpi"

# The Hugging Face token is read from this Secret only; the charts never carry its value.
HF_TOKEN_SECRET = "hf-token"
HF_TOKEN_KEY = "token"

# Per-pod 2 MiB huge pages for libfabric's EFA bounce buffers, as the EFA guide sizes them.
EFA_HUGEPAGES_2MI = "5120Mi"

# A training pod owns its node. Leave room for kubelet's reservation and the DaemonSets
# (VPC CNI, kube-proxy, device plugins, FSx CSI node): 85% of vCPUs and 80% of memory fit
# allocatable on every type in the table.
NODE_CPU_SHARE = 0.85
NODE_MEMORY_SHARE = 0.80
SHM_MAX_GIB = 128

# Interfaces NCCL must not bootstrap over: loopback, a Docker bridge, and the EKS Pod Identity
# agent's link-local interface (pod-id-link0, 169.254.170.23), which carries no pod traffic.
NCCL_SOCKET_IFNAME = "^lo,docker,pod-id-link0"

# Images, pinned by tag. One table so pin checks and upgrades look in one place.
IMAGES = {
    "nvidia-device-plugin": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
    "training-operator": "docker.io/kubeflow/training-operator:v1.9.0",
    # The MPI v1 launcher's init container (copies kubectl for mpirun's exec agent); the operator's
    # default is an unpinned :latest. v0.2.3 is the last release of the v1 delivery image.
    "mpi-kubectl-delivery": "docker.io/mpioperator/kubectl-delivery:v0.2.3",
    "etcd": "quay.io/coreos/etcd:v3.5.17",
    # nvidia-smi comes from the node's container toolkit; the base image only needs a shell.
    "cuda-base": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
    # all_reduce_perf with libfabric, EFA and the aws-ofi-nccl plugin built in.
    "nccl-tests": "public.ecr.aws/hpc-cloud/nccl-tests:cuda12.8.1-efa1.43.2-ofiv1.16.3-ncclv2.27.7-1-testsv2.16.9",
}

EFA_DEVICE_PLUGIN_TAG = "v0.5.6"
# Amazon EKS add-on images live in a per-region ECR account (EKS guide, "Amazon container image
# registries"). Regions not listed here fail loudly rather than pull from the wrong partition.
EKS_ADDON_REGISTRY_ACCOUNTS = {
    "af-south-1": "877085696533",
    "ap-east-1": "800184023465",
    "ap-northeast-1": "602401143452",
    "ap-northeast-2": "602401143452",
    "ap-northeast-3": "602401143452",
    "ap-south-1": "602401143452",
    "ap-southeast-1": "602401143452",
    "ap-southeast-2": "602401143452",
    "ap-southeast-3": "296578399912",
    "ca-central-1": "602401143452",
    "eu-central-1": "602401143452",
    "eu-north-1": "602401143452",
    "eu-south-1": "590381155156",
    "eu-west-1": "602401143452",
    "eu-west-2": "602401143452",
    "eu-west-3": "602401143452",
    "me-south-1": "558608220178",
    "sa-east-1": "602401143452",
    "us-east-1": "602401143452",
    "us-east-2": "602401143452",
    "us-west-1": "602401143452",
    "us-west-2": "602401143452",
}


def efa_device_plugin_image(region: str) -> str:
    if region not in EKS_ADDON_REGISTRY_ACCOUNTS:
        raise KeyError(f"no EKS add-on registry account known for region {region}; add it to "
                       "k8s/common.py EKS_ADDON_REGISTRY_ACCOUNTS")
    account = EKS_ADDON_REGISTRY_ACCOUNTS[region]
    return f"{account}.dkr.ecr.{region}.amazonaws.com/eks/aws-efa-k8s-device-plugin:{EFA_DEVICE_PLUGIN_TAG}"


def gpu_toleration() -> dict:
    return {"key": GPU_TAINT_KEY, "operator": "Equal", "value": GPU_TAINT_VALUE, "effect": GPU_TAINT_EFFECT}


def node_share(instance: InstanceType) -> tuple[str, str]:
    """CPU and memory one node-filling pod requests on `instance`."""
    cpu = max(1, int(instance.vcpus * NODE_CPU_SHARE))
    memory_gib = max(1, int(instance.memory_gib * NODE_MEMORY_SHARE))
    return str(cpu), f"{memory_gib}Gi"


def shm_size(instance: InstanceType) -> str:
    """/dev/shm for data-loader workers and NCCL's shared-memory transport: a quarter of the
    pod's memory (it counts against the memory limit), capped."""
    memory_gib = max(1, int(instance.memory_gib * NODE_MEMORY_SHARE))
    return f"{max(1, min(memory_gib // 4, SHM_MAX_GIB))}Gi"


def accelerator_resources(instance: InstanceType) -> dict[str, str]:
    """Extended resources a node-filling pod takes: all GPUs, all EFA interfaces and the
    huge pages EFA needs. Requests must equal limits for these."""
    resources: dict[str, str] = {}
    if instance.is_gpu:
        resources["nvidia.com/gpu"] = str(instance.gpus)
    if instance.supports_efa:
        resources["vpc.amazonaws.com/efa"] = str(instance.efa_interfaces)
        resources["hugepages-2Mi"] = EFA_HUGEPAGES_2MI
    return resources


def network_env(instance: InstanceType, *, nccl_debug: str = "WARN") -> list[dict]:
    """NCCL and libfabric settings; FI_* only where the pod also requests EFA devices, so a job
    never believes it runs on EFA while NCCL silently falls back to TCP sockets."""
    env: list[dict] = []
    if instance.is_gpu:
        env += [{"name": "NCCL_SOCKET_IFNAME", "value": NCCL_SOCKET_IFNAME},
                {"name": "NCCL_DEBUG", "value": nccl_debug}]
    if instance.supports_efa:
        env += [{"name": "FI_PROVIDER", "value": "efa"},
                {"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1"},
                {"name": "FI_EFA_FORK_SAFE", "value": "1"}]
    return env


# Where the kubelet looks for device-plugin sockets; every device plugin mounts it.
KUBELET_DEVICE_PLUGINS = "/var/lib/kubelet/device-plugins"


def short_digest(value, length: int) -> str:
    """A stable short hash of a JSON-able value, for names that must change when content does."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:length]
