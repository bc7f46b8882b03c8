"""`ops doctor`'s rows for the DRA drivers: what each has published, node by node.

EFA (`efaAllocation: dra`): on each node of such a group, the aws-dranet driver publishes the node's
EFA devices as ResourceSlices (resource.k8s.io/v1) of driver `dra.net` (config/kubernetes.py
DRANET_DRIVER; the chart's DeviceClass selects `device.driver == "dra.net"`:
../shared/contracts/aws-dranet-chart-v1.0.0/templates-deviceclass.yaml). The pods' claims can be
allocated only from those, so each DRA node must show as many EFA devices as the instance table has
EFA interfaces. An EFA device is one the chart's DeviceClass selects: attribute `pciDevice` of the
driver's domain (dranet v1.2.0 pkg/apis/attributes.go AttrPCIDevice = "dra.net/pciDevice") equal to
"Elastic Fabric Adapter (EFA)".

GPUs (`gpuAllocation: dra`): NVIDIA's gpu-kubelet-plugin publishes the node's GPUs as ResourceSlices
of driver `gpu.nvidia.com` (kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1 cmd/gpu-kubelet-plugin/main.go
DriverName), each whole GPU with attribute `type` "gpu" (deviceinfo.go; the DeviceClass gpu.nvidia.com
selects `device.attributes['gpu.nvidia.com'].type == 'gpu'`). Each such node must show the instance
table's GPU count.

Never both agents of a device on a node (EKS User Guide, device-management-efa: "The two mechanisms
cannot coexist on the same node. Doing so can cause silent oversubscription"; the NVIDIA page says
the same of its DRA driver and device plugin): a DRA node advertising the extended resource fails
its allocatable row (ops/doctor.py); a device-plugin node with the DRA driver's ResourceSlices fails here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from config import Environment
from config.kubernetes import AWS_DRANET, DRANET_DRIVER, EFA_DRA, GPU_DRA, NVIDIA_GPU_DRIVER, TRAINING_NAMESPACE
from k8s.pods.devices import claim_template_name
from k8s.pods.names import NVIDIA_DEVICE_PLUGIN
from k8s.pods.nvidia_dra import KUBELET_PLUGIN as NVIDIA_KUBELET_PLUGIN
from ops.checks import FAIL, PASS, Check
from ops.kube_reads import list_objects

EFA_PCI_DEVICE_ATTRIBUTE = "pciDevice"
EFA_PCI_DEVICE = "Elastic Fabric Adapter (EFA)"
GPU_TYPE_ATTRIBUTE = "type"
GPU_TYPE = "gpu"  # a whole GPU; MIG slices are "mig"


def _attribute(device: dict, driver: str, name: str) -> str | None:
    attributes = device.get("attributes") or {}
    # An attribute name without a domain is in the driver's own: both spellings name the same one.
    value = attributes.get(f"{driver}/{name}") or attributes.get(name) or {}
    return value.get("string")


@dataclass(frozen=True)
class Driver:
    """One DRA driver's side of the doctor: whose slices, which devices count, what a node needs."""

    name: str  # spec.driver of its ResourceSlices
    agent: str  # its DaemonSet, named in a failure
    what: str  # "EFA" or "GPU"
    is_device: Callable[[dict], bool]
    expected: Callable[[Any], int]  # from the instance type
    hint: str


EFA = Driver(DRANET_DRIVER, AWS_DRANET, "EFA",
             lambda d: _attribute(d, DRANET_DRIVER, EFA_PCI_DEVICE_ATTRIBUTE) == EFA_PCI_DEVICE,
             lambda instance: instance.efa_interfaces, "it needs NRI in containerd")
GPU = Driver(NVIDIA_GPU_DRIVER, NVIDIA_KUBELET_PLUGIN, "GPU",
             lambda d: _attribute(d, NVIDIA_GPU_DRIVER, GPU_TYPE_ATTRIBUTE) == GPU_TYPE,
             lambda instance: instance.gpus, "it needs the host's NVIDIA driver under /")


def driver_slices(api_client: Any, driver: str = DRANET_DRIVER) -> dict[str, list[dict]]:
    """node name -> the ResourceSlices `driver` published for it; {} where the cluster serves
    no resource.k8s.io/v1 (Kubernetes before 1.34)."""
    found = list_objects(api_client, "resource.k8s.io", "v1", "resourceslices",
                         f"list the ResourceSlices of {driver}", field_selector=f"spec.driver={driver}")
    by_node: dict[str, list[dict]] = {}
    for item in found:
        spec = item.get("spec") or {}
        if spec.get("driver") == driver and spec.get("nodeName"):
            by_node.setdefault(spec["nodeName"], []).append(item)
    return by_node


