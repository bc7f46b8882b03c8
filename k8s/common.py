"""Names, images and pod-shape rules shared by the charts and the job renderer.

Everything here is plain data or a pure function, so the ops CLI can import it without cdk8s.
"""

from __future__ import annotations

import hashlib
import json

from config.instance_types import InstanceType
from config.kubernetes import (  # noqa: F401  (names re-exported for the charts; config/kubernetes.py is their home)
    EFA_DEVICE_PLUGIN, EFA_HUGEPAGES_2MI, EFA_RESOURCE, ETCD_SERVICE, GPU_RESOURCE, GPU_TAINT_EFFECT, GPU_TAINT_KEY,
    GPU_TAINT_VALUE, HF_TOKEN_KEY, HF_TOKEN_SECRET, HUGEPAGES_RESOURCE, KUBE_SYSTEM_NAMESPACE, KUBEFLOW_NAMESPACE,
    LABEL_PREFIX, NCCL_TEST_NODES, NVIDIA_DEVICE_PLUGIN, OFI_NCCL_NET, TRAINER_UID, TRAINING_OPERATOR,
    TRAINING_OPERATOR_LEASE, nccl_test_name)

# Numeric users: the kubelet can only enforce runAsNonRoot for images whose USER is numeric, and
# these images set none, so the charts choose. 65532 is distroless's "nonroot" uid, 65534 "nobody".
NONROOT_UID = 65532
NOBODY_UID = 65534

# Every pod we render runs under the container runtime's default seccomp profile (the Kubernetes
# restricted Pod Security profile asks for it; none of these workloads makes unusual syscalls).
RUNTIME_DEFAULT_SECCOMP = {"type": "RuntimeDefault"}


def pod_security_context(uid: int) -> dict:
    """The pod half of the restricted Pod Security profile, for the pods built as plain dicts
    (k8s/jobs.py, k8s/fsx_job.py, the NCCL MPIJob): a numeric non-root user and group, and the
    runtime's default seccomp profile. No fsGroup: the kubelet would chown the whole FSx volume."""
    return {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid, "seccompProfile": dict(RUNTIME_DEFAULT_SECCOMP)}


def container_security_context(*, read_only_root_filesystem: bool = False) -> dict:
    """The container half: no privilege escalation and no Linux capability. EFA needs none: a pod
    requests vpc.amazonaws.com/efa and hugepages-2Mi ("Manage EFA devices on Amazon EKS", Amazon EKS
    User Guide), the device plugin hands it the /dev/infiniband/uverbs* devices, which the kernel
    creates world read-write (uverbs_devnode, drivers/infiniband/core/uverbs_main.c), and the memory
    it registers counts against RLIMIT_MEMLOCK, which the node's container runtime must raise."""
    context: dict = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    if read_only_root_filesystem:
        context["readOnlyRootFilesystem"] = True
    return context


TRAINING_OPERATOR_WEBHOOK_PORT = 9443  # the manager's --webhook-server-port default
# The PriorityClass of etcd and the Training Operator (k8s/priority.py).
CONTROL_PRIORITY_CLASS = "eks-distributed-training-control"

# Rendezvous: torch's etcd-v2 backend talks to ETCD_SERVICE in the training namespace.
ETCD_CLIENT_PORT = 2379
# Pods carrying this label may reach etcd; the NetworkPolicy admits nobody else.
ETCD_CLIENT_LABEL = f"{LABEL_PREFIX}/etcd-client"
C10D_PORT = 29400
# What else a pod may reach is declared by labels on it, each "true" (k8s/network.py allows them):
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

# The Hugging Face token is read from the Secret HF_TOKEN_SECRET only (config/kubernetes.py, where
# `ops model token` also reads it); the charts never carry its value.

# A training pod owns its node. Leave room for kubelet's reservation and the DaemonSets
# (VPC CNI, kube-proxy, device plugins, FSx CSI node): 85% of vCPUs and 80% of memory fit
# allocatable on every type in the table.
NODE_CPU_SHARE = 0.85
NODE_MEMORY_SHARE = 0.80
SHM_MAX_GIB = 128

# Interfaces neither NCCL nor Open MPI may bootstrap over: loopback, a Docker bridge, and the EKS
# Pod Identity agent's link-local interface (pod-id-link0, 169.254.170.23), which carries no pod
# traffic. NCCL takes a "^"-prefixed exclude list, Open MPI's btl_tcp_if_exclude a plain one.
EXCLUDED_INTERFACES = ("lo", "docker0", "pod-id-link0")
NCCL_SOCKET_IFNAME = "^" + ",".join(EXCLUDED_INTERFACES)
MPI_TCP_IF_EXCLUDE = ",".join(EXCLUDED_INTERFACES)

# Training Operator v1.9.4, the last v1 release: its image is built by the release's
# publish-core-images workflow from commit 93c5489 and tagged v1-<sha>
# (../shared/contracts/kubeflow-training-v1.9.4/operator/standalone-kustomization.yaml). The same
# workflow's kubectl-delivery image ships kubectl 1.30.7 (build/images/kubectl-delivery/Dockerfile),
# outside kubectl's skew of our clusters: each environment builds its own (k8s/images/kubectl-delivery).
TRAINING_OPERATOR_RELEASE_TAG = "v1-93c5489"

