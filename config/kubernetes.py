"""Kubernetes facts more than one layer uses: names, limits, uids and exit statuses.

The node groups set labels and the charts and pods select on them; the pods and the trainer
images agree on a user; `ops` reads back what the charts named. Plain data, so every layer
(the trainer image included) imports it.
"""

import re

LABEL_PREFIX = "eks-distributed-training.io"
NODEGROUP_LABEL = f"{LABEL_PREFIX}/nodegroup"  # value: the node group's name from cdk.json
ROLE_LABEL = f"{LABEL_PREFIX}/role"  # SYSTEM_ROLE or TRAINING_ROLE
SYSTEM_ROLE = "system"
TRAINING_ROLE = "training"
GPU_LABEL = f"{LABEL_PREFIX}/gpu"  # "true" on GPU node groups
EFA_LABEL = f"{LABEL_PREFIX}/efa"  # "true" on node groups with EFA interfaces
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"  # set by the kubelet
# Only on EFA groups with efaAllocation "dra", value "dra": the EFA DRA driver selects these nodes
# and the EFA device plugin avoids them, so no node runs both ("The two mechanisms cannot coexist on
# the same node", https://docs.aws.amazon.com/eks/latest/userguide/device-management-efa.html).
# Absent elsewhere, so environments without DRA groups label their nodes as before.
EFA_ALLOCATION_LABEL = f"{LABEL_PREFIX}/efa-allocation"
EFA_DRA = "dra"
# Only on GPU groups with gpuAllocation "dra", value "dra": NVIDIA's GPU DRA driver selects these
# nodes and the NVIDIA device plugin avoids them ("do not deploy it alongside the NVIDIA device
# plugin on the same node. Doing so can cause silent oversubscription",
# https://docs.aws.amazon.com/eks/latest/userguide/device-management-nvidia-dra-device-plugin.html).
GPU_ALLOCATION_LABEL = f"{LABEL_PREFIX}/gpu-allocation"
GPU_DRA = "dra"


def nodegroup_labels(name: str, role: str, *, gpu: bool, efa: bool, efa_allocation: str = "devicePlugin",
                     gpu_allocation: str = "devicePlugin") -> dict:
    """The labels a node group gives its nodes (cdk_constructs/managed_nodegroup.py sets them; the
    add-ons' selectors are tested against them)."""
    return {
        NODEGROUP_LABEL: name, ROLE_LABEL: role,
        **({GPU_LABEL: "true"} if gpu else {}),
        **({EFA_LABEL: "true"} if efa else {}),
        **({EFA_ALLOCATION_LABEL: EFA_DRA} if efa and efa_allocation == EFA_DRA else {}),
        **({GPU_ALLOCATION_LABEL: GPU_DRA} if gpu and gpu_allocation == GPU_DRA else {}),
    }
# The NCCL sweep (ops/nccl.py): each pair's MPIJob and launcher pod carry the node group's name, the
# launcher pod the pair of node names, and the template the instance type whose floor applies.
NCCL_GROUP_LABEL = f"{LABEL_PREFIX}/nccl-group"
NCCL_PAIR_ANNOTATION = f"{LABEL_PREFIX}/nccl-pair"
NCCL_INSTANCE_TYPE_ANNOTATION = f"{LABEL_PREFIX}/instance-type"
# On the objects `ops validate` creates (the smoke run among them): not a user's run of its preset.
VALIDATION_LABEL = f"{LABEL_PREFIX}/validation"

GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_TAINT_VALUE = "true"
GPU_TAINT_EFFECT = "NoSchedule"
# A training pod owns its node. Leave room for kubelet's reservation and the DaemonSets
# (VPC CNI, kube-proxy, device plugins, FSx CSI node): 85% of vCPUs and 80% of memory fit
# allocatable on every type in the table. k8s/pods/resources.py requests them; the vision
# presets size their data loaders from the CPU share (config/presets.py).
NODE_CPU_SHARE = 0.85
NODE_MEMORY_SHARE = 0.80

# The system node group's name: its NODEGROUP_LABEL value and its key among the cluster's node
# groups. No training group may take it (config/nodegroup_parser.py refuses it).
SYSTEM_NODEGROUP = "system"
RESERVED_NODEGROUP_NAMES = (SYSTEM_NODEGROUP,)

