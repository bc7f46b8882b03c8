"""The teardown Lambdas, run for real against a moto server on loopback, replying to a real
HTTP endpoint standing in for CloudFormation's pre-signed response URL (fixtures: conftest.py)."""

from __future__ import annotations

import time

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

import eni_janitor
import fsx_final_backup
from cfn_events import Context, event


@pytest.fixture
def vpc(endpoint):
    ec2 = boto3.client("ec2")
    vpc_id = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc_id, CidrBlock="10.0.0.0/24")["Subnet"]["SubnetId"]
    return ec2, vpc_id, subnet


CLUSTER = "dev-training"


class Ec2WithDependencies:
    """moto's EC2 with the rule it does not enforce: a security group that an ENI still uses cannot
    be deleted (EC2 answers DependencyViolation; moto deletes it)."""

    def __init__(self, client):
        self._client = client

    def __getattr__(self, name):
        return getattr(self._client, name)

    def delete_security_group(self, GroupId):  # noqa: N803 - boto3's parameter name
        users = self._client.describe_network_interfaces(Filters=[{"Name": "group-id", "Values": [GroupId]}])
        if users["NetworkInterfaces"]:
            raise ClientError({"Error": {"Code": "DependencyViolation",
                                         "Message": f"resource {GroupId} has a dependent object"}}, "DeleteSecurityGroup")
        return self._client.delete_security_group(GroupId=GroupId)


def cluster_group(ec2, vpc_id: str, cluster: str = CLUSTER) -> str:
    """A security group as EKS creates one for a cluster: tagged with the cluster's name."""
    return ec2.create_security_group(
        GroupName=f"eks-cluster-sg-{cluster}-1", Description="EKS created security group", VpcId=vpc_id,
        TagSpecifications=[{"ResourceType": "security-group",
                            "Tags": [{"Key": eni_janitor.CLUSTER_TAG, "Value": cluster}]}])["GroupId"]


def attached_eni(ec2, subnet: str, description: str, groups: list[str] | None = None) -> tuple[str, str]:
    """(ENI id, attachment id) of an ENI in use, as a Lambda's hyperplane ENI or a pod's is."""
    eni = ec2.create_network_interface(SubnetId=subnet, Description=description,
                                       **({"Groups": groups} if groups else {}))["NetworkInterface"]
    instance = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, SubnetId=subnet)["Instances"][0]
    attachment = ec2.attach_network_interface(NetworkInterfaceId=eni["NetworkInterfaceId"],
                                              InstanceId=instance["InstanceId"], DeviceIndex=1)["AttachmentId"]
    return eni["NetworkInterfaceId"], attachment


def interfaces(ec2, vpc_id: str) -> list[dict]:
    return ec2.describe_network_interfaces(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])["NetworkInterfaces"]


def test_sweep_deletes_controller_leftovers_and_nothing_else(vpc):
    ec2, vpc_id, subnet = vpc
    for description in ("aws-K8S-i-0abc", "AWS Lambda VPC ENI-kubectl-handler", "operator's own ENI"):
        ec2.create_network_interface(SubnetId=subnet, Description=description)
    summary = eni_janitor.sweep(ec2, vpc_id, CLUSTER, time.monotonic() + 5, poll_seconds=0.1)
    assert summary.startswith(f"deleted 2 leftover ENI(s) in {vpc_id}")
    assert [e["Description"] for e in interfaces(ec2, vpc_id)] == ["operator's own ENI"]


def test_sweep_waits_until_lambda_releases_its_eni_then_deletes_it(vpc):
    """A deleted VPC Lambda's hyperplane ENI stays attached for minutes; the sweep polls until it is
    available. Each of its sleeps stands for the time in which Lambda lets go of the ENI."""
    ec2, vpc_id, subnet = vpc
    eni, attachment = attached_eni(ec2, subnet, "AWS Lambda VPC ENI-kubectl-handler")
    sleeps = []

    def lambda_releases(seconds):
        sleeps.append(seconds)
        ec2.detach_network_interface(AttachmentId=attachment)

    summary = eni_janitor.sweep(ec2, vpc_id, CLUSTER, time.monotonic() + 60, poll_seconds=15, sleep=lambda_releases)
    assert sleeps == [15]
    assert summary.startswith(f"deleted 1 leftover ENI(s) in {vpc_id}: {eni}")
    assert eni not in [e["NetworkInterfaceId"] for e in interfaces(ec2, vpc_id)]


