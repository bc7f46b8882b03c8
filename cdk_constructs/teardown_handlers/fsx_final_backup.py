"""Take a final backup of a retained FSx for Lustre file system as its stack is deleted.

A retained file system outlives the stack, and FSx for Lustre takes no final backup by default
when it is later deleted by hand. This handler, behind a resource that exists only in
environments with removalPolicy retain and an unlinked file system (FSx backs up only persistent
file systems not linked to S3: "Working with backups", FSx for Lustre User Guide,
using-backups-fsx.html), takes a user-initiated backup (kept until someone deletes it) when the
Storage stack goes and waits until it is AVAILABLE.

A final backup that fails, or is still running when the handler must reply, fails the delete
with the reason: nobody should learn that the last copy is missing after the fact. Deleting the
stack again resumes waiting on a backup still in progress instead of starting another.
"""

from __future__ import annotations

import os
import time
from typing import Callable

import boto3
from botocore.exceptions import ClientError

FINAL_BACKUP_TAG = "eks-distributed-training:final-backup"
IN_PROGRESS = ("PENDING", "CREATING", "TRANSFERRING", "COPYING")
POLL_SECONDS = 15
SLEEP = time.sleep
# Kept back from the Lambda's own time to reply to CloudFormation.
REPLY_SECONDS = 60


class BackupFailed(Exception):
    """The final backup did not reach AVAILABLE; the message says why and what to do."""


def _final_backups_in_progress(fsx, file_system_id: str) -> list[dict]:
    pages = fsx.get_paginator("describe_backups").paginate(
        Filters=[{"Name": "file-system-id", "Values": [file_system_id]}])
    return [b for page in pages for b in page["Backups"]
            if b["Lifecycle"] in IN_PROGRESS and {"Key": FINAL_BACKUP_TAG, "Value": "true"} in b.get("Tags", [])]


def start_or_resume(fsx, file_system_id: str, stack_name: str, deadline: float,
                    poll_seconds: float = POLL_SECONDS, sleep: Callable[[float], None] = time.sleep) -> dict:
    """The final backup a previous attempt left in progress, else a new one. FSx runs one backup
    of a file system at a time: while another (the daily automatic one) runs, wait for it."""
    in_progress = _final_backups_in_progress(fsx, file_system_id)
    if in_progress:
        return in_progress[0]
    while True:
        try:
            return fsx.create_backup(
                FileSystemId=file_system_id,
                Tags=[{"Key": "Name", "Value": f"{stack_name}-final"}, {"Key": FINAL_BACKUP_TAG, "Value": "true"}],
            )["Backup"]
        except ClientError as err:
            if err.response["Error"]["Code"] != "BackupInProgress" or time.monotonic() + poll_seconds > deadline:
                raise
        sleep(poll_seconds)


def wait_until_available(fsx, backup: dict, file_system_id: str, deadline: float, poll_seconds: float = POLL_SECONDS,
                         sleep: Callable[[float], None] = time.sleep) -> dict:
    backup_id = backup["BackupId"]
    while True:
        lifecycle = backup["Lifecycle"]
        if lifecycle == "AVAILABLE":
            return backup
        if lifecycle not in IN_PROGRESS:
            cause = backup.get("FailureDetails", {}).get("Message", "no failure details")
            raise BackupFailed(f"final backup {backup_id} of {file_system_id} is {lifecycle}: {cause}")
        if time.monotonic() + poll_seconds > deadline:
            raise BackupFailed(
                f"final backup {backup_id} of {file_system_id} is still {lifecycle} at the handler's deadline; "
                f"it goes on: delete the stack again to wait for it (aws fsx describe-backups --backup-ids {backup_id})")
        sleep(poll_seconds)
        [backup] = fsx.describe_backups(BackupIds=[backup_id])["Backups"]


def final_backup(fsx, file_system_id: str, stack_name: str, deadline: float, poll_seconds: float = POLL_SECONDS,
                 sleep: Callable[[float], None] = time.sleep) -> str:
    """Take the final backup and wait for it; raise BackupFailed (or the FSx error) if it fails."""
    try:
        backup = start_or_resume(fsx, file_system_id, stack_name, deadline, poll_seconds, sleep)
    except ClientError as err:
        if err.response["Error"]["Code"] == "FileSystemNotFound":
            # Deleted by hand already: there is nothing left to protect, and refusing the
            # stack's deletion would protect nothing either.
            return f"file system {file_system_id} no longer exists; no final backup to take"
        raise
    backup = wait_until_available(fsx, backup, file_system_id, deadline, poll_seconds, sleep)
    return f"final backup {backup['BackupId']} of {file_system_id} is AVAILABLE"


def handler(event, context):
    from cfn_response import run

    def on_delete(event):
        props = event["ResourceProperties"]
        client = boto3.client("fsx", region_name=os.environ.get("AWS_REGION"))
        deadline = time.monotonic() + max(context.get_remaining_time_in_millis() / 1000 - REPLY_SECONDS, 0)
        return final_backup(client, props["FileSystemId"], props.get("StackName", "stack"), deadline,
                            poll_seconds=POLL_SECONDS, sleep=SLEEP)

    run(event, context, on_delete, failure_fails_delete=True)