TRAINING_NAMESPACE = "training"
KUBEFLOW_NAMESPACE = "kubeflow"
# trainingApi v2: Kubeflow Trainer and the JobSet controller it drives, where Trainer's release
# puts both (kubeflow/trainer v2.3.0 manifests/overlays/manager/kustomization.yaml namespace).
KUBEFLOW_SYSTEM_NAMESPACE = "kubeflow-system"
# Cluster add-ons (the EKS add-ons, the device plugins) live beside the other node agents.
KUBE_SYSTEM_NAMESPACE = "kube-system"
# The Secret (and its key) holding the Hugging Face token: `ops model token` writes it, the
# model-download Job and the training pods read it. No chart ever carries its value.
HF_TOKEN_SECRET = "hf-token"
HF_TOKEN_KEY = "token"
FSX_CLAIM_NAME = "fsx-pvc"
FSX_MOUNT_PATH = "/fsx"

# RLIMIT_MEMLOCK of every container on a GPU node, as `ulimit -l` prints it inside the pod. EFA
# registers (locks) its buffers, and a non-root process cannot raise its own limit; containers
# inherit containerd's, which the GPU nodes' user data raises (config/node_user_data.py).
# The GPU check verifies it from a non-root pod.
GPU_CONTAINER_MEMLOCK = "unlimited"

# The net name aws-ofi-nccl registers with NCCL (aws/aws-ofi-nccl src/nccl_ofi_interface_nvidia.cpp,
# "Libfabric" since v1.13.0). EFA pods set NCCL_NET to it (k8s/pods/network_env.py EFA_ENV); the trainer
# checks at start-up that NCCL chose it (trainer/nccl_net.py).
OFI_NCCL_NET = "Libfabric"
# The first words of the trainer's EFA verdict line (trainer/nccl_net.py prints it; `ops logs` shows
# it before the rest of a log).
EFA_CHECK_PASSED = "EFA check passed:"
EFA_CHECK_FAILED = "EFA check failed:"

# The Kubernetes group the validation runner's access entry maps its role to (stacks/validation.py);
# k8s/validation_runner_rbac.py binds exactly what `ops validate` does to it. EKS refuses groups
# starting with "system:".
VALIDATION_RUNNER_GROUP = "eks-distributed-training-validation-runner"

# A training worker's exit statuses (trainer/cli.py). Only a run that reached its last step
# exits 0: the Training Operator marks an elastic PyTorchJob Succeeded as soon as one worker
# pod succeeds (tests/k8s/test_operator_exit_rule.py). torchrun exits TORCHRUN_FAILED when a
# worker failed or it got SIGTERM itself (measured in tests/trainer/test_preemption.py); the
# container's command, trainer.launch, runs it and exits with the workers' status instead
# (trainer.launch.pod_exit_status), so the pod's status tells PERMANENT_EXITS from the rest.
TORCHRUN_FAILED = 1
EXIT_CRASH = 1  # an unexpected exception (trainer.cli.report_crash): retryable, like any failure
# Bad input, or a refusal (another run's lease on the checkpoint directory): every command line of
# ours (app.py, `python -m ops`, the trainer's modules) exits with it after one line naming the field.
EXIT_USAGE = 2
EXIT_NONFINITE = 3  # --max-nonfinite-steps steps in a row had a non-finite loss or gradient (trainer/batching.py)
EXIT_CHECKPOINTS_UNLOADABLE = 65  # sysexits.h EX_DATAERR: checkpoints exist and none of them loads
EXIT_CHECKPOINT_READ_FAILED = 75  # sysexits.h EX_TEMPFAIL: a load failed for a reason not of the checkpoint's own
EXIT_NOT_ON_EFA = 78  # sysexits.h EX_CONFIG: NCCL is not on the EFA network the job was promised
EXIT_PREEMPTED = 143  # 128 + SIGTERM: stopped before the last step, after a checkpoint; resume it
# The statuses every restart would repeat: the same arguments and data, or the other run's lease
# (a usage error; a final save refused by the lease's new owner), and checkpoints none of which
# loads (every attempt finds the same ones). A pod that exits with one ends its job at once
# instead of spending the job's restarts (k8s/pods/trainjob.py).
PERMANENT_EXITS = (EXIT_USAGE, EXIT_CHECKPOINTS_UNLOADABLE)
# Each status in one phrase, as `ops status` shows a worker pod's last exit (README's table says more).
STATUS_MEANINGS = {
    0: "reached its last step",
    EXIT_CRASH: "a crash, or a peer stopped first",
    EXIT_USAGE: "bad input or data, or another run's lease on the checkpoints",
    EXIT_NONFINITE: "a non-finite loss or gradient",
    EXIT_CHECKPOINTS_UNLOADABLE: "checkpoints exist and none loads",
    EXIT_CHECKPOINT_READ_FAILED: "a checkpoint read failed, not by its own fault",
    EXIT_NOT_ON_EFA: "NCCL is not on EFA",
    EXIT_PREEMPTED: "preempted after a checkpoint",
}

