"""NVIDIA device plugin: advertises nvidia.com/gpu on GPU nodes so pods can request GPUs."""

from __future__ import annotations

from dataclasses import dataclass

import cdk8s_plus_27 as kplus
from constructs import Construct

from config.environment import Environment
from config.kubernetes import NODEGROUP_LABEL
from k8s.base import ProjectChart, drop_all_capabilities, hardened, patch_pod_spec, resources, select_own_pods, tolerate_gpu_taint
from k8s.common import IMAGES, KUBELET_DEVICE_PLUGINS



@dataclass(frozen=True)
class NvidiaDevicePluginProps:
    gpu_nodegroups: tuple[str, ...]
    image: str = IMAGES["nvidia-device-plugin"]
    namespace: str = "kube-system"

    @classmethod
    def from_config(cls, config: Environment) -> "NvidiaDevicePluginProps":
        return cls(gpu_nodegroups=tuple(g.name for g in config.gpu_nodegroups))


class NvidiaDevicePluginChart(ProjectChart):
    component = "nvidia-device-plugin"

    def __init__(self, scope: Construct, id: str, *, props: NvidiaDevicePluginProps):
        super().__init__(scope, id, namespace=props.namespace)
        if not props.gpu_nodegroups:
            raise ValueError("NvidiaDevicePluginChart needs at least one GPU node group")
        name = "nvidia-device-plugin"
        self.daemon_set = kplus.DaemonSet(
            self, "DaemonSet", metadata=self.meta(name),
            # The plugin talks to the kubelet over a socket, never to the API server.
            automount_service_account_token=False,
            # It must write its socket into a root-owned host directory.
            security_context=kplus.PodSecurityContextProps(ensure_non_root=False),
            select=False,
        )
        select_own_pods(self.daemon_set, name)
        plugins_dir = kplus.Volume.from_host_path(self, "DevicePlugins", "device-plugin", path=KUBELET_DEVICE_PLUGINS)
        container = self.daemon_set.add_container(
            name=name, image=props.image,
            image_pull_policy=kplus.ImagePullPolicy.IF_NOT_PRESENT,  # pinned tag
            env_variables={
                # A node whose driver is not ready yet should not crash-loop the plugin.
                "FAIL_ON_INIT_ERROR": kplus.EnvValue.from_value("false"),
            },
            resources=resources(50, 128),
            security_context=hardened(ensure_non_root=False),
        )
        container.mount(KUBELET_DEVICE_PLUGINS, plugins_dir)
        # Only GPU node groups, selected by the label our node groups carry.
        self.daemon_set.scheduling.attract(kplus.Node.labeled(
            kplus.NodeLabelQuery.in_(NODEGROUP_LABEL, list(props.gpu_nodegroups))))
        tolerate_gpu_taint(self.daemon_set)
        # Evicting the plugin would make the node's GPUs disappear from scheduling.
        drop_all_capabilities(self.daemon_set)
        patch_pod_spec(self.daemon_set, "priorityClassName", "system-node-critical")

