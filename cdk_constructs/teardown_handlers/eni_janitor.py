"""Clear what controllers left in the VPC, so that its subnets and then the VPC itself can go.

CloudFormation knows nothing of the ENIs the VPC CNI attaches for pods, of EFA interfaces of
nodes that are terminating, or of the hyperplane ENIs of a VPC Lambda (the kubectl handler, the
training drain). When `cdk destroy` reaches the subnets, such an ENI still there fails the deletion
(aws-cdk issue 26716). Nor does it know the cluster security group EKS creates
(`eks-cluster-sg-<cluster>-<id>`, tagged `aws:eks:cluster-name`; "View Amazon EKS security group
requirements for clusters"): EKS deletes it with the cluster unless an ENI still uses it then, and
the kubectl handler's hyperplane ENIs do (aws-eks-v2 gives the handler the cluster security group,
aws-cdk issue 36653). The group then stays and the VPC cannot be deleted (aws-cdk issue 18650).

This handler runs when the Network stack's janitor resource is deleted, which CloudFormation does
after every other stack of the environment and before it deletes the subnets. Until its deadline
it deletes each leftover ENI once it is `available` (Lambda detaches hyperplane ENIs minutes, up to
45, after their function is gone: hashicorp/terraform-provider-aws PR 10347) and each leftover cluster security group once nothing uses it. If anything
is left at the deadline it fails, naming what is left: CloudFormation then stops before the
subnets, and deleting the stack again runs the janitor again.
"""

from __future__ import annotations

import os
import time

import boto3
from botocore.exceptions import ClientError

# Descriptions of ENIs that others create in our subnets and never delete themselves in time.
LEFTOVER_DESCRIPTIONS = ("aws-K8S-*", "AWS Lambda VPC ENI*", "EFA *", "efa-*")
# The tag EKS puts on the cluster security group it creates.
CLUSTER_TAG = "aws:eks:cluster-name"
POLL_SECONDS = 15
# Kept back from the Lambda's own time to reply to CloudFormation.
REPLY_SECONDS = 60


class Incomplete(Exception):
    """Something is still there at the deadline; the message says what."""


def leftover_interfaces(ec2, vpc_id: str) -> list[dict]:
    pages = ec2.get_paginator("describe_network_interfaces").paginate(Filters=[
        {"Name": "vpc-id", "Values": [vpc_id]},
        {"Name": "description", "Values": list(LEFTOVER_DESCRIPTIONS)},
    ])
    return [eni for page in pages for eni in page["NetworkInterfaces"]]


def cluster_security_groups(ec2, vpc_id: str, cluster_name: str) -> list[str]:
    pages = ec2.get_paginator("describe_security_groups").paginate(Filters=[
        {"Name": "vpc-id", "Values": [vpc_id]},
        {"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster_name]},
    ])
    return [group["GroupId"] for page in pages for group in page["SecurityGroups"]]


def interfaces_using(ec2, group_id: str) -> list[str]:
    found = ec2.describe_network_interfaces(Filters=[{"Name": "group-id", "Values": [group_id]}])
    return [eni["NetworkInterfaceId"] for eni in found["NetworkInterfaces"]]


def _code(err: ClientError) -> str:
    return err.response.get("Error", {}).get("Code", "")


def _delete_interface(ec2, eni_id: str) -> bool:
    """True when deleted; False when it was already gone or got attached again meanwhile."""
    try:
        ec2.delete_network_interface(NetworkInterfaceId=eni_id)
        return True
    except ClientError as err:
        if _code(err) in ("InvalidNetworkInterfaceID.NotFound", "InvalidParameterValue"):
            return False
        raise


def _delete_group(ec2, group_id: str) -> list[str] | None:
    """None when the group is gone; else what still uses it (ENI ids, empty if only a rule)."""
    try:
        ec2.delete_security_group(GroupId=group_id)
        return None
    except ClientError as err:
        if _code(err) == "InvalidGroup.NotFound":
            return None
        if _code(err) == "DependencyViolation":
            return interfaces_using(ec2, group_id)
        raise


def sweep(ec2, vpc_id: str, cluster_name: str | None, deadline: float, *, poll_seconds: float = POLL_SECONDS,
          sleep=time.sleep, clock=time.monotonic) -> str:
    """Delete leftover ENIs and cluster security groups until none remain; return a summary, or
    raise Incomplete naming what is left when the deadline comes first."""
    deleted_interfaces: list[str] = []
    deleted_groups: list[str] = []
    while True:
        attached = []
        for eni in leftover_interfaces(ec2, vpc_id):
            if eni["Status"] != "available":
                attached.append(eni["NetworkInterfaceId"])
            elif _delete_interface(ec2, eni["NetworkInterfaceId"]):
                deleted_interfaces.append(eni["NetworkInterfaceId"])
        in_use: dict[str, list[str]] = {}
        for group_id in cluster_security_groups(ec2, vpc_id, cluster_name) if cluster_name else []:
            users = _delete_group(ec2, group_id)
            if users is None:
                deleted_groups.append(group_id)
            else:
                in_use[group_id] = users
        done = (f"deleted {len(deleted_interfaces)} leftover ENI(s) in {vpc_id}: "
                f"{', '.join(deleted_interfaces) or 'none'}; {len(deleted_groups)} cluster security group(s): "
                f"{', '.join(deleted_groups) or 'none'}")
        if not attached and not in_use:
            return done
        if clock() + poll_seconds > deadline:
            left = [f"ENI(s) still attached: {', '.join(attached)}"] if attached else []
            left += [f"security group {g} still in use by {', '.join(users) or 'a rule of another group'}"
                     for g, users in in_use.items()]
            raise Incomplete(f"{'; '.join(left)} ({done}). Delete the stack again to wait longer; "
                             "a Lambda's ENIs can take up to 45 minutes to be released after it is deleted")
        sleep(poll_seconds)


def handler(event, context):
    from cfn_response import run

    def on_delete(event):
        props = event["ResourceProperties"]
        budget = context.get_remaining_time_in_millis() / 1000 - REPLY_SECONDS
        return sweep(boto3.client("ec2", region_name=os.environ.get("AWS_REGION")), props["VpcId"],
                     props.get("ClusterName"), time.monotonic() + max(budget, 0))

    # A janitor that gives up must say so: the VPC delete would fail later on what it left anyway,
    # with a message that names no cause.
    run(event, context, on_delete, failure_fails_delete=True)
