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

import cdk8s
import cdk8s_plus_27 as kplus
from cdk8s_plus_27 import k8s
from constructs import Construct

from config.environment import Environment
from config.kubernetes import FSX_CLAIM_NAME, TRAINING_NAMESPACE
from k8s.base import ProjectChart

CSI_DRIVER = "fsx.csi.aws.com"
# The smallest PERSISTENT_2 file system config accepts (config/environment_parser.py: 1200 or n x 2400
# GiB), so every volume of ours satisfies it.
CLAIM_REQUEST_GIB = 1200


@dataclass(frozen=True)
class FsxStorageProps:
    """file_system_id, dns_name and mount_name may be CloudFormation tokens (the CDK sink resolves
    them) or the dist placeholders (see k8s/values.py)."""

    file_system_id: str
    dns_name: str
    mount_name: str
    storage_gib: int
    claim_name: str = FSX_CLAIM_NAME
    namespace: str = TRAINING_NAMESPACE
    volume_name: str = "fsx-lustre"

    @classmethod
    def from_config(cls, config: Environment, *, file_system_id: str, dns_name: str,
                    mount_name: str) -> "FsxStorageProps":
        return cls(file_system_id=file_system_id, dns_name=dns_name, mount_name=mount_name,
                   storage_gib=config.fsx.storage_capacity_gib)


class FsxStorageChart(ProjectChart):
    component = "storage"
    addon = "fsx-storage"
    depends_on = ("namespaces",)

    @classmethod
    def for_environment(cls, scope, config, values) -> "FsxStorageChart":
        return cls(scope, cls.addon, props=FsxStorageProps.from_config(
            config, file_system_id=values.fsx_file_system_id, dns_name=values.fsx_dns_name,
            mount_name=values.fsx_mount_name))

    def __init__(self, scope: Construct, id: str, *, props: FsxStorageProps):
        super().__init__(scope, id, namespace=props.namespace)
        if props.storage_gib < CLAIM_REQUEST_GIB:
            raise ValueError(f"storage_gib must be at least the claim's {CLAIM_REQUEST_GIB} GiB, got {props.storage_gib}")
        size = k8s.Quantity.from_string(f"{props.storage_gib}Gi")
        self.volume = k8s.KubePersistentVolume(
            self, "PersistentVolume", metadata=k8s.ObjectMeta(name=props.volume_name),
            spec=k8s.PersistentVolumeSpec(
                capacity={"storage": size},
                access_modes=["ReadWriteMany"],
                # Deleting the claim must never delete the training data or checkpoints.
                persistent_volume_reclaim_policy="Retain",
                storage_class_name="",
                volume_mode="Filesystem",
                # flock: checkpoint writers and the data pipeline take POSIX locks on /fsx.
                mount_options=["flock"],
                claim_ref=k8s.ObjectReference(namespace=props.namespace, name=props.claim_name),
                csi=k8s.CsiPersistentVolumeSource(
                    driver=CSI_DRIVER, volume_handle=props.file_system_id,
                    volume_attributes={"dnsname": props.dns_name, "mountname": props.mount_name},
                ),
            ),
        )
        self.claim = kplus.PersistentVolumeClaim(
            self, "Claim", metadata=self.meta(props.claim_name),
            access_modes=[kplus.PersistentVolumeAccessMode.READ_WRITE_MANY],
            storage=cdk8s.Size.gibibytes(CLAIM_REQUEST_GIB),
            # Empty, not absent: absent would let the default StorageClass provision a new volume.
            storage_class_name="",
            volume=kplus.PersistentVolume.from_persistent_volume_name(self, "Bound", props.volume_name),
            volume_mode=kplus.PersistentVolumeMode.FILE_SYSTEM,
        )