def test_sweep_deletes_the_clusters_own_security_group_once_no_eni_uses_it(vpc):
    """aws-cdk 18650: EKS cannot delete the cluster security group while the kubectl handler's
    ENIs still carry it, and the group then blocks the VPC. Groups of other clusters and groups
    EKS did not tag stay."""
    ec2, vpc_id, subnet = vpc
    ours, theirs = cluster_group(ec2, vpc_id), cluster_group(ec2, vpc_id, "other-training")
    untagged = ec2.create_security_group(GroupName="app", Description="app", VpcId=vpc_id)["GroupId"]
    _, attachment = attached_eni(ec2, subnet, "AWS Lambda VPC ENI-kubectl-handler", groups=[ours])
    rounds = []

    def lambda_releases(seconds):
        rounds.append(seconds)
        ec2.detach_network_interface(AttachmentId=attachment)

    summary = eni_janitor.sweep(Ec2WithDependencies(ec2), vpc_id, CLUSTER, time.monotonic() + 60,
                                poll_seconds=15, sleep=lambda_releases)
    assert rounds == [15]
    assert summary.endswith(f"1 cluster security group(s): {ours}")
    left = {g["GroupId"] for g in ec2.describe_security_groups(
        Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])["SecurityGroups"]}
    assert ours not in left and {theirs, untagged} <= left


def test_sweep_fails_at_its_deadline_naming_what_is_left(vpc):
    ec2, vpc_id, subnet = vpc
    group = cluster_group(ec2, vpc_id)
    eni, _ = attached_eni(ec2, subnet, "aws-K8S-i-0busy", groups=[group])
    now = [0.0]

    def clock():
        return now[0]

    def sleep(seconds):
        now[0] += seconds

    with pytest.raises(eni_janitor.Incomplete) as failed:
        eni_janitor.sweep(Ec2WithDependencies(ec2), vpc_id, CLUSTER, 40.0, poll_seconds=15, sleep=sleep, clock=clock)
    assert now[0] == 30.0  # polled at 0, 15 and 30; a fourth round would end after the deadline
    message = str(failed.value)
    assert f"ENI(s) still attached: {eni}" in message
    assert f"security group {group} still in use by {eni}" in message
    assert "Delete the stack again" in message


def test_janitor_replies_failed_with_the_reason_when_it_cannot_finish(vpc, cloudformation):
    """CloudFormation stops before the subnets with the janitor's reason, instead of failing on the
    subnet or the VPC later with one that names no cause; deleting again runs the janitor again."""
    ec2, vpc_id, subnet = vpc
    eni, _ = attached_eni(ec2, subnet, "AWS Lambda VPC ENI-kubectl-handler")
    url, replies = cloudformation
    eni_janitor.handler(event(url, "Delete", VpcId=vpc_id, ClusterName=CLUSTER), Context())
    [reply] = replies
    assert reply["Status"] == "FAILED"
    assert reply["Reason"].startswith(f"Incomplete: ENI(s) still attached: {eni}")


def test_janitor_replies_success_on_delete_after_sweeping(vpc, cloudformation):
    ec2, vpc_id, subnet = vpc
    ec2.create_network_interface(SubnetId=subnet, Description="aws-K8S-i-0abc")
    group = cluster_group(ec2, vpc_id)
    url, replies = cloudformation
    eni_janitor.handler(event(url, "Delete", VpcId=vpc_id, ClusterName=CLUSTER), Context())
    [reply] = replies
    assert reply["Status"] == "SUCCESS" and reply["Reason"].startswith("deleted 1 leftover ENI(s)")
    assert reply["Reason"].endswith(f"1 cluster security group(s): {group}")
    assert reply["PhysicalResourceId"] == "Janitor"


