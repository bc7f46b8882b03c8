"""The EFA DRA driver, on environments with a GPU node group set to `"efaAllocation": "dra"`.

The objects of the aws/eks-charts aws-dranet chart 1.0.0 (release name aws-dranet, kube-system;
../shared/contracts/aws-dranet-chart-v1.0.0/): its ServiceAccount, ClusterRole and binding, the
DaemonSet (k8s/pods/dranet.py) on the DRA groups' nodes only, and the DeviceClass of EFA devices.
Plus, in the training namespace, one ResourceClaimTemplate per DRA group that its pods claim their
EFA interfaces from, and on gpuAllocation dra groups their GPUs too, paired by PCIe root
(k8s/pods/devices.py). The EFA device plugin keeps the other EFA groups
(k8s/addons/efa_device_plugin.py); a node label separates the two, so no node runs both.
"""

from __future__ import annotations

from config.environment import Environment
from config.kubernetes import AWS_DRANET, DRANET_DRIVER, EFA_DEVICE_CLASS, EFA_DRA, KUBE_SYSTEM_NAMESPACE
from k8s.addons import AddOn
from k8s.pods.devices import claim_template
from k8s.pods.dranet import dranet_daemon_set
from k8s.pods.images import dranet_image
from k8s.pods.workload import cluster_identity

# templates-clusterrole.yaml: read nodes, publish ResourceSlices, read claims and classes, write the
# status of the claims it prepares, and the driver-scoped node association of its own claims.
CLUSTER_RULES = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
     "verbs": ["list", "watch", "create", "update", "delete"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims", "deviceclasses"], "verbs": ["get"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/status"], "verbs": ["patch", "update"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/driver"],
     "verbs": ["associated-node:patch", "associated-node:update"], "resourceNames": [DRANET_DRIVER]},
]


def efa_device_class() -> dict:
    """templates-deviceclass.yaml: the devices dranet publishes that are EFA adapters."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": EFA_DEVICE_CLASS},
            "spec": {"selectors": [{"cel": {"expression": (
                f'device.driver == "{DRANET_DRIVER}" &&\n'
                "device.attributes[\"dra.net\"].pciDevice == 'Elastic Fabric Adapter (EFA)'\n")}}]}}


def dranet_objects(config: Environment) -> list[dict]:
    groups = config.efa_groups(EFA_DRA)
    instance_types = tuple(sorted({g.instance_type_name for g in groups}))
    return [
        *cluster_identity(AWS_DRANET, KUBE_SYSTEM_NAMESPACE, CLUSTER_RULES),
        efa_device_class(),
        dranet_daemon_set(dranet_image(config.region), instance_types),
        *(claim_template(group) for group in groups),
    ]


ADDON = AddOn(name="aws-dranet", depends_on=("namespaces",),
              applies_to=lambda config: bool(config.efa_groups(EFA_DRA)),
              objects=lambda config, values: dranet_objects(config))
