"""User data for managed nodes on the EKS AL2023 AMIs: what the instance type's hardware needs
before kubelet starts, as the MIME multi-part archive EKS merges with its own.

"Customize managed nodes with launch templates", Amazon EKS User Guide
(https://docs.aws.amazon.com/eks/latest/userguide/launch-templates.html, "Amazon EC2 user data"):
managed node group user data must be MIME multi-part; a part of type application/node.eks.aws holds
a nodeadm NodeConfig that is merged with the one EKS provides (cluster name, endpoint, CA).

Ordering on the AL2023 AMI (awslabs/amazon-eks-ami, templates/al2023/runtime/rootfs/etc/systemd/
system/): nodeadm-config runs Before=cloud-init.service; cloud-init's scripts-user (our shell part)
runs in cloud-final; nodeadm-run, which sets up local disks and starts containerd and kubelet, runs
After=cloud-final.service. So both parts below take effect before kubelet reads the node's
resources.

What is not here: kubelet's maxPods. A managed node group without a custom AMI gets a NodeConfig
from EKS appended after ours, and EKS's maxPods "takes precedence over any other maxPods
configuration" ("Choose an optimal Amazon EC2 node instance type", section "How maxPods is
determined", https://docs.aws.amazon.com/eks/latest/userguide/choosing-instance-type.html#max-pods-precedence);
setting it ourselves would need a custom AMI id in the launch template (see the README, "GPU
nodes: locked memory and maxPods").
"""

from __future__ import annotations

from config.instance_types import InstanceType
from config.kubernetes import EFA_NODE_HUGEPAGES, GPU_CONTAINER_MEMLOCK

# Fixed, not random: a node group is recycled whenever its launch data changes, so two synths of
# one config must produce byte-identical user data.
BOUNDARY = "==EKS-DISTRIBUTED-TRAINING=="
NODECONFIG_CONTENT_TYPE = "application/node.eks.aws"
SHELL_CONTENT_TYPE = 'text/x-shellscript; charset="us-ascii"'

# nodeadm's LocalStorageOptions (amazon-eks-ami doc/nodeadm/doc/api.md; setup-local-disks):
# RAID0 stripes every NVMe instance store disk into one XFS array under /mnt/k8s-disks/0 and
# bind-mounts /var/lib/kubelet, /var/lib/containerd and /var/log/pods onto it. Images and emptyDir
# volumes then live on local NVMe, not on the EBS root volume.
LOCAL_STORAGE_STRATEGY = "RAID0"

# Why the node reserves huge pages itself (EFA_NODE_HUGEPAGES of them, config/kubernetes.py). What could be established offline:
# - The AL2023 AMI build installs EFA with `efa_installer.sh --minimal -y`
#   (amazon-eks-ami templates/al2023/provisioners/install-efa.sh), and nothing in the AMI's build
#   or runtime files sets vm.nr_hugepages (a search of the repository finds none).
# - The EFA installer's efa-config package can reserve huge pages at boot (110 MB per core, twice:
#   the helper the Bottlerocket EFA support copied, bottlerocket-core-kit PR #141); whether the
#   --minimal install includes it is not documented anywhere we could read.
# - Bottlerocket had to add its own reservation for EFA nodes (bottlerocket-core-kit issue #140).
# - Kubernetes ("Manage HugePages", kubernetes.io/docs/tasks/manage-hugepages/scheduling-hugepages):
#   nodes must pre-allocate huge pages; pages allocated after kubelet starts are not reported until
#   it restarts.
# Pre-allocation on the EKS NVIDIA AMI is therefore not guaranteed, and a pod requesting
# hugepages-2Mi on a node with none stays Pending. The script below reserves what the pods
# request, never lowers a larger reservation already made, and persists it for reboots.
HUGEPAGES_SYSCTL_FILE = "/etc/sysctl.d/90-eks-distributed-training-efa-hugepages.conf"

