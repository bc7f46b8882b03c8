"""The launch template data every managed node group gets whatever cdk.json says: the root volume
its instance type needs and the instance metadata options. cdk_constructs/node_launch_template.py
writes them; preflight (ops/redeploy_nodegroups.py) compares them with a deployed template, since a
release that changes them makes a new launch template version and rolls every group's nodes."""

from __future__ import annotations

from config.instance_types import InstanceType

# AL2023 EKS AMIs boot from /dev/xvda.
ROOT_DEVICE = "/dev/xvda"
ROOT_VOLUME_TYPE = "gp3"
# The root volume holds the OS; with NVMe instance storage, nodeadm moves kubelet, containerd
# (images) and pod logs onto the RAID0 array. Without it, GPU images of tens of GiB and the NVIDIA
# AMI (~30 GiB) share the root volume, so it is large and faster than gp3's baseline.
OS_ROOT_VOLUME = {"root_volume_gib": 100}  # gp3 baseline: 3,000 IOPS, 125 MB/s
GPU_IMAGES_ROOT_VOLUME = {"root_volume_gib": 500, "root_volume_iops": 6000, "root_volume_throughput_mbps": 500}
GP3_BASELINE = {"root_volume_iops": 3000, "root_volume_throughput_mbps": 125}

# One hop: IMDS answers the host (and hostNetwork pods) but drops its reply to any other pod, so
# no pod can take the node role's credentials (Amazon EKS Best Practices Guide, "Restrict access
# to the instance profile assigned to the worker node"). Pods get AWS permissions from EKS Pod
# Identity; add-ons that used to ask IMDS for their region are told it (config/addons.py).
IMDS_HOP_LIMIT = 1
METADATA_OPTIONS = {"HttpEndpoint": "enabled", "HttpTokens": "required", "HttpPutResponseHopLimit": IMDS_HOP_LIMIT}


def root_volume(instance_type: InstanceType) -> dict[str, int]:
    """NodeLaunchTemplate's root-volume arguments for `instance_type`."""
    if instance_type.is_gpu and not instance_type.local_nvme_disks:
        return dict(GPU_IMAGES_ROOT_VOLUME)
    return dict(OS_ROOT_VOLUME)