# The run's own id, for the trainer's lease on its checkpoint folder (trainer/lease.py), where the
# rendezvous id changes between attempts of one run: a TrainJob's (k8s/pods/trainjob.py).
RUN_ID_ENV = "TRAINER_RUN_ID"

# Every command line of ours, stopped by Ctrl-C: 128 + SIGINT, as a shell reports it.
EXIT_INTERRUPTED = 130

# The trainer images' user (trainer/Dockerfile and Dockerfile.cpu: `USER 1000`), numeric so the
# kubelet can enforce runAsNonRoot. Every pod of the trainer image runs as it (training workers, the
# data and model-download Jobs), so what they write on FSx has one owner whichever pod wrote it.
TRAINER_UID = 1000

# A run's name (the PyTorchJob's). Its pods are named <job>-worker-<index> and get a Service of that
# name: a DNS-1035 label of at most 63 characters, so the job name keeps room for the suffix.
MAX_JOB_NAME = 48
JOB_NAME_PATTERN = re.compile(rf"^[a-z]([-a-z0-9]{{0,{MAX_JOB_NAME - 2}}}[a-z0-9])?$")

# The extended resources a node-filling training pod requests and `ops doctor` expects each GPU
# node to offer: GPUs and EFA interfaces (their device plugins advertise them) and 2 MiB huge pages.
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
HUGEPAGES_RESOURCE = "hugepages-2Mi"
HUGEPAGE_MIB = 2
# Per-pod huge pages for libfabric's EFA bounce buffers, as the EFA guide sizes them. An EFA node
# reserves them at boot for the pods it runs (config/node_user_data.py); a training pod takes
# all of its node's GPUs and EFA interfaces, so one EFA pod per node.
EFA_POD_HUGEPAGES_MIB = 5120
EFA_HUGEPAGES_2MI = f"{EFA_POD_HUGEPAGES_MIB}Mi"
EFA_PODS_PER_NODE = 1
EFA_NODE_HUGEPAGES = EFA_POD_HUGEPAGES_MIB // HUGEPAGE_MIB * EFA_PODS_PER_NODE  # 2 MiB pages per EFA node

# The workloads the add-on charts create, by name: the charts name them from here and `ops doctor`
# checks them by the same names.
NVIDIA_DEVICE_PLUGIN = "nvidia-device-plugin"  # DaemonSet, KUBE_SYSTEM_NAMESPACE
EFA_DEVICE_PLUGIN = "aws-efa-k8s-device-plugin"  # DaemonSet, KUBE_SYSTEM_NAMESPACE
TRAINING_OPERATOR = "training-operator"  # Deployment, KUBEFLOW_NAMESPACE
TRAINER_CONTROLLER = "kubeflow-trainer-controller-manager"  # Deployment, KUBEFLOW_SYSTEM_NAMESPACE (trainingApi v2)
JOBSET_CONTROLLER = "jobset-controller-manager"  # Deployment, KUBEFLOW_SYSTEM_NAMESPACE (trainingApi v2)
# The EFA DRA driver (aws/eks-charts stable/aws-dranet 1.0.0, release name aws-dranet): its DaemonSet
# in KUBE_SYSTEM_NAMESPACE, the driver name its ResourceSlices carry, the DeviceClass of EFA devices.
AWS_DRANET = "aws-dranet"
DRANET_DRIVER = "dra.net"
EFA_DEVICE_CLASS = "efa.networking.k8s.aws"
# resource.k8s.io/v1 (DeviceClass, ResourceClaimTemplate) is served from Kubernetes 1.34, and EKS
# supports the EFA DRA driver from 1.34 ("Minimum Kubernetes version 1.34",
# https://docs.aws.amazon.com/eks/latest/userguide/device-management-efa.html).
DRA_MIN_KUBERNETES = "1.34"
# A DRA group's pods claim their EFA interfaces from this template in TRAINING_NAMESPACE, under
# this claim name in the pod and its container.
EFA_CLAIM = "efa"


def efa_claim_template_name(nodegroup: str) -> str:
    return f"efa-{nodegroup}"


# gpuAllocation dra: NVIDIA's GPU DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1,
# cmd/gpu-kubelet-plugin/main.go DriverName; templates/deviceclass-gpu.yaml names its DeviceClass).
NVIDIA_GPU_DRIVER = "gpu.nvidia.com"
GPU_DEVICE_CLASS = "gpu.nvidia.com"
NVIDIA_DRA_DRIVER = "dra-driver-nvidia-gpu"  # the chart's name, and so its objects' prefix
# The standard attribute both DRA drivers publish for every device: the PCIe root complex
# (https://kubernetes.io/docs/reference/node/dra-standard-device-attributes/).
PCIE_ROOT_ATTRIBUTE = "resource.kubernetes.io/pcieRoot"
# Such a group's pods take GPUs and EFA devices from one claim (constraints span one claim only).
DEVICES_CLAIM = "devices"


