"""Delete the network interfaces that controllers left in the VPC, so its subnets can go.

CloudFormation knows nothing of the ENIs the VPC CNI attaches for pods, of EFA interfaces of
nodes that are terminating, or of the hyperplane ENIs of a VPC Lambda (the kubectl handler).
When `cdk destroy` reaches the subnets, such an ENI still there fails the deletion
(aws-cdk issue 26716). This handler runs when the Network stack's janitor resource is deleted,
which CloudFormation does before it deletes the subnets: it waits for those ENIs to be released
and deletes each one that is left `available`.
"""

from __future__ import annotations

import os
import time

import boto3

# Descriptions of ENIs that others create in our subnets and never delete themselves in time.
LEFTOVER_DESCRIPTIONS = ("aws-K8S-*", "AWS Lambda VPC ENI*", "EFA *", "efa-*")
POLL_SECONDS = 15


def leftover_interfaces(ec2, vpc_id: str) -> list[dict]:
    pages = ec2.get_paginator("describe_network_interfaces").paginate(Filters=[
        {"Name": "vpc-id", "Values": [vpc_id]},
        {"Name": "description", "Values": list(LEFTOVER_DESCRIPTIONS)},
    ])
    return [eni for page in pages for eni in page["NetworkInterfaces"]]


def sweep(ec2, vpc_id: str, deadline: float, poll_seconds: float = POLL_SECONDS) -> str:
    """Delete available leftovers until none remain or the deadline passes; return a summary."""
    deleted: list[str] = []
    while True:
        remaining = leftover_interfaces(ec2, vpc_id)
        for eni in remaining:
            if eni["Status"] == "available":
                ec2.delete_network_interface(NetworkInterfaceId=eni["NetworkInterfaceId"])
                deleted.append(eni["NetworkInterfaceId"])
        still_attached = [e["NetworkInterfaceId"] for e in remaining if e["Status"] != "available"]
        if not still_attached:
            return f"deleted {len(deleted)} leftover ENI(s) in {vpc_id}: {', '.join(deleted) or 'none'}"
        if time.monotonic() + poll_seconds > deadline:
            return (f"deleted {len(deleted)} leftover ENI(s); still attached at the deadline: "
                    f"{', '.join(still_attached)}")
        time.sleep(poll_seconds)


def handler(event, context):
    from cfn_response import run

    def on_delete(event):
        vpc_id = event["ResourceProperties"]["VpcId"]
        # Leave a minute of the Lambda's own time to reply to CloudFormation.
        budget = context.get_remaining_time_in_millis() / 1000 - 60
        return sweep(boto3.client("ec2", region_name=os.environ.get("AWS_REGION")), vpc_id,
                     time.monotonic() + max(budget, 0))

    run(event, context, on_delete)
