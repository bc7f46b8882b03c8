"""Preflight's row for the backup a restore deploy creates the file system from (fsx.backupId).

Before the Storage stack exists, the backup must exist in the environment's region, be AVAILABLE, be of
a Lustre file system and of the configured storage capacity: a Lustre file system created from a
backup takes the backup's capacity, and FSx refuses any other (FSx API Reference,
CreateFileSystemFromBackup, StorageCapacity). Once the file system exists, ops/redeploy.py holds
fsx.backupId to what it was created from.
"""

from __future__ import annotations

from typing import Any

from config import Environment
from config.environment import FSX_DEPLOYMENT_TYPE
from ops.aws import api_failure_types, error_code, explain
from ops.checks import FAIL, PASS, WARN, Check

BACKUP_ROW = "fsx.backupId"
CREATE_FROM_BACKUP = "https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateFileSystemFromBackup.html"
# Backup lifecycles that end in AVAILABLE or FAILED (FSx API, BackupLifecycle).
_BACKUP_UNDER_WAY = ("PENDING", "CREATING", "TRANSFERRING", "COPYING")


def backup_row(env: Environment, fsx: Any) -> Check:
    """Whether the restore deploy can create the file system from fsx.backupId."""
    backup_id, field = env.fsx.backup_id, f"environments.{env.name}.fsx.backupId"
    try:
        found = fsx.describe_backups(BackupIds=[backup_id])["Backups"]
    except api_failure_types() as err:
        if error_code(err) != "BackupNotFound":
            return Check(BACKUP_ROW, WARN, f"could not read {backup_id}: {explain(err)}; the Storage stack fails if "
                                           "FSx cannot create the file system from it")
        found = []
    if not found:
        return Check(BACKUP_ROW, FAIL, f"{field} is {backup_id}, which does not exist in {env.region} for this account "
                                       f"(`aws fsx describe-backups --region {env.region}` lists them; copy one from "
                                       "another region with `aws fsx copy-backup`)")
    backup = found[0]
    source = backup.get("FileSystem") or {}
    source_id, lifecycle = source.get("FileSystemId", "?"), backup.get("Lifecycle")
    if lifecycle != "AVAILABLE":
        then = ("wait until `aws fsx describe-backups --backup-ids {0}` says AVAILABLE, then deploy"
                if lifecycle in _BACKUP_UNDER_WAY else
                "choose another backup (`aws fsx describe-backups --filters Name=file-system-id,Values={1}`)")
        return Check(BACKUP_ROW, FAIL, f"{field} is {backup_id}, which is {lifecycle}, not AVAILABLE; "
                                       + then.format(backup_id, source_id))
    fs_type = source.get("FileSystemType")
    if fs_type != "LUSTRE":
        return Check(BACKUP_ROW, FAIL, f"{field}: {backup_id} is a backup of an {fs_type} file system ({source_id}); "
                                       "a file system created from a backup is of the backup's type "
                                       f"(CreateFileSystemFromBackup takes no FileSystemType, {CREATE_FROM_BACKUP}), and this "
                                       "one must be FSx for Lustre")
    capacity, configured = source.get("StorageCapacity"), env.fsx.storage_capacity_gib
    if capacity != configured:
        return Check(BACKUP_ROW, FAIL, f"environments.{env.name}.fsx.storageCapacityGiB is {configured}, {backup_id} is "
                                       f"of a {capacity} GiB file system ({source_id}): a Lustre file system created "
                                       "from a backup takes the backup's capacity, FSx refuses any other "
                                       f"(CreateFileSystemFromBackup StorageCapacity, {CREATE_FROM_BACKUP}); set "
                                       f"storageCapacityGiB to {capacity}, and grow it in a later deploy if you need")
    deployment_type = (source.get("LustreConfiguration") or {}).get("DeploymentType")
    taken = backup.get("CreationTime")
    what = f"{source_id}'s {capacity} GiB {deployment_type}" + (f", taken {taken:%Y-%m-%d %H:%M} UTC" if taken else "")
    if deployment_type != FSX_DEPLOYMENT_TYPE:
        # FSx's API reference does not say whether a backup restores into another deployment type.
        return Check(BACKUP_ROW, WARN, f"{backup_id} is of a {deployment_type} file system ({what}), this deploy "
                                       f"creates {FSX_DEPLOYMENT_TYPE}: FSx's API reference does not say whether a "
                                       "backup restores into another deployment type, so the Storage stack may fail")
    return Check(BACKUP_ROW, PASS, f"{backup_id} is AVAILABLE: the deploy creates the file system from it ({what})")
