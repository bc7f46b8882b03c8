"""FSx for Lustre as a static volume and its one claim (k8s/addons/fsx_storage.py)."""

import pytest

from config.kubernetes import FSX_CLAIM_NAME, TRAINING_NAMESPACE
from k8s.addons.fsx_storage import CLAIM_REQUEST_GIB, FsxStorageProps, fsx_storage
from k8s_walk import one


def test_fsx_static_volume_and_the_one_claim():
    docs = fsx_storage(FsxStorageProps("fs-0123", "fs-0123.fsx.us-west-2.amazonaws.com", "abcd", 1200))
    pv, pvc = one(docs, "PersistentVolume"), one(docs, "PersistentVolumeClaim")
    csi = pv["spec"]["csi"]
    assert (csi["driver"], csi["volumeHandle"]) == ("fsx.csi.aws.com", "fs-0123")
    assert csi["volumeAttributes"] == {"dnsname": "fs-0123.fsx.us-west-2.amazonaws.com", "mountname": "abcd"}
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pvc["metadata"] == {**pvc["metadata"], "name": FSX_CLAIM_NAME, "namespace": TRAINING_NAMESPACE}
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["storageClassName"] == "" == pv["spec"]["storageClassName"]
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == pv["spec"]["capacity"]["storage"] == "1200Gi"


@pytest.mark.parametrize("capacity", [1200, 2400, 4800, 96000])
def test_fsx_claim_requests_a_constant_that_every_allowed_file_system_satisfies(capacity):
    """A bound claim's request cannot change (no StorageClass allows expansion), so growing FSx
    may change only the volume's capacity, which must stay at least the request."""
    docs = fsx_storage(FsxStorageProps("fs-0123", "dns", "mnt", capacity))
    pv, pvc = one(docs, "PersistentVolume"), one(docs, "PersistentVolumeClaim")
    assert pvc["spec"]["resources"]["requests"]["storage"] == f"{CLAIM_REQUEST_GIB}Gi"
    assert pv["spec"]["capacity"]["storage"] == f"{capacity}Gi"


def test_fsx_claim_request_is_the_smallest_capacity_config_accepts(dev):
    from config import ConfigError
    from config.environment_parser import parse_fsx
    assert parse_fsx({"storageCapacityGiB": CLAIM_REQUEST_GIB, "throughputPerTiB": 125}, "fsx")
    for smaller in (600, CLAIM_REQUEST_GIB - 1):
        with pytest.raises(ConfigError):
            parse_fsx({"storageCapacityGiB": smaller, "throughputPerTiB": 125}, "fsx")
    with pytest.raises(ValueError, match="at least the claim"):
        FsxStorageProps("fs-0123", "dns", "mnt", 600)
    assert dev.fsx.storage_capacity_gib >= CLAIM_REQUEST_GIB
