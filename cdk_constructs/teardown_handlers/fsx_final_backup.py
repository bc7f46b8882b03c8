"""Take a final backup of a retained FSx for Lustre file system as its stack is deleted.

A retained file system outlives the stack, and FSx for Lustre takes no final backup by default
when it is later deleted by hand. This handler, behind a resource that exists only in
environments with removalPolicy retain, starts a user-initiated backup (kept until someone
deletes it) when the Storage stack goes, so the last state is safe whatever happens next.
"""

from __future__ import annotations

import os
import time

import boto3


def final_backup(fsx, file_system_id: str, stack_name: str) -> str:
    backup = fsx.create_backup(
        FileSystemId=file_system_id,
        ClientRequestToken=f"final-{int(time.time())}"[:63],
        Tags=[{"Key": "Name", "Value": f"{stack_name}-final"},
              {"Key": "eks-distributed-training:final-backup", "Value": "true"}],
    )["Backup"]
    return f"started final backup {backup['BackupId']} of {file_system_id} ({backup['Lifecycle']})"


def handler(event, context):
    from cfn_response import run

    def on_delete(event):
        props = event["ResourceProperties"]
        client = boto3.client("fsx", region_name=os.environ.get("AWS_REGION"))
        return final_backup(client, props["FileSystemId"], props.get("StackName", "stack"))

    run(event, context, on_delete)
