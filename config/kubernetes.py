"""Names shared by the node groups (which set them) and the charts (which select on them)."""

LABEL_PREFIX = "eks-distributed-training.io"
NODEGROUP_LABEL = f"{LABEL_PREFIX}/nodegroup"  # value: the node group's name from cdk.json
ROLE_LABEL = f"{LABEL_PREFIX}/role"  # SYSTEM_ROLE or TRAINING_ROLE
SYSTEM_ROLE = "system"
TRAINING_ROLE = "training"
GPU_LABEL = f"{LABEL_PREFIX}/gpu"  # "true" on GPU node groups
EFA_LABEL = f"{LABEL_PREFIX}/efa"  # "true" on node groups with EFA interfaces
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"  # set by the kubelet
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

# The system node group's name: its NODEGROUP_LABEL value and its key among the cluster's node
# groups. No training group may take it (config/environment.py refuses it).
SYSTEM_NODEGROUP = "system"
RESERVED_NODEGROUP_NAMES = (SYSTEM_NODEGROUP,)

TRAINING_NAMESPACE = "training"
# The Secret (and its key) holding the Hugging Face token: `ops model token` writes it, the
# model-download Job and the training pods read it. No chart ever carries its value.
HF_TOKEN_SECRET = "hf-token"
HF_TOKEN_KEY = "token"
FSX_CLAIM_NAME = "fsx-pvc"
FSX_MOUNT_PATH = "/fsx"

# RLIMIT_MEMLOCK of every container on a GPU node, as `ulimit -l` prints it inside the pod. EFA
# registers (locks) its buffers, and a non-root process cannot raise its own limit; containers
# inherit containerd's, which the GPU nodes' user data raises (cdk_constructs/node_user_data.py).
# The GPU check verifies it from a non-root pod.
GPU_CONTAINER_MEMLOCK = "unlimited"

# The net name aws-ofi-nccl registers with NCCL (aws/aws-ofi-nccl src/nccl_ofi_interface_nvidia.cpp,
# "Libfabric" since v1.13.0). EFA pods set NCCL_NET to it (k8s/common.py EFA_ENV); the trainer
# checks at start-up that NCCL chose it (trainer/nccl_net.py).
OFI_NCCL_NET = "Libfabric"

# The Kubernetes group the validation runner's access entry maps its role to (stacks/validation.py);
# k8s/validation_runner_rbac.py binds exactly what `ops validate` does to it. EKS refuses groups
# starting with "system:".
VALIDATION_RUNNER_GROUP = "eks-distributed-training-validation-runner"

# A training worker's exit statuses (trainer/cli.py). Only a run that reached its last step
# exits 0: the Training Operator marks an elastic PyTorchJob Succeeded as soon as one worker
# pod succeeds (tests/k8s/test_operator_exit_rule.py). torchrun, the container's command, exits
# TORCHRUN_FAILED when a worker failed or it got SIGTERM itself (measured in
# tests/trainer/test_preemption.py), so these reach the pod log and torchrun's failure report,
# not the pod's status.
TORCHRUN_FAILED = 1
EXIT_CRASH = 1  # an unexpected exception (trainer.cli.report_crash): retryable, like any failure
EXIT_USAGE = 2  # bad input, or a refusal (another run's lease on the checkpoint directory)
EXIT_NONFINITE = 3  # --max-nonfinite-steps steps in a row had a non-finite loss or gradient (trainer/batching.py)
EXIT_CHECKPOINTS_UNLOADABLE = 65  # sysexits.h EX_DATAERR: checkpoints exist and none of them loads
EXIT_CHECKPOINT_READ_FAILED = 75  # sysexits.h EX_TEMPFAIL: a load failed for a reason not of the checkpoint's own
EXIT_NOT_ON_EFA = 78  # sysexits.h EX_CONFIG: NCCL is not on the EFA network the job was promised
EXIT_PREEMPTED = 143  # 128 + SIGTERM: stopped before the last step, after a checkpoint; resume it
