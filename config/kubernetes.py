"""Names shared by the node groups (which set them) and the charts (which select on them)."""

LABEL_PREFIX = "eks-distributed-training.io"
NODEGROUP_LABEL = f"{LABEL_PREFIX}/nodegroup"  # value: the node group's name from cdk.json
ROLE_LABEL = f"{LABEL_PREFIX}/role"  # "system" or "training"
GPU_LABEL = f"{LABEL_PREFIX}/gpu"  # "true" on GPU node groups
EFA_LABEL = f"{LABEL_PREFIX}/efa"  # "true" on node groups with EFA interfaces
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"  # set by the kubelet

GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_TAINT_VALUE = "true"
GPU_TAINT_EFFECT = "NoSchedule"

TRAINING_NAMESPACE = "training"
FSX_CLAIM_NAME = "fsx-pvc"
FSX_MOUNT_PATH = "/fsx"
