"""What every device plugin's DaemonSet shares: a node-critical pod in kube-system, on the node
groups that have the device, whose container registers with the kubelet through its
device-plugins directory. Each plugin says only how it differs (image, extra mounts, privileges,
host network, which nodes) in a DevicePluginSpec; the rest is here once.
"""

from __future__ import annotations

from dataclasses import dataclass

from k8s.pods.names import KUBE_SYSTEM_NAMESPACE, KUBELET_DEVICE_PLUGINS
from k8s.pods.resources import fixed_resources
from k8s.pods.security import RUNTIME_DEFAULT_SECCOMP
from k8s.pods.workload import container, daemon_set, host_path_volume, own_pods, pod_spec, required_node_affinity

HOST_PATH_TYPES = ("", "Directory", "DirectoryOrCreate")


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
    # The nodes that have the device: a node label and the values it may take.
    node_label: str
    node_label_values: tuple[str, ...]
    # The taints of those nodes, as (key, effect) tolerated with operator Exists; effect "" is any.
    tolerate: tuple[tuple[str, str], ...]
    # The container's securityContext, as the upstream manifest runs the plugin.
    security: dict
    run_as_root: bool
    address: str  # the pods' address label (k8s/pods/workload.py)
    # The kubelet's device-plugins directory is always mounted; these come on top.
    plugins_dir_type: str = ""
    extra_mounts: tuple[HostMount, ...] = ()
    host_network: bool = False
    cpu_milli: int = 10
    memory_mib: int = 64
    namespace: str = KUBE_SYSTEM_NAMESPACE

    def __post_init__(self):
        types = (self.plugins_dir_type, *(m.type for m in self.extra_mounts))
        if any(t not in HOST_PATH_TYPES for t in types):
            raise ValueError(f"{self.name}: host path types are one of {sorted(HOST_PATH_TYPES)}")
        if not self.node_label_values:
            raise ValueError(f"{self.name}: needs the node label values of the nodes with the device")


def device_plugin_daemon_set(spec: DevicePluginSpec) -> dict:
    mounts = (HostMount("device-plugin", KUBELET_DEVICE_PLUGINS, spec.plugins_dir_type), *spec.extra_mounts)
    plugin = container(name=spec.name, image=spec.image, resources=fixed_resources(spec.cpu_milli, spec.memory_mib),
                       security_context=spec.security,
                       volumeMounts=[{"name": m.name, "mountPath": m.path} for m in mounts])
    pod = pod_spec(
        containers=[plugin],
        # Device plugins talk to the kubelet over its socket, never to the API server.
        automount_token=False,
        security_context={"fsGroupChangePolicy": "Always", "runAsNonRoot": not spec.run_as_root,
                          # Privileged containers run Unconfined whatever the profile; it is stated for the rest.
                          "seccompProfile": dict(RUNTIME_DEFAULT_SECCOMP)},
        hostNetwork=spec.host_network,
        affinity=required_node_affinity(spec.node_label, list(spec.node_label_values)),
        tolerations=[{"key": key, "operator": "Exists", **({"effect": effect} if effect else {})}
                     for key, effect in spec.tolerate],
        volumes=[host_path_volume(m.name, m.path, m.type) for m in mounts],
        # Evicting a plugin takes its devices out of scheduling on that node.
        priorityClassName="system-node-critical",
    )
    return daemon_set(name=spec.name, namespace=spec.namespace, pod_labels=own_pods(spec.name, spec.address), pod=pod)