def devices_claim_template_name(nodegroup: str) -> str:
    return f"devices-{nodegroup}"


# The Lease its replicas elect a leader with: v1.9.4's --leader-election-id default
# (cmd/training-operator.v1/main.go), in the operator's namespace.
TRAINING_OPERATOR_LEASE = "1ca428e5.training-operator.kubeflow.org"
# Rendezvous: torch's etcd-v2 backend talks to this Service (and Deployment) in the training namespace.
ETCD_SERVICE = "etcd"

# Labels the Training Operator puts on the pods of its jobs (kubeflow/trainer v1.9.4
# pkg/apis/kubeflow.org/v1/common_types.go JobNameLabel, ReplicaTypeLabel): NetworkPolicies select a
# job's pods by the first, `ops validate` and `ops doctor` find an MPIJob's launcher by both.
OPERATOR_JOB_NAME_LABEL = "training.kubeflow.org/job-name"
OPERATOR_REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
# Labels JobSet v0.12.0 puts on every pod of a JobSet (pkg/constants), whose name Trainer v2 gives the
# TrainJob's: the run's pods under trainingApi v2, which `ops validate` reads the smoke run's logs of;
# the restart attempt counts the JobSet's whole-gang restarts.
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"

# Cluster validation: one NCCL all-reduce MPIJob template per EFA node group that can hold
# NCCL_TEST_NODES nodes (k8s/pods/validation.py); `ops validate` runs a copy of it per pair of nodes
# (ops/nccl.py), named after the template.
NCCL_TEST_NODES = 2


def nccl_test_name(nodegroup: str) -> str:
    return f"nccl-allreduce-{nodegroup}"


def nccl_sweep_peers_policy_name(nodegroup: str) -> str:
    return f"nccl-sweep-{nodegroup}-peers"


# A GPU check Job's pod template is immutable: its name carries a digest of what it checks.
GPU_CHECK_DIGEST_LENGTH = 6


def gpu_check_job_name(nodegroup: str, digest: str) -> str:
    return f"gpu-check-{nodegroup}-{digest}"


# The CronJob per capacity-block group that stops its runs before the block ends
# (k8s/pods/capacity_block_stop.py), and its ServiceAccount and Role.
CAPACITY_BLOCK_STOP = "capacity-block-stop"


def capacity_block_stop_cronjob_name(nodegroup: str) -> str:
    return f"{CAPACITY_BLOCK_STOP}-{nodegroup}"


# Kubernetes' limits on names (apimachinery validation): a DNS-1123 label and a label value hold 63
# characters, a DNS-1123 subdomain 253, and a CronJob's name 52 (its controller adds 11 to name
# each Job). A Job's and a Kubeflow job's name is also a label value on their pods.
MAX_DNS_LABEL = 63
MAX_DNS_SUBDOMAIN = 253
MAX_CRONJOB_NAME = 52
# Every Kubernetes name made from a node group's name, with the most characters its kind allows.
# EKS would take uppercase and '_' in a node group name, these names do not, so the config admits
# lowercase DNS labels short enough for all of them (config/nodegroup_parser.py). The NCCL sweep's
# copies (ops/nccl.py) add -<pair index> to nccl_test_name, and the operator -worker-<i> for their
# pods: the CronJob's limit binds first and leaves those room for groups of under a million nodes.
NODEGROUP_DERIVED_NAMES = (
    (lambda group: group, MAX_DNS_LABEL),  # the nodes' NODEGROUP_LABEL value, the Kueue ResourceFlavor
    (efa_claim_template_name, MAX_DNS_SUBDOMAIN),
    (devices_claim_template_name, MAX_DNS_SUBDOMAIN),
    (nccl_test_name, MAX_DNS_LABEL),
    (nccl_sweep_peers_policy_name, MAX_DNS_SUBDOMAIN),
    (lambda group: gpu_check_job_name(group, "0" * GPU_CHECK_DIGEST_LENGTH), MAX_DNS_LABEL),
    (capacity_block_stop_cronjob_name, MAX_CRONJOB_NAME),
)
MAX_NODEGROUP_NAME = min(limit - len(name("")) for name, limit in NODEGROUP_DERIVED_NAMES)
# The derived name that leaves the least room, for the config's error message.
LONGEST_DERIVED_NAME = min(NODEGROUP_DERIVED_NAMES, key=lambda row: row[1] - len(row[0]("")))
