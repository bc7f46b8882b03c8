"""How a pod on a node group gets its devices: GPUs from the NVIDIA device plugin on every GPU
group, and EFA interfaces by the group's `efaAllocation`, either from the EFA device plugin
(the extended resource vpc.amazonaws.com/efa) or from the EFA DRA driver (a ResourceClaim from
the group's ResourceClaimTemplate).

Training pods, the GPU checks and the NCCL test workers all take their devices from here, so a node
that passes validation can schedule training pods on either path.

On a DRA group the container requests no vpc.amazonaws.com/efa: nobody advertises it there, so the
request would leave the pod Pending forever. GPUs stay on the device plugin, so the DRA allocator
cannot align GPUs and EFA interfaces by PCIe root (a `matchAttribute` constraint spans devices of
one claim, and a device-plugin GPU is not a DRA device; EKS: topology-aware pairing needs "the
NVIDIA or Neuron DRA drivers", device-management-efa.html). Our pods take every GPU and every EFA
interface of their node, so they hold all devices whatever the allocator picks, and aws-ofi-nccl
pairs each GPU with its nearest interfaces at run time from the PCIe tree.
"""

from __future__ import annotations

from config.environment import Nodegroup
from config.kubernetes import (
    EFA_CLAIM, EFA_DEVICE_CLASS, EFA_DRA, EFA_RESOURCE, TRAINING_NAMESPACE, efa_claim_template_name,
)
from k8s.pods.resources import container_resources


def device_resources(group: Nodegroup, *, cpu: str, memory: str) -> dict:
    """The container's requests and limits on `group` (resources.container_resources), with the EFA
    interfaces as the group's claim instead of the extended resource on a DRA group."""
    resources = container_resources(group.instance_type, cpu=cpu, memory=memory)
    if group.efa_path == EFA_DRA:
        for side in ("requests", "limits"):
            del resources[side][EFA_RESOURCE]
        resources["claims"] = [{"name": EFA_CLAIM}]
    return resources


def pod_resource_claims(group: Nodegroup) -> dict:
    """The pod-spec fields that bind the claim device_resources names: {} off DRA groups."""
    if group.efa_path != EFA_DRA:
        return {}
    return {"resourceClaims": [{"name": EFA_CLAIM, "resourceClaimTemplateName": efa_claim_template_name(group.name)}]}


def efa_claim_template(group: Nodegroup, namespace: str = TRAINING_NAMESPACE) -> dict:
    """Every EFA interface of one node of `group`, by count. ExactCount rather than All: Kueue
    refuses claims with allocationMode All (kueue v0.19.2 pkg/dra/claims.go), and the count is the
    instance-type table's, the same number the device plugin path requests."""
    if group.efa_path != EFA_DRA:
        raise ValueError(f"node group {group.name} does not take EFA through DRA")
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": efa_claim_template_name(group.name), "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [{
            "name": EFA_CLAIM,
            "exactly": {"deviceClassName": EFA_DEVICE_CLASS, "allocationMode": "ExactCount",
                        "count": group.instance_type.efa_interfaces},
        }]}}},
    }