def test_janitor_does_nothing_on_create(vpc, cloudformation):
    ec2, vpc_id, subnet = vpc
    ec2.create_network_interface(SubnetId=subnet, Description="aws-K8S-i-0abc")
    url, replies = cloudformation
    eni_janitor.handler(event(url, "Create", VpcId=vpc_id, ClusterName=CLUSTER), Context())
    assert [r["Status"] for r in replies] == ["SUCCESS"]
    assert len(eni_janitor.leftover_interfaces(ec2, vpc_id)) == 1


def test_a_janitor_that_cannot_run_fails_the_delete_with_its_reason(endpoint, cloudformation):
    url, replies = cloudformation
    eni_janitor.handler(event(url, "Delete"), Context())  # no VpcId
    [reply] = replies
    assert (reply["Status"], reply["Reason"]) == ("FAILED", "KeyError: 'VpcId'")


MOTO_ACCOUNT = "123456789012"


@pytest.fixture
def file_system(vpc):
    _, _, subnet = vpc
    fsx = boto3.client("fsx")
    fs = fsx.create_file_system(FileSystemType="LUSTRE", StorageCapacity=1200, SubnetIds=[subnet],
                                LustreConfiguration={"DeploymentType": "PERSISTENT_2",
                                                     "PerUnitStorageThroughput": 250})["FileSystem"]["FileSystemId"]
    return fsx, fs


def set_backup_lifecycle(backup_id: str, lifecycle: str) -> None:
    """FSx moves a backup from CREATING on; moto's stays CREATING, so the test moves it, in the
    server's own (in-process) state."""
    from moto.fsx.models import fsx_backends

    fsx_backends[MOTO_ACCOUNT]["us-west-2"].backups[backup_id].lifecycle = lifecycle


def final_backups(fsx, fs: str) -> list[dict]:
    return fsx.describe_backups(Filters=[{"Name": "file-system-id", "Values": [fs]}])["Backups"]


def test_final_backup_waits_for_a_tagged_backup_to_be_available_then_replies_success(
        file_system, cloudformation, monkeypatch):
    fsx, fs = file_system
    url, replies = cloudformation
    polls = []

    def fsx_progresses(seconds):  # stands in for time.sleep: each poll, FSx moves on
        polls.append(seconds)
        [backup] = final_backups(fsx, fs)
        set_backup_lifecycle(backup["BackupId"], "AVAILABLE")

    monkeypatch.setattr(fsx_final_backup, "POLL_SECONDS", 1)
    monkeypatch.setattr(fsx_final_backup, "SLEEP", fsx_progresses)
    fsx_final_backup.handler(event(url, "Delete", FileSystemId=fs, StackName="prod-Storage"), Context())
    [backup] = final_backups(fsx, fs)
    [reply] = replies
    assert (reply["Status"], reply["Reason"]) == ("SUCCESS", f"final backup {backup['BackupId']} of {fs} is AVAILABLE")
    assert polls == [1]
    assert {"Key": "Name", "Value": "prod-Storage-final"} in backup["Tags"]
    assert {"Key": fsx_final_backup.FINAL_BACKUP_TAG, "Value": "true"} in backup["Tags"]