def devices(slices: Iterable[dict], is_device: Callable[[dict], bool]) -> int:
    """Devices in a node's slices, counting each pool at its newest generation only: a driver
    replaces a pool's slices by raising the generation, and old ones may linger until deleted."""
    newest: dict[str, int] = {}
    slices = list(slices)
    for s in slices:
        pool = s["spec"].get("pool") or {}
        newest[pool.get("name", "")] = max(newest.get(pool.get("name", ""), 0), int(pool.get("generation", 0)))
    count = 0
    for s in slices:
        pool = s["spec"].get("pool") or {}
        if int(pool.get("generation", 0)) != newest[pool.get("name", "")]:
            continue
        count += sum(is_device(d) for d in s["spec"].get("devices") or [])
    return count


def efa_devices(slices: Iterable[dict]) -> int:
    return devices(slices, EFA.is_device)


def gpu_path_row(group: Any) -> Check:
    """How a GPU group's pods get their GPUs."""
    if group.gpu_allocation == GPU_DRA:
        how = (f"DRA driver ({NVIDIA_KUBELET_PLUGIN}): pods claim them with their EFA devices, paired by PCIe "
               f"root, from ResourceClaimTemplate {TRAINING_NAMESPACE}/{claim_template_name(group)}")
    else:
        how = f"device plugin ({NVIDIA_DEVICE_PLUGIN}): pods request nvidia.com/gpu"
    return Check(f"gpu {group.name}", PASS, how)


def rows(env: Environment, nodes_by_group: dict[str, list], api_client: Any) -> list[Check]:
    """Per DRA driver in use: one row per node of its DRA groups, and one per device-plugin node where
    it publishes too. The GPU path of every GPU group where any group takes GPUs through DRA."""
    out: list[Check] = []
    gpu_dra = env.gpu_groups(GPU_DRA)
    if gpu_dra:
        out += [gpu_path_row(g) for g in env.gpu_nodegroups]
    sides = [(EFA, env.efa_groups(EFA_DRA), env.efa_groups("devicePlugin"))]
    if gpu_dra:
        sides.append((GPU, gpu_dra, env.gpu_groups("devicePlugin")))
    for driver, dra, plugin in sides:
        if dra or plugin:
            out += _driver_rows(driver, dra, plugin, nodes_by_group, driver_slices(api_client, driver.name))
    return out


def _driver_rows(driver: Driver, dra: tuple, plugin: tuple, nodes_by_group: dict[str, list],
                 slices: dict[str, list[dict]]) -> list[Check]:
    prefix = "dra" if driver is EFA else "dra gpu"
    out = []
    for group in dra:
        for node in nodes_by_group.get(group.name, []):
            name = node.metadata.name
            out.append(node_row(driver, f"{prefix} {name}", group.instance_type, slices.get(name, [])))
    for group in plugin:
        for node in nodes_by_group.get(group.name, []):
            name = node.metadata.name
            if name in slices:
                out.append(Check(f"{prefix} {name}", FAIL, (
                    f"the DRA driver ({driver.name}) publishes {devices(slices[name], driver.is_device)} "
                    f"{driver.what} device(s) on this node of device-plugin group {group.name}: both {driver.what} "
                    f"agents run here and may hand out the same devices; keep the DRA driver to its DRA groups")))
    return out


def node_row(driver: Driver, row: str, instance: Any, slices: list[dict]) -> Check:
    if not slices:
        return Check(row, FAIL, f"no ResourceSlice of driver {driver.name} for this node: its pods' "
                                f"{driver.what} claims cannot be allocated (is the {driver.agent} pod Ready here? "
                                f"{driver.hint})")
    count, want = devices(slices, driver.is_device), driver.expected(instance)
    if count != want:
        return Check(row, FAIL, f"{count} {driver.what} device(s) in ResourceSlices of {driver.name}, expected "
                                f"{want} on {instance.name}")
    return Check(row, PASS, f"{count} {driver.what} devices published by {driver.name} ({len(slices)} ResourceSlice(s))")


def dra_node_row(node: str, instance: Any, slices: list[dict]) -> Check:
    return node_row(EFA, f"dra {node}", instance, slices)
