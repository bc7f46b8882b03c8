"""EFA device plugin: advertises vpc.amazonaws.com/efa on EFA nodes and hands pods the devices.

As the aws/eks-charts chart v0.5.30 renders it with its default values (plugin v0.5.20;
../shared/contracts/aws-efa-k8s-device-plugin-chart-v0.5.30/values.yaml and templates-daemonset.yaml):
privileged, root, in the host's network namespace (it enumerates the node's EFA interfaces), with
the kubelet's device-plugins directory, /dev/infiniband/ and /opt/aws/neuron/ from the host.
Ours differs only where tests/k8s/test_conformance_efa_device_plugin.py declares it: our EFA
node groups by label, our GPU taint tolerated, RuntimeDefault seccomp stated.
"""

from __future__ import annotations

from dataclasses import dataclass

import cdk8s_plus_27 as kplus
from constructs import Construct

from config.environment import Environment
from config.kubernetes import EFA_LABEL, GPU_TAINT_KEY
from k8s.common import EFA_DEVICE_PLUGIN, efa_device_plugin_image
from k8s.device_plugin import DevicePluginChart, DevicePluginSpec, HostMount


@dataclass(frozen=True)
class EfaDevicePluginProps:
    image: str

    @classmethod
    def from_config(cls, config: Environment) -> "EfaDevicePluginProps":
        # The image lives in the EKS add-on registry of the cluster's own region.
        return cls(image=efa_device_plugin_image(config.region))


class EfaDevicePluginChart(DevicePluginChart):
    component = "efa-device-plugin"
    addon = "efa-device-plugin"

    @classmethod
    def applies_to(cls, config: Environment) -> bool:
        return any(g.instance_type.supports_efa for g in config.gpu_nodegroups)

    @classmethod
    def for_environment(cls, scope, config, values) -> "EfaDevicePluginChart":
        return cls(scope, cls.addon, props=EfaDevicePluginProps.from_config(config))

    def __init__(self, scope: Construct, id: str, *, props: EfaDevicePluginProps):
        super().__init__(scope, id, spec=DevicePluginSpec(
            name=EFA_DEVICE_PLUGIN, image=props.image,
            node_label=kplus.NodeLabelQuery.is_(EFA_LABEL, "true"),
            # The chart's own toleration, and our EFA groups are GPU groups carrying the GPU taint.
            tolerate=(("CriticalAddonsOnly", ""), (GPU_TAINT_KEY, "NoSchedule")),
            security=kplus.ContainerSecurityContextProps(
                privileged=True, allow_privilege_escalation=True, ensure_non_root=False, user=0,
                read_only_root_filesystem=False),
            extra_mounts=(HostMount("infiniband-volume", "/dev/infiniband/"),
                          HostMount("neuron-tools", "/opt/aws/neuron/", "DirectoryOrCreate")),
            host_network=True,
            cpu_milli=10, memory_mib=64,
        ))
