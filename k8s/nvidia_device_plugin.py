"""NVIDIA device plugin: advertises nvidia.com/gpu on GPU nodes so pods can request GPUs.

As NVIDIA's static DaemonSet for v0.19.3 runs it (../shared/contracts/nvidia-device-plugin-v0.19.3/):
unprivileged, no privilege escalation, every capability dropped, the kubelet's device-plugins
directory mounted (type Directory). Ours differs only where tests/k8s/test_conformance_nvidia_device_plugin.py
declares it: our GPU node groups only, no API token, RuntimeDefault seccomp.
"""

from __future__ import annotations

from dataclasses import dataclass

import cdk8s_plus_27 as kplus
from constructs import Construct

from config.environment import Environment
from config.kubernetes import GPU_TAINT_KEY, NODEGROUP_LABEL
from k8s.common import IMAGES, NVIDIA_DEVICE_PLUGIN
from k8s.device_plugin import DevicePluginChart, DevicePluginSpec


@dataclass(frozen=True)
class NvidiaDevicePluginProps:
    gpu_nodegroups: tuple[str, ...]
    image: str = IMAGES["nvidia-device-plugin"]

    @classmethod
    def from_config(cls, config: Environment) -> "NvidiaDevicePluginProps":
        return cls(gpu_nodegroups=tuple(g.name for g in config.gpu_nodegroups))


class NvidiaDevicePluginChart(DevicePluginChart):
    component = "nvidia-device-plugin"
    addon = "nvidia-device-plugin"

    @classmethod
    def applies_to(cls, config: Environment) -> bool:
        return bool(config.gpu_nodegroups)

    @classmethod
    def for_environment(cls, scope, config, values) -> "NvidiaDevicePluginChart":
        return cls(scope, cls.addon, props=NvidiaDevicePluginProps.from_config(config))

    def __init__(self, scope: Construct, id: str, *, props: NvidiaDevicePluginProps):
        if not props.gpu_nodegroups:
            raise ValueError("NvidiaDevicePluginChart needs at least one GPU node group")
        super().__init__(scope, id, spec=DevicePluginSpec(
            name=NVIDIA_DEVICE_PLUGIN, image=props.image,
            node_label=kplus.NodeLabelQuery.in_(NODEGROUP_LABEL, list(props.gpu_nodegroups)),
            # Upstream's toleration: any nvidia.com/gpu NoSchedule taint, ours included.
            tolerate=((GPU_TAINT_KEY, "NoSchedule"),),
            security=kplus.ContainerSecurityContextProps(
                allow_privilege_escalation=False, ensure_non_root=False, read_only_root_filesystem=False),
            drop_all_capabilities=True,
            plugins_dir_type="Directory",
            cpu_milli=50, memory_mib=128,
        ))