# Containers inherit RLIMIT_MEMLOCK from containerd: the base OCI spec nodeadm writes sets only
# RLIMIT_NOFILE (amazon-eks-ami nodeadm/internal/containerd/base-runtime-spec.json), and the AL2023
# AMI's containerd drop-in sets only its slice (templates/al2023/runtime/rootfs/etc/systemd/system/
# containerd.service.d/00-runtime-slice.conf), so pods get systemd's default of a few MiB. EFA
# registers (locks) its buffers with the device and a non-root pod cannot raise its own limit
# (setrlimit above the hard limit needs CAP_SYS_RESOURCE): libfabric then fails with ENOMEM (-12)
# (aws/aws-ofi-nccl issue 141; Bottlerocket raises the limit for EFA nodes the same way,
# bottlerocket-core-kit PR 141). limits.d files do not apply to services. The drop-in below takes
# effect before any pod: nodeadm-run, after cloud-final, restarts containerd
# (nodeadm/internal/containerd/daemon.go EnsureRunning).
CONTAINERD_DROP_IN = "/etc/systemd/system/containerd.service.d/90-eks-distributed-training-memlock.conf"
# systemd's spelling of the limit `ulimit -l` reports as GPU_CONTAINER_MEMLOCK.
SYSTEMD_MEMLOCK = {"unlimited": "infinity"}[GPU_CONTAINER_MEMLOCK]


def node_config() -> str:
    """The NodeConfig part: RAID0 local storage where the type has NVMe instance store."""
    lines = ["---", "apiVersion: node.eks.aws/v1alpha1", "kind: NodeConfig", "spec:",
             "  instance:", "    localStorage:", f"      strategy: {LOCAL_STORAGE_STRATEGY}"]
    return "\n".join([*lines, ""])


def memlock_section() -> list[str]:
    return [
        "# Locked memory for EFA in non-root pods: containers inherit containerd's limit.",
        f"mkdir -p {CONTAINERD_DROP_IN.rsplit('/', 1)[0]}",
        f"printf '[Service]\\nLimitMEMLOCK={SYSTEMD_MEMLOCK}\\n' > {CONTAINERD_DROP_IN}",
        "systemctl daemon-reload",
    ]


def hugepages_section(pages: int) -> list[str]:
    return [
        "# Reserve 2 MiB huge pages for EFA pods (libfabric bounce buffers) before kubelet starts.",
        f"EFA_HUGEPAGES_2MI={pages}",
        "current=$(cat /proc/sys/vm/nr_hugepages)",
        'if [ "$current" -lt "$EFA_HUGEPAGES_2MI" ]; then',
        f'  echo "vm.nr_hugepages = $EFA_HUGEPAGES_2MI" > {HUGEPAGES_SYSCTL_FILE}',
        '  sysctl -w vm.nr_hugepages="$EFA_HUGEPAGES_2MI"',
        "fi",
        "reserved=$(cat /proc/sys/vm/nr_hugepages)",
        'if [ "$reserved" -lt "$EFA_HUGEPAGES_2MI" ]; then',
        '  echo "only $reserved of $EFA_HUGEPAGES_2MI 2 MiB huge pages could be reserved" >&2',
        "  exit 1",
        "fi",
    ]


def node_script(instance_type: InstanceType) -> str | None:
    """The shell part, run by cloud-init before nodeadm starts containerd and kubelet: locked
    memory on GPU nodes, huge pages on EFA nodes; None when the type needs neither."""
    sections = []
    if instance_type.is_gpu:
        sections.append(memlock_section())
    if instance_type.supports_efa:
        sections.append(hugepages_section(EFA_NODE_HUGEPAGES))
    if not sections:
        return None
    lines = ["#!/bin/bash", "set -o errexit -o nounset -o pipefail"]
    for section in sections:
        lines += section
    return "\n".join([*lines, ""])


def node_user_data(instance_type: InstanceType) -> str | None:
    """The MIME archive for `instance_type`, or None when its nodes need nothing beyond EKS's own."""
    parts: list[tuple[str, str]] = []
    if instance_type.local_nvme_disks:
        parts.append((NODECONFIG_CONTENT_TYPE, node_config()))
    script = node_script(instance_type)
    if script:
        parts.append((SHELL_CONTENT_TYPE, script))
    if not parts:
        return None
    lines = ["MIME-Version: 1.0", f'Content-Type: multipart/mixed; boundary="{BOUNDARY}"', ""]
    for content_type, body in parts:
        lines += [f"--{BOUNDARY}", f"Content-Type: {content_type}", "", body]
    lines += [f"--{BOUNDARY}--", ""]
    return "\n".join(lines)
