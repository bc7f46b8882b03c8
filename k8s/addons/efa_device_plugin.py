"""EFA device plugin: advertises vpc.amazonaws.com/efa on EFA nodes and hands pods the devices.

As the aws/eks-charts chart v0.5.30 renders it with its default values (plugin v0.5.20;
../shared/contracts/aws-efa-k8s-device-plugin-chart-v0.5.30/values.yaml and templates-daemonset.yaml):
privileged, root, in the host's network namespace (it enumerates the node's EFA interfaces), with
the kubelet's device-plugins directory, /dev/infiniband/ and /opt/aws/neuron/ from the host.
Ours differs only where tests/k8s/addons/test_conformance_efa_device_plugin.py declares it: our EFA
node groups by label, our GPU taint tolerated, RuntimeDefault seccomp stated.
"""

from __future__ import annotations

from config.environment import Environment
from config.kubernetes import EFA_ALLOCATION_LABEL, EFA_DRA, EFA_LABEL, GPU_TAINT_KEY
from k8s.addons import AddOn
from k8s.pods.device_plugin import DevicePluginSpec, HostMount, device_plugin_daemon_set
from k8s.pods.images import efa_device_plugin_image
from k8s.pods.names import EFA_DEVICE_PLUGIN


def efa_device_plugin(image: str, *, avoid_dra_nodes: bool = False) -> dict:
    """`image`: efa_device_plugin_image of the cluster's region (the EKS add-on registry there).
    `avoid_dra_nodes`: the environment has EFA groups on the DRA driver, whose nodes the plugin must
    never run on (two allocators of one node's EFA devices oversubscribe them: EKS,
    device-management-efa.html). Only then is the rule written, so environments without DRA groups
    render the plugin as before."""
    daemon_set = device_plugin_daemon_set(DevicePluginSpec(
        name=EFA_DEVICE_PLUGIN, image=image, node_label=EFA_LABEL, node_label_values=("true",),
        # The chart's own toleration, and our EFA groups are GPU groups carrying the GPU taint.
        tolerate=(("CriticalAddonsOnly", ""), (GPU_TAINT_KEY, "NoSchedule")),
        security={"allowPrivilegeEscalation": True, "privileged": True, "readOnlyRootFilesystem": False,
                  "runAsNonRoot": False, "runAsUser": 0},
        run_as_root=True,
        address="efa-device-plugin-DaemonSet-c8343c87",
        extra_mounts=(HostMount("infiniband-volume", "/dev/infiniband/"),
                      HostMount("neuron-tools", "/opt/aws/neuron/", "DirectoryOrCreate")),
        host_network=True,
        cpu_milli=10, memory_mib=64,
    ))
    if avoid_dra_nodes:
        [term] = daemon_set["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        term["matchExpressions"].append({"key": EFA_ALLOCATION_LABEL, "operator": "NotIn", "values": [EFA_DRA]})
    return daemon_set


def efa_device_plugin_objects(config: Environment) -> list[dict]:
    return [efa_device_plugin(efa_device_plugin_image(config.region), avoid_dra_nodes=bool(config.efa_groups(EFA_DRA)))]


ADDON = AddOn(name="efa-device-plugin",
              applies_to=lambda config: bool(config.efa_groups("devicePlugin")),
              objects=lambda config, values: efa_device_plugin_objects(config))