def test_a_final_backup_still_running_at_the_deadline_fails_the_delete_and_the_next_delete_waits_on_it(
        file_system, cloudformation, monkeypatch):
    fsx, fs = file_system
    url, replies = cloudformation
    # The context leaves 5 s after the reply reserve; a 10 s poll cannot fit in it.
    monkeypatch.setattr(fsx_final_backup, "POLL_SECONDS", 10)
    fsx_final_backup.handler(event(url, "Delete", FileSystemId=fs, StackName="prod-Storage"), Context())
    [backup] = final_backups(fsx, fs)
    [reply] = replies
    assert reply["Status"] == "FAILED"
    assert reply["Reason"] == (
        f"BackupFailed: final backup {backup['BackupId']} of {fs} is still CREATING at the handler's deadline; it "
        f"goes on: delete the stack again to wait for it (aws fsx describe-backups --backup-ids {backup['BackupId']})")
    monkeypatch.setattr(fsx_final_backup, "POLL_SECONDS", 1)
    monkeypatch.setattr(fsx_final_backup, "SLEEP", lambda s: set_backup_lifecycle(backup["BackupId"], "AVAILABLE"))
    fsx_final_backup.handler(event(url, "Delete", FileSystemId=fs, StackName="prod-Storage"), Context())
    assert [b["BackupId"] for b in final_backups(fsx, fs)] == [backup["BackupId"]]  # no second backup
    assert replies[1]["Status"] == "SUCCESS" and backup["BackupId"] in replies[1]["Reason"]


def test_a_failed_final_backup_fails_the_delete_with_fsx_s_reason():
    """FAILED backups carry FailureDetails.Message (FSx API Reference, Backup), which moto leaves out."""
    fsx = boto3.client("fsx", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    backup = {"BackupId": "backup-0123456789abcdef0", "Lifecycle": "CREATING",
              "Type": "USER_INITIATED", "CreationTime": 0, "ResourceARN": "arn:aws:fsx:us-west-2:1:backup/b",
              "FileSystem": {}}
    failed = {**backup, "Lifecycle": "FAILED", "FailureDetails": {"Message": "The file system is being deleted"}}
    with Stubber(fsx) as stub:
        stub.add_response("describe_backups", {"Backups": [failed]}, {"BackupIds": [backup["BackupId"]]})
        with pytest.raises(fsx_final_backup.BackupFailed) as err:
            fsx_final_backup.wait_until_available(fsx, backup, "fs-0123456789abcdef0", time.monotonic() + 60,
                                                  poll_seconds=0, sleep=lambda s: None)
    assert str(err.value) == ("final backup backup-0123456789abcdef0 of fs-0123456789abcdef0 is FAILED: "
                              "The file system is being deleted")


def test_a_backup_already_running_delays_the_final_one_instead_of_failing_it():
    """FSx runs one backup of a file system at a time; CreateBackup answers BackupInProgress
    while, say, the daily automatic backup runs (FSx API Reference, CreateBackup errors)."""
    fsx = boto3.client("fsx", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    created = {"BackupId": "backup-0123456789abcdef1", "Lifecycle": "CREATING",
               "Type": "USER_INITIATED", "CreationTime": 0, "ResourceARN": "arn:aws:fsx:us-west-2:1:backup/b",
               "FileSystem": {}}
    waits = []
    with Stubber(fsx) as stub:
        stub.add_response("describe_backups", {"Backups": []})
        stub.add_client_error("create_backup", "BackupInProgress", "Another backup is already under way")
        stub.add_response("create_backup", {"Backup": created})
        backup = fsx_final_backup.start_or_resume(fsx, "fs-0123456789abcdef0", "prod-Storage",
                                                  time.monotonic() + 60, poll_seconds=1, sleep=waits.append)
    assert backup == created and waits == [1]


def test_a_file_system_deleted_by_hand_lets_the_stack_go():
    fsx = boto3.client("fsx", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(fsx) as stub:
        stub.add_response("describe_backups", {"Backups": []})
        stub.add_client_error("create_backup", "FileSystemNotFound", "No Amazon FSx file system was found")
        reason = fsx_final_backup.final_backup(fsx, "fs-0123456789abcdef0", "prod-Storage", time.monotonic() + 60)
    assert reason == "file system fs-0123456789abcdef0 no longer exists; no final backup to take"


def test_final_backup_takes_no_backup_on_create(file_system, cloudformation):
    fsx, fs = file_system
    url, replies = cloudformation
    fsx_final_backup.handler(event(url, "Create", FileSystemId=fs, StackName="prod-Storage"), Context())
    assert [r["Status"] for r in replies] == ["SUCCESS"] and final_backups(fsx, fs) == []
