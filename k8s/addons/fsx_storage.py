"""FSx for Lustre as a static PersistentVolume and the one claim every job mounts.

Static, not dynamic: the file system belongs to the storage stack (its lifecycle, its S3 link, its
removal policy), so the cluster only points at it. The PV is pre-bound to the claim so no other
claim can take it, and neither has a StorageClass, so the cluster's default class never provisions
a stray EBS volume in its place.

The claim's request is a constant, not the file system's size. A claim binds to a volume whose
capacity is at least its request, and a pre-bound pair still needs the request satisfied
(Kubernetes, "Persistent Volumes": https://kubernetes.io/docs/concepts/storage/persistent-volumes/#binding
and #reserving-a-persistentvolume). Once Bound, the API server refuses to lower a claim's request
and raises it only through a StorageClass with allowVolumeExpansion (same page,
#expanding-persistent-volumes-claims), which a static claim with storageClassName "" has not: a
request that followed `storageCapacityGiB` would fail the deploy that grows FSx. The volume's
capacity may change (the API server lets a PersistentVolume's capacity be updated; only its
source is immutable), so it follows the file system and `kubectl get pv` stays true.
"""

from __future__ import annotations

from dataclasses import dataclass

from config.environment import Environment
from config.kubernetes import FSX_CLAIM_NAME, TRAINING_NAMESPACE
from k8s.addons import AddOn, ClusterValues
from k8s.pods.workload import rendered

CSI_DRIVER = "fsx.csi.aws.com"
# The smallest PERSISTENT_2 file system config accepts (config/environment_parser.py: 1200 or n x 2400
# GiB), so every volume of ours satisfies it.
CLAIM_REQUEST_GIB = 1200


@dataclass(frozen=True)
class FsxStorageProps:
    """file_system_id, dns_name and mount_name may be CloudFormation tokens (the CDK sink resolves
    them) or the dist placeholders (see k8s/addons ClusterValues)."""

    file_system_id: str
    dns_name: str
    mount_name: str
    storage_gib: int
    claim_name: str = FSX_CLAIM_NAME
    namespace: str = TRAINING_NAMESPACE
    volume_name: str = "fsx-lustre"

    @classmethod
    def from_config(cls, config: Environment, values: ClusterValues) -> "FsxStorageProps":
        return cls(file_system_id=values.fsx_file_system_id, dns_name=values.fsx_dns_name,
                   mount_name=values.fsx_mount_name, storage_gib=config.fsx.storage_capacity_gib)

    def __post_init__(self):
        if self.storage_gib < CLAIM_REQUEST_GIB:
            raise ValueError(f"storage_gib must be at least the claim's {CLAIM_REQUEST_GIB} GiB, "
                             f"got {self.storage_gib}")


def fsx_storage(props: FsxStorageProps) -> list[dict]:
    """The PersistentVolume and its claim, each bound to the other."""
    volume = {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": props.volume_name},
        "spec": {
            "capacity": {"storage": f"{props.storage_gib}Gi"},
            "accessModes": ["ReadWriteMany"],
            # Deleting the claim must never delete the training data or checkpoints.
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "volumeMode": "Filesystem",
            # flock: checkpoint writers and the data pipeline take POSIX locks on /fsx.
            "mountOptions": ["flock"],
            "claimRef": {"namespace": props.namespace, "name": props.claim_name},
            "csi": {"driver": CSI_DRIVER, "volumeHandle": props.file_system_id,
                    "volumeAttributes": {"dnsname": props.dns_name, "mountname": props.mount_name}},
        },
    }
    claim = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": props.claim_name, "namespace": props.namespace},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": f"{CLAIM_REQUEST_GIB}Gi"}},
            # Empty, not absent: absent would let the default StorageClass provision a new volume.
            "storageClassName": "",
            "volumeName": props.volume_name,
            "volumeMode": "Filesystem",
        },
    }
    return [rendered(volume), rendered(claim)]


ADDON = AddOn(name="fsx-storage", component="storage", depends_on=("namespaces",),
              objects=lambda config, values: fsx_storage(FsxStorageProps.from_config(config, values)))
