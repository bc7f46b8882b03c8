"""NVIDIA's GPU DRA driver, on environments with a GPU node group set to `"gpuAllocation": "dra"`.

The objects of chart dra-driver-nvidia-gpu 0.4.1 (release name dra-driver-nvidia-gpu, our
kube-system) that GPU allocation needs, with EKS's install values (`resources.computeDomains.enabled=false`,
`gpuResourcesEnabledOverride=true`: device-management-nvidia-dra-device-plugin): the kubelet
plugin's ServiceAccount, ClusterRole and binding, its DaemonSet (k8s/pods/nvidia_dra.py) on the
gpuAllocation dra groups' nodes only, and the DeviceClass gpu.nvidia.com. The pods' claim templates
(GPU and EFA paired by PCIe root) come with the EFA DRA driver (k8s/addons/aws_dranet.py,
k8s/pods/devices.py). The NVIDIA device plugin keeps the other GPU groups
(k8s/addons/nvidia_device_plugin.py), so no node runs both.
"""

from __future__ import annotations

from config.environment import Environment
from config.kubernetes import GPU_DEVICE_CLASS, GPU_DRA, GPU_RESOURCE, KUBE_SYSTEM_NAMESPACE, NVIDIA_DRA_DRIVER, NVIDIA_GPU_DRIVER
from k8s.addons import AddOn
from k8s.pods.images import IMAGES
from k8s.pods.nvidia_dra import SERVICE_ACCOUNT, gpu_kubelet_plugin_daemon_set
from k8s.pods.workload import cluster_identity

CLUSTER_ROLE = f"{NVIDIA_DRA_DRIVER}-clusterrole-kubeletplugin"
CLUSTER_ROLE_BINDING = f"{NVIDIA_DRA_DRIVER}-clusterrole-binding-kubeletplugin"
# templates/rbac-kubeletplugin.yaml less its computedomains rule: gpu-kubelet-plugin never reads
# ComputeDomains (nothing under cmd/gpu-kubelet-plugin names them at v0.4.1), and their CRDs are
# not installed here.
CLUSTER_RULES = [
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
     "verbs": ["get", "list", "watch", "create", "update", "delete"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "update"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
]


def gpu_device_class() -> dict:
    """templates/deviceclass-gpu.yaml at resource.k8s.io/v1: whole GPUs of the driver, not MIG slices."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": GPU_DEVICE_CLASS},
            "spec": {"selectors": [{"cel": {"expression": (
                f"device.driver == '{NVIDIA_GPU_DRIVER}' && device.attributes['{NVIDIA_GPU_DRIVER}'].type == 'gpu'")}}],
                "extendedResourceName": GPU_RESOURCE}}


def nvidia_dra_objects(config: Environment) -> list[dict]:
    if not config.gpu_groups(GPU_DRA):
        raise ValueError("NVIDIA's GPU DRA driver needs at least one gpuAllocation dra node group")
    return [
        *cluster_identity(SERVICE_ACCOUNT, KUBE_SYSTEM_NAMESPACE, CLUSTER_RULES, role=CLUSTER_ROLE,
                          binding=CLUSTER_ROLE_BINDING),
        gpu_device_class(),
        gpu_kubelet_plugin_daemon_set(IMAGES[NVIDIA_DRA_DRIVER]),
    ]


ADDON = AddOn(name="nvidia-dra-driver", applies_to=lambda config: bool(config.gpu_groups(GPU_DRA)),
              objects=lambda config, values: nvidia_dra_objects(config))