# Images, pinned by tag. One table so pin checks and upgrades look in one place.
IMAGES = {
    # ../shared/contracts/nvidia-device-plugin-v0.19.3/nvidia-device-plugin.yml (NVIDIA/k8s-device-plugin v0.19.3).
    "nvidia-device-plugin": "nvcr.io/nvidia/k8s-device-plugin:v0.19.3",
    "training-operator": f"ghcr.io/kubeflow/training-v1/training-operator:{TRAINING_OPERATOR_RELEASE_TAG}",
    # etcd 3.5, the last minor with the v2 API torch's etcd rendezvous speaks (3.6 removed it).
    # 3.5.33 (2026-07-23) is the newest 3.5 patch, and its v2 API works for us: etcd-io/etcd#21249
    # ("/v2/keys broken on 3.5.26") was the reporter's own set-up (HTTP moved to a separate port
    # with --listen-client-http-urls, etcdctl pointed at the gRPC-only one; their words in
    # etcd-io/etcd#21250), its routing PR #21240 was closed unmerged, and release-3.5's
    # server/embed/serve.go still routes every HTTP/1.1 request on a plain-HTTP client listener
    # to the HTTP handler that serves /v2 (git log v3.5.25..v3.5.33 -- server/embed/serve.go: only
    # a read-header timeout and CRL checks changed). python-etcd speaks HTTP/1.1 to our plain
    # listener, and v3.5.33's own e2e tests (tests/e2e/v2_curl_test.go TestV2CurlNoTLS,
    # cmux_test.go ServerNonTLS) PUT and GET /v2/keys there. Image: scripts/release.sh pushes
    # quay.io/coreos/etcd:<version> (and gcr.io/etcd-development/etcd).
    "etcd": "quay.io/coreos/etcd:v3.5.33",
    # nvidia-smi comes from the node's container toolkit; the base image only needs a shell.
    "cuda-base": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
    # all_reduce_perf with libfabric, EFA and the aws-ofi-nccl plugin built in.
    "nccl-tests": "public.ecr.aws/hpc-cloud/nccl-tests:cuda12.8.1-efa1.43.2-ofiv1.16.3-ncclv2.27.7-1-testsv2.16.9",
}

# The EFA device plugin as the aws/eks-charts chart v0.5.30 deploys it (its appVersion and
# values.yaml image.tag; ../shared/contracts/aws-efa-k8s-device-plugin-chart-v0.5.30/). v0.5.6,
# pinned before, miscounts devices on newer instance families.
EFA_DEVICE_PLUGIN_TAG = "v0.5.20"
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
        resources[GPU_RESOURCE] = str(instance.gpus)
    if instance.supports_efa:
        resources[EFA_RESOURCE] = str(instance.efa_interfaces)
        resources[HUGEPAGES_RESOURCE] = EFA_HUGEPAGES_2MI
    return resources


def container_resources(instance: InstanceType, *, cpu: str, memory: str) -> dict[str, dict[str, str]]:
    """requests and limits of a container on `instance`: `cpu` and `memory`, plus every device a
    training pod on that node group takes (accelerator_resources). Training pods and the
    validation pods of a node group both call this, so a node that passes validation can
    schedule training pods. CPU has no limit: CFS quotas throttle data loaders and NCCL's proxy
    threads; the memory limit equals the request."""
    extended = accelerator_resources(instance)
    return {"requests": {"cpu": cpu, "memory": memory, **extended}, "limits": {"memory": memory, **extended}}


# EFA settings belong to the pods that request EFA devices, never to an image: a pod told to use
# libfabric's EFA provider without the devices would believe it runs on EFA while NCCL falls back
# to TCP sockets. NCCL_NET_PLUGIN=ofi makes NCCL load libnccl-net-ofi.so, the name aws-ofi-nccl
# always installs (aws/aws-ofi-nccl v1.16.3 src/Makefile.am). NCCL_NET=Libfabric, the net name
# aws-ofi-nccl registers, makes NCCL fail instead of falling back to sockets when that plugin
# cannot start (see trainer/nccl_net.py, which also reads back what NCCL chose).
EFA_ENV = (("FI_PROVIDER", "efa"), ("FI_EFA_USE_DEVICE_RDMA", "1"), ("FI_EFA_FORK_SAFE", "1"),
           ("NCCL_NET_PLUGIN", "ofi"), ("NCCL_NET", OFI_NCCL_NET))


def network_env(instance: InstanceType, *, nccl_debug: str = "WARN") -> list[dict]:
    """NCCL settings on GPU pods; EFA_ENV only where the pod also requests EFA devices."""
    env: list[dict] = []
    if instance.is_gpu:
        env += [{"name": "NCCL_SOCKET_IFNAME", "value": NCCL_SOCKET_IFNAME},
                {"name": "NCCL_DEBUG", "value": nccl_debug}]
    if instance.supports_efa:
        env += [{"name": name, "value": value} for name, value in EFA_ENV]
    return env


def nccl_groups(config) -> list:
    """The GPU node groups (config.environment.Nodegroup) that get an NCCL test: EFA, a
    bus-bandwidth floor in the instance-type table, and room for the two nodes the test spans."""
    return [g for g in config.gpu_nodegroups
            if g.instance_type.supports_efa and g.instance_type.nccl_busbw_floor_gbps is not None
            and g.max_size >= NCCL_TEST_NODES]


# Where the kubelet looks for device-plugin sockets; every device plugin mounts it.
KUBELET_DEVICE_PLUGINS = "/var/lib/kubelet/device-plugins"


def short_digest(value, length: int) -> str:
    """A stable short hash of a JSON-able value, for names that must change when content does."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:length]
