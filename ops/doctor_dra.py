"""`ops doctor`'s rows for the EFA DRA driver: what it has published, node by node.

On each node of a group with `efaAllocation: dra`, the aws-dranet driver publishes the node's EFA
devices as ResourceSlices (resource.k8s.io/v1) of driver `dra.net` (config/kubernetes.py
DRANET_DRIVER; the chart's DeviceClass selects `device.driver == "dra.net"`:
../shared/contracts/aws-dranet-chart-v1.0.0/templates-deviceclass.yaml). The pods' claims can be
allocated only from those, so each DRA node must show as many EFA devices as the instance table has
EFA interfaces. An EFA device is one the chart's DeviceClass selects: attribute `pciDevice` of the
driver's domain (dranet v1.2.0 pkg/apis/attributes.go AttrPCIDevice = "dra.net/pciDevice") equal to
"Elastic Fabric Adapter (EFA)".

Never both agents on a node (EKS User Guide, device-management-efa: "The two mechanisms cannot coexist
on the same node. Doing so can cause silent oversubscription"): a DRA node advertising the EFA
extended resource fails its allocatable row (ops/doctor.py); a device-plugin node with `dra.net`
ResourceSlices fails here.
"""

from __future__ import annotations

from typing import Any, Iterable

from config import Environment
from config.kubernetes import DRANET_DRIVER, EFA_DRA
from ops.checks import FAIL, PASS, Check
from ops.kube_reads import list_objects

EFA_PCI_DEVICE_ATTRIBUTE = "pciDevice"
EFA_PCI_DEVICE = "Elastic Fabric Adapter (EFA)"


def driver_slices(api_client: Any) -> dict[str, list[dict]]:
    """node name -> the ResourceSlices the DRA driver published for it; {} where the cluster serves
    no resource.k8s.io/v1 (Kubernetes before 1.34)."""
    found = list_objects(api_client, "resource.k8s.io", "v1", "resourceslices",
                         f"list the ResourceSlices of {DRANET_DRIVER}", field_selector=f"spec.driver={DRANET_DRIVER}")
    by_node: dict[str, list[dict]] = {}
    for item in found:
        spec = item.get("spec") or {}
        if spec.get("driver") == DRANET_DRIVER and spec.get("nodeName"):
            by_node.setdefault(spec["nodeName"], []).append(item)
    return by_node


def efa_devices(slices: Iterable[dict]) -> int:
    """EFA devices in a node's slices, counting each pool at its newest generation only: a driver
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
        count += sum(_is_efa(d) for d in s["spec"].get("devices") or [])
    return count


def _is_efa(device: dict) -> bool:
    attributes = device.get("attributes") or {}
    # An attribute name without a domain is in the driver's own: both spellings name the same one.
    value = attributes.get(f"{DRANET_DRIVER}/{EFA_PCI_DEVICE_ATTRIBUTE}") or attributes.get(EFA_PCI_DEVICE_ATTRIBUTE) or {}
    return value.get("string") == EFA_PCI_DEVICE


def rows(env: Environment, nodes_by_group: dict[str, list], api_client: Any) -> list[Check]:
    """One row per node of a DRA group, and one per device-plugin node where the driver runs too."""
    dra, plugin = env.efa_groups(EFA_DRA), env.efa_groups("devicePlugin")
    if not dra and not plugin:
        return []
    slices = driver_slices(api_client)
    out = []
    for group in dra:
        for node in nodes_by_group.get(group.name, []):
            out.append(dra_node_row(node.metadata.name, group.instance_type, slices.get(node.metadata.name, [])))
    for group in plugin:
        for node in nodes_by_group.get(group.name, []):
            name = node.metadata.name
            if name in slices:
                out.append(Check(f"dra {name}", FAIL, (
                    f"the DRA driver ({DRANET_DRIVER}) publishes {efa_devices(slices[name])} EFA device(s) on this "
                    f"node of device-plugin group {group.name}: both EFA agents run here and may hand out the same "
                    "interfaces; keep the DRA driver to efaAllocation: dra groups")))
    return out


def dra_node_row(node: str, instance: Any, slices: list[dict]) -> Check:
    row = f"dra {node}"
    if not slices:
        return Check(row, FAIL, f"no ResourceSlice of driver {DRANET_DRIVER} for this node: its pods' EFA claims "
                                f"cannot be allocated (is the aws-dranet pod Ready here? it needs NRI in containerd)")
    count = efa_devices(slices)
    if count != instance.efa_interfaces:
        return Check(row, FAIL, f"{count} EFA device(s) in ResourceSlices of {DRANET_DRIVER}, expected "
                                f"{instance.efa_interfaces} on {instance.name}")
    return Check(row, PASS, f"{count} EFA devices published by {DRANET_DRIVER} ({len(slices)} ResourceSlice(s))")
