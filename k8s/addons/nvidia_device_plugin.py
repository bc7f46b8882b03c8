"""NVIDIA device plugin: advertises nvidia.com/gpu on GPU nodes so pods can request GPUs.

As NVIDIA's static DaemonSet for v0.19.3 runs it (../shared/contracts/nvidia-device-plugin-v0.19.3/):
unprivileged, no privilege escalation, every capability dropped, the kubelet's device-plugins
directory mounted (type Directory). Ours differs only where tests/k8s/addons/test_conformance_nvidia_device_plugin.py
declares it: our GPU node groups only (those with gpuAllocation devicePlugin), no API token,
RuntimeDefault seccomp.
"""

from __future__ import annotations

from config.environment import Environment
from config.kubernetes import GPU_TAINT_KEY, NODEGROUP_LABEL
from k8s.addons import AddOn
from k8s.pods.device_plugin import DevicePluginSpec, device_plugin_daemon_set
from k8s.pods.images import IMAGES
from k8s.pods.names import NVIDIA_DEVICE_PLUGIN
from k8s.pods.security import container_security_context


def nvidia_device_plugin(gpu_nodegroups: tuple[str, ...], *, image: str = IMAGES["nvidia-device-plugin"]) -> dict:
    if not gpu_nodegroups:
        raise ValueError("the NVIDIA device plugin needs at least one GPU node group")
    return device_plugin_daemon_set(DevicePluginSpec(
        name=NVIDIA_DEVICE_PLUGIN, image=image, node_label=NODEGROUP_LABEL, node_label_values=tuple(gpu_nodegroups),
        # Upstream's toleration: any nvidia.com/gpu NoSchedule taint, ours included.
        tolerate=((GPU_TAINT_KEY, "NoSchedule"),),
        # Upstream runs it as the image's user (root), with a writable root file system.
        security={**container_security_context(), "privileged": False, "readOnlyRootFilesystem": False,
                  "runAsNonRoot": False},
        run_as_root=True,
        address="nvidia-device-plugin-DaemonSet-c86b4425",
        plugins_dir_type="Directory",
        cpu_milli=50, memory_mib=128,
    ))


# Only the groups whose GPUs the plugin hands out: a gpuAllocation dra group's nodes run NVIDIA's GPU
# DRA driver instead (k8s/addons/nvidia_dra_driver.py), and never both ("silent oversubscription",
# https://docs.aws.amazon.com/eks/latest/userguide/device-management-nvidia-dra-device-plugin.html).
def plugin_groups(config: Environment) -> tuple[str, ...]:
    return tuple(g.name for g in config.gpu_groups("devicePlugin"))


ADDON = AddOn(name="nvidia-device-plugin", applies_to=lambda config: bool(plugin_groups(config)),
              objects=lambda config, values: [nvidia_device_plugin(plugin_groups(config))])
