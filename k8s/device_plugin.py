"""What every device-plugin chart shares: a node-critical DaemonSet in kube-system, on the node
groups that have the device, whose container registers with the kubelet through its
device-plugins directory. Each plugin says only how it differs (image, extra mounts, privileges,
host network, which nodes) in a DevicePluginSpec; the rest is here once.
"""

from __future__ import annotations

from dataclasses import dataclass

import cdk8s_plus_27 as kplus
from constructs import Construct

from k8s.base import (
    ProjectChart, drop_all_capabilities, patch_pod_spec, resources, runtime_default_seccomp, select_own_pods,
    taint_effect,
)
from k8s.common import KUBE_SYSTEM_NAMESPACE, KUBELET_DEVICE_PLUGINS

_HOST_PATH_TYPES = {"": None, "Directory": kplus.HostPathVolumeType.DIRECTORY,
                    "DirectoryOrCreate": kplus.HostPathVolumeType.DIRECTORY_OR_CREATE}


@dataclass(frozen=True)
class HostMount:
    """A host directory the plugin sees at the same path."""

    name: str
    path: str
    type: str = ""  # "", "Directory" or "DirectoryOrCreate", as the upstream manifest says


@dataclass(frozen=True)
class DevicePluginSpec:
    name: str
    image: str
    node_label: kplus.NodeLabelQuery  # the nodes that have the device
    # The taints of those nodes, as (key, effect) tolerated with operator Exists; effect "" is any.
    tolerate: tuple[tuple[str, str], ...]
    security: kplus.ContainerSecurityContextProps
    drop_all_capabilities: bool = False  # cdk8s-plus has no "ALL" capability to say it with
    # The kubelet's device-plugins directory is always mounted; these come on top.
    plugins_dir_type: str = ""
    extra_mounts: tuple[HostMount, ...] = ()
    host_network: bool = False
    cpu_milli: int = 10
    memory_mib: int = 64
    namespace: str = KUBE_SYSTEM_NAMESPACE


class DevicePluginChart(ProjectChart):
    """Base of the device-plugin charts; not an add-on itself."""

    def __init__(self, scope: Construct, id: str, *, spec: DevicePluginSpec):
        super().__init__(scope, id, namespace=spec.namespace)
        if spec.plugins_dir_type not in _HOST_PATH_TYPES or any(m.type not in _HOST_PATH_TYPES for m in spec.extra_mounts):
            raise ValueError(f"{spec.name}: host path types are one of {sorted(_HOST_PATH_TYPES)}")
        run_as_root = spec.security.ensure_non_root is False
        self.daemon_set = kplus.DaemonSet(
            self, "DaemonSet", metadata=self.meta(spec.name),
            # Device plugins talk to the kubelet over its socket, never to the API server.
            automount_service_account_token=False,
            host_network=spec.host_network,
            security_context=kplus.PodSecurityContextProps(ensure_non_root=not run_as_root),
            select=False,
        )
        select_own_pods(self.daemon_set, spec.name)
        self.container = self.daemon_set.add_container(
            name=spec.name, image=spec.image,
            image_pull_policy=kplus.ImagePullPolicy.IF_NOT_PRESENT,  # pinned tags
            resources=resources(spec.cpu_milli, spec.memory_mib),
            security_context=spec.security,
        )
        for index, mount in enumerate((HostMount("device-plugin", KUBELET_DEVICE_PLUGINS, spec.plugins_dir_type),
                                       *spec.extra_mounts)):
            volume = kplus.Volume.from_host_path(self, f"HostPath{index}", mount.name, path=mount.path,
                                                 type=_HOST_PATH_TYPES[mount.type])
            self.container.mount(mount.path, volume)
        self.daemon_set.scheduling.attract(kplus.Node.labeled(spec.node_label))
        for key, effect in spec.tolerate:
            self.daemon_set.scheduling.tolerate(kplus.Node.tainted(kplus.NodeTaintQuery.exists(
                key, effect=taint_effect(effect) if effect else None)))
        if spec.drop_all_capabilities:
            drop_all_capabilities(self.daemon_set)
        # Evicting a plugin takes its devices out of scheduling on that node.
        patch_pod_spec(self.daemon_set, "priorityClassName", "system-node-critical")
        runtime_default_seccomp(self.daemon_set)

