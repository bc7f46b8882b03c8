"""How a pod on a node group gets its devices. GPUs by the group's `gpuAllocation`: from the NVIDIA
device plugin (the extended resource nvidia.com/gpu) or from NVIDIA's GPU DRA driver. EFA interfaces
by its `efaAllocation`: from the EFA device plugin (vpc.amazonaws.com/efa) or from the EFA DRA driver.
Every DRA device of a pod comes from one ResourceClaim made from the group's template.

Training pods, the GPU checks and the NCCL test workers all take their devices from here, so a node
that passes validation can schedule training pods on every path.

On a DRA group the container requests no extended resource of a device that DRA hands out: nobody
advertises it there, so the request would leave the pod Pending forever.

EFA through DRA with GPUs on the device plugin (`efa-<group>`): the allocator cannot align GPUs and
EFA interfaces by PCIe root (a `matchAttribute` constraint spans devices of one claim, and a
device-plugin GPU is not a DRA device; EKS: topology-aware pairing needs "the NVIDIA or Neuron DRA
drivers", device-management-efa.html). Both through DRA (`devices-<group>`): one claim holds, per
PCIe root of the node, a GPU request and an EFA request constrained to share the standard attribute
resource.kubernetes.io/pcieRoot, which both drivers publish for every device (dranet v1.2.0
pkg/inventory/db.go; kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1 cmd/gpu-kubelet-plugin/deviceinfo.go
and nvlib.go). One constraint over all requests would be unsatisfiable: the devices sit on
different roots. It is one template, not an extra GPU template beside `efa-<group>`, because a
constraint relates requests of one claim only; it gets its own name because it is no longer EFA only.

Our pods take every device of their node, so on either path they hold all of them whatever the
allocator picks, and aws-ofi-nccl pairs each GPU with its nearest interfaces at run time from the
PCIe tree. Allocation-time alignment matters to pods smaller than a node.
"""

from __future__ import annotations

from config.environment import Nodegroup
from config.instance_types import PCIE_ROOT_LAYOUTS
from config.kubernetes import (
    DEVICES_CLAIM, EFA_CLAIM, EFA_DEVICE_CLASS, EFA_DRA, EFA_RESOURCE, GPU_DEVICE_CLASS, GPU_DRA, GPU_RESOURCE,
    PCIE_ROOT_ATTRIBUTE, TRAINING_NAMESPACE, devices_claim_template_name, efa_claim_template_name,
)
from k8s.pods.resources import container_resources

# ExactCount rather than All everywhere: Kueue refuses claims with allocationMode All (kueue v0.19.2
# pkg/dra/claims.go), and the counts are the instance-type table's, the device plugin path's numbers.
EXACT = "ExactCount"


def gpus_on_dra(group: Nodegroup) -> bool:
    return group.gpu_allocation == GPU_DRA


def claim_name(group: Nodegroup) -> str | None:
    """The pod's claim on `group`, or None where every device is an extended resource."""
    if gpus_on_dra(group):
        return DEVICES_CLAIM
    return EFA_CLAIM if group.efa_path == EFA_DRA else None


def claim_template_name(group: Nodegroup) -> str:
    return devices_claim_template_name(group.name) if gpus_on_dra(group) else efa_claim_template_name(group.name)


def device_resources(group: Nodegroup, *, cpu: str, memory: str) -> dict:
    """The container's requests and limits on `group` (resources.container_resources), with the
    devices DRA hands out named by the group's claim instead of requested as extended resources."""
    resources = container_resources(group.instance_type, cpu=cpu, memory=memory)
    on_dra = [r for r, dra in ((GPU_RESOURCE, gpus_on_dra(group)), (EFA_RESOURCE, group.efa_path == EFA_DRA)) if dra]
    for side in ("requests", "limits"):
        for resource in on_dra:
            del resources[side][resource]
    if claim := claim_name(group):
        resources["claims"] = [{"name": claim}]
    return resources


def pod_resource_claims(group: Nodegroup) -> dict:
    """The pod-spec fields that bind the claim device_resources names: {} off DRA groups."""
    if not (claim := claim_name(group)):
        return {}
    return {"resourceClaims": [{"name": claim, "resourceClaimTemplateName": claim_template_name(group)}]}


def claim_template(group: Nodegroup, namespace: str = TRAINING_NAMESPACE) -> dict:
    """The ResourceClaimTemplate the pods of a DRA group claim from."""
    return devices_claim_template(group, namespace) if gpus_on_dra(group) else efa_claim_template(group, namespace)


def _template(name: str, namespace: str, devices: dict) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"spec": {"devices": devices}}}


def _request(name: str, device_class: str, count: int) -> dict:
    return {"name": name, "exactly": {"deviceClassName": device_class, "allocationMode": EXACT, "count": count}}


def efa_claim_template(group: Nodegroup, namespace: str = TRAINING_NAMESPACE) -> dict:
    """Every EFA interface of one node of `group`, by count."""
    if group.efa_path != EFA_DRA or gpus_on_dra(group):
        raise ValueError(f"node group {group.name} does not take EFA alone through DRA")
    return _template(efa_claim_template_name(group.name), namespace,
                     {"requests": [_request(EFA_CLAIM, EFA_DEVICE_CLASS, group.instance_type.efa_interfaces)]})


def devices_claim_template(group: Nodegroup, namespace: str = TRAINING_NAMESPACE) -> dict:
    """Every GPU and EFA device of one node of `group`, as one GPU request `gpu-<i>` and one EFA
    request `efa-<i>` per PCIe root i, each pair constrained to one root (PCIE_ROOT_LAYOUTS)."""
    if not gpus_on_dra(group) or group.efa_path != EFA_DRA:
        raise ValueError(f"node group {group.name} does not take both GPUs and EFA through DRA")
    instance = group.instance_type
    layout = PCIE_ROOT_LAYOUTS.get(instance.name)
    if layout is None:
        raise ValueError(f"no verified PCIe root layout for {instance.name} (config/instance_types.py)")
    roots = instance.gpus // layout.gpus_per_root
    requests, constraints = [], []
    for i in range(roots):
        requests += [_request(f"gpu-{i}", GPU_DEVICE_CLASS, layout.gpus_per_root),
                     _request(f"efa-{i}", EFA_DEVICE_CLASS, layout.efa_per_root)]
        constraints.append({"requests": [f"gpu-{i}", f"efa-{i}"], "matchAttribute": PCIE_ROOT_ATTRIBUTE})
    return _template(devices_claim_template_name(group.name), namespace,
                     {"requests": requests, "constraints": constraints})
