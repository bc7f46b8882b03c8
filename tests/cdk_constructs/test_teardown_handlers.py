"""The teardown Lambdas, run for real against a moto server on loopback, replying to a real
HTTP endpoint standing in for CloudFormation's pre-signed response URL."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import boto3
import pytest

from tests.conftest import REPO_ROOT

HANDLERS = REPO_ROOT / "cdk_constructs" / "teardown_handlers"
sys.path.insert(0, str(HANDLERS))  # the Lambda's own import root

import eni_janitor  # noqa: E402
import fsx_final_backup  # noqa: E402


@pytest.fixture(scope="module")
def endpoint():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    with pytest.MonkeyPatch.context() as mp:
        for key in [k for k in os.environ if k.startswith("AWS_")]:
            mp.delenv(key)
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.setenv("AWS_REGION", "us-west-2")
        mp.setenv("AWS_DEFAULT_REGION", "us-west-2")
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        mp.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
        yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def vpc(endpoint):
    ec2 = boto3.client("ec2")
    vpc_id = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc_id, CidrBlock="10.0.0.0/24")["Subnet"]["SubnetId"]
    return ec2, vpc_id, subnet


@pytest.fixture
def cloudformation():
    """A loopback HTTP server that records the custom-resource replies PUT to it."""
    replies: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self):  # noqa: N802 - http.server's naming
            replies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/reply", replies
    server.shutdown()


class Context:
    def get_remaining_time_in_millis(self):
        return 65_000  # a minute is kept back for the reply: five seconds to sweep


def event(url: str, request_type: str, **properties) -> dict:
    return {"RequestType": request_type, "ResponseURL": url, "StackId": "arn:stack", "RequestId": "r1",
            "LogicalResourceId": "Janitor", "PhysicalResourceId": "Janitor", "ResourceProperties": properties}


def test_sweep_deletes_controller_leftovers_and_nothing_else(vpc):
    ec2, vpc_id, subnet = vpc
    for description in ("aws-K8S-i-0abc", "AWS Lambda VPC ENI-kubectl-handler", "operator's own ENI"):
        ec2.create_network_interface(SubnetId=subnet, Description=description)
    summary = eni_janitor.sweep(ec2, vpc_id, time.monotonic() + 5, poll_seconds=0.1)
    assert summary.startswith(f"deleted 2 leftover ENI(s) in {vpc_id}")
    left = ec2.describe_network_interfaces(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])["NetworkInterfaces"]
    assert [e["Description"] for e in left] == ["operator's own ENI"]


def test_sweep_stops_at_its_deadline_and_names_what_is_still_attached(vpc):
    ec2, vpc_id, subnet = vpc
    eni = ec2.create_network_interface(SubnetId=subnet, Description="aws-K8S-i-0busy")["NetworkInterface"]
    instance = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, SubnetId=subnet)["Instances"][0]
    ec2.attach_network_interface(NetworkInterfaceId=eni["NetworkInterfaceId"], InstanceId=instance["InstanceId"],
                                 DeviceIndex=1)
    started = time.monotonic()
    summary = eni_janitor.sweep(ec2, vpc_id, time.monotonic() + 0.5, poll_seconds=0.1)
    assert time.monotonic() - started < 5
    assert summary == f"deleted 0 leftover ENI(s); still attached at the deadline: {eni['NetworkInterfaceId']}"


def test_janitor_replies_success_on_delete_after_sweeping(vpc, cloudformation):
    ec2, vpc_id, subnet = vpc
    ec2.create_network_interface(SubnetId=subnet, Description="aws-K8S-i-0abc")
    url, replies = cloudformation
    eni_janitor.handler(event(url, "Delete", VpcId=vpc_id), Context())
    [reply] = replies
    assert reply["Status"] == "SUCCESS" and reply["Reason"].startswith("deleted 1 leftover ENI(s)")
    assert reply["PhysicalResourceId"] == "Janitor"


def test_janitor_does_nothing_on_create(vpc, cloudformation):
    ec2, vpc_id, subnet = vpc
    ec2.create_network_interface(SubnetId=subnet, Description="aws-K8S-i-0abc")
    url, replies = cloudformation
    eni_janitor.handler(event(url, "Create", VpcId=vpc_id), Context())
    assert [r["Status"] for r in replies] == ["SUCCESS"]
    assert len(eni_janitor.leftover_interfaces(ec2, vpc_id)) == 1


def test_a_failing_sweep_still_lets_the_stack_delete(endpoint, cloudformation):
    url, replies = cloudformation
    eni_janitor.handler(event(url, "Delete"), Context())  # no VpcId: the step fails
    [reply] = replies
    assert reply["Status"] == "SUCCESS"
    assert reply["Reason"].startswith("teardown step failed, continuing: KeyError")


def test_final_backup_starts_a_tagged_backup_of_the_file_system(vpc, cloudformation):
    _, _, subnet = vpc
    fsx = boto3.client("fsx")
    fs = fsx.create_file_system(FileSystemType="LUSTRE", StorageCapacity=1200, SubnetIds=[subnet],
                                LustreConfiguration={"DeploymentType": "PERSISTENT_2",
                                                     "PerUnitStorageThroughput": 250})["FileSystem"]["FileSystemId"]
    url, replies = cloudformation
    fsx_final_backup.handler(event(url, "Delete", FileSystemId=fs, StackName="prod-Storage"), Context())
    [reply] = replies
    assert reply["Status"] == "SUCCESS" and f"of {fs}" in reply["Reason"]
    [backup] = fsx.describe_backups(Filters=[{"Name": "file-system-id", "Values": [fs]}])["Backups"]
    assert {"Key": "Name", "Value": "prod-Storage-final"} in backup["Tags"]
