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
from botocore.exceptions import ClientError

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


# --- the training drain --------------------------------------------------------------------------

import base64  # noqa: E402
from http.server import ThreadingHTTPServer  # noqa: E402
from urllib.parse import parse_qs, urlsplit  # noqa: E402

import training_drain  # noqa: E402

NAMESPACE, CLAIM = "training", "fsx-pvc"


class FakeKubernetes:
    """The part of the API server the drain uses, with state: deleting a job lets its pods go after
    they were listed `grace_lists` more times (their termination grace period, in polls); a pod
    with a finalizer never goes. Records every request with its bearer token."""

    def __init__(self, *, kubeflow_installed: bool = True, grace_lists: int = 1):
        self.kubeflow_installed, self.grace_lists = kubeflow_installed, grace_lists
        self.runs = {"pytorchjobs": set(), "mpijobs": set(), "jobs": set()}
        self.pods: dict[str, dict] = {}  # name -> {"owner": run name or None, "claim": bool, "stuck": bool, "left": int|None}
        self.requests: list[tuple[str, str, str]] = []

    def add_run(self, resource: str, name: str, pods: int) -> None:
        self.runs[resource].add(name)
        for i in range(pods):
            self.add_pod(f"{name}-worker-{i}", owner=name)

    def add_pod(self, name: str, *, owner: str | None = None, claim: bool = True, stuck: bool = False) -> None:
        self.pods[name] = {"owner": owner, "claim": claim, "stuck": stuck, "left": None}

    def _terminate(self, name: str) -> None:
        if self.pods[name]["left"] is None:
            self.pods[name]["left"] = self.grace_lists

    def answer(self, method: str, path: str, token: str) -> tuple[int, dict]:
        self.requests.append((method, path, token))
        parts = path.strip("/").split("/")
        if method == "GET" and path == f"/api/v1/namespaces/{NAMESPACE}/pods":
            for name, pod in list(self.pods.items()):
                if pod["left"] is not None and not pod["stuck"]:
                    if pod["left"] == 0:
                        del self.pods[name]
                    else:
                        pod["left"] -= 1
            volumes = [{"name": "fsx", "persistentVolumeClaim": {"claimName": CLAIM}}]
            return 200, {"kind": "PodList", "items": [
                {"metadata": {"name": n, **({"deletionTimestamp": "2026-11-25T22:00:00Z"} if p["left"] is not None else {})},
                 "spec": {"volumes": volumes if p["claim"] else [{"name": "tmp", "emptyDir": {}}]}}
                for n, p in self.pods.items()]}
        if method == "DELETE" and parts[-2:-1] == ["pods"]:
            if parts[-1] not in self.pods:
                return 404, {"kind": "Status", "message": "not found"}
            self._terminate(parts[-1])
            return 200, {"kind": "Pod"}
        if method == "DELETE" and parts[-1] in self.runs:
            if parts[1] == "kubeflow.org" and not self.kubeflow_installed:
                return 404, {"kind": "Status", "message": "the server could not find the requested resource"}
            for run in self.runs[parts[-1]]:
                for name, pod in self.pods.items():
                    if pod["owner"] == run:
                        self._terminate(name)
            self.runs[parts[-1]] = set()
            return 200, {"kind": "Status", "status": "Success"}
        return 404, {"kind": "Status", "message": f"{method} {path} not served"}


@pytest.fixture
def kubernetes():
    """(url, FakeKubernetes) on a loopback HTTP server."""
    cluster = FakeKubernetes()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self):
            token = self.headers.get("Authorization", "").removeprefix("Bearer ")
            if self.headers.get("Content-Length"):
                self.rfile.read(int(self.headers["Content-Length"]))
            status, body = cluster.answer(self.command, urlsplit(self.path).path, token)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_DELETE = _serve  # noqa: N815 - http.server's naming

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", cluster
    server.shutdown()


def test_an_eks_token_is_a_presigned_get_caller_identity_that_names_the_cluster(endpoint):
    token = training_drain.eks_token("dev-training", "us-west-2")
    assert token.startswith("k8s-aws-v1.")
    encoded = token.removeprefix("k8s-aws-v1.")
    url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    assert parts.netloc == "sts.us-west-2.amazonaws.com"
    assert query["Action"] == ["GetCallerIdentity"] and query["X-Amz-Expires"] == ["60"]
    assert "x-k8s-aws-id" in query["X-Amz-SignedHeaders"][0].split(";")


def test_drain_deletes_every_run_then_waits_until_no_pod_mounts_the_claim(kubernetes):
    url, cluster = kubernetes
    cluster.add_run("pytorchjobs", "llama3-8b-fsdp-abc123", pods=2)
    cluster.add_run("mpijobs", "nccl-tests", pods=1)
    cluster.add_run("jobs", "data-c4", pods=1)
    cluster.add_pod("model-download", claim=True)         # a bare pod on the claim
    cluster.add_pod("etcd-5f7c", claim=False)             # the rendezvous keeps running
    sleeps = []
    summary = training_drain.drain(training_drain.Api(url, "k8s-aws-v1.t"), NAMESPACE, CLAIM, time.monotonic() + 60,
                                   poll_seconds=10, sleep=sleeps.append)
    assert summary == f"deleted pytorchjobs, mpijobs, jobs in {NAMESPACE}; no pod mounts {CLAIM} (1 pod(s) deleted by name)"
    # The runs' pods go within one poll; the bare pod, deleted by name after the first list, one later.
    assert sleeps == [10, 10]
    assert list(cluster.pods) == ["etcd-5f7c"]
    deletes = [p for m, p, _ in cluster.requests if m == "DELETE"]
    assert deletes[:3] == [f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/pytorchjobs",
                           f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/mpijobs",
                           f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"]
    assert {t for _, _, t in cluster.requests} == {"k8s-aws-v1.t"}


def test_drain_without_the_kubeflow_crds_still_deletes_jobs_and_pods(kubernetes):
    url, cluster = kubernetes
    cluster.kubeflow_installed = False
    cluster.add_run("jobs", "data-c4", pods=1)
    summary = training_drain.drain(training_drain.Api(url, "t"), NAMESPACE, CLAIM, time.monotonic() + 60,
                                   poll_seconds=10, sleep=lambda s: None)
    assert summary.startswith(f"deleted jobs in {NAMESPACE}; no pod mounts {CLAIM}")
    assert cluster.pods == {}


def test_drain_fails_at_its_deadline_naming_the_pods_still_on_the_claim(kubernetes):
    url, cluster = kubernetes
    cluster.add_pod("stuck-0", claim=True, stuck=True)
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds

    with pytest.raises(training_drain.Incomplete, match=f"pods in {NAMESPACE} still mount {CLAIM}: stuck-0"):
        training_drain.drain(training_drain.Api(url, "t"), NAMESPACE, CLAIM, 25.0, poll_seconds=10, sleep=sleep,
                             clock=lambda: now[0])
    assert now[0] == 20.0
    assert [p for m, p, _ in cluster.requests if m == "DELETE" and "/pods/" in p] == \
        [f"/api/v1/namespaces/{NAMESPACE}/pods/stuck-0"]  # asked once, not on every poll


def test_drain_handler_replies_failed_with_the_pods_left(endpoint, kubernetes, cloudformation):
    url, cluster = kubernetes
    cluster.add_pod("stuck-0", claim=True, stuck=True)
    reply_url, replies = cloudformation
    training_drain.handler(event(reply_url, "Delete", ClusterName="dev-training", Endpoint=url,
                                 Namespace=NAMESPACE, ClaimName=CLAIM), Context())
    [reply] = replies
    assert reply["Status"] == "FAILED" and "stuck-0" in reply["Reason"]
    tokens = {token for _, _, token in cluster.requests}
    assert len(tokens) == 1 and tokens.pop().startswith("k8s-aws-v1.")  # an EKS token on every call


def test_drain_handler_replies_success_once_the_claim_is_free(endpoint, kubernetes, cloudformation):
    url, cluster = kubernetes
    cluster.add_run("pytorchjobs", "cpu-ddp-x", pods=1)
    cluster.grace_lists = 0
    reply_url, replies = cloudformation
    training_drain.handler(event(reply_url, "Delete", ClusterName="dev-training", Endpoint=url,
                                 Namespace=NAMESPACE, ClaimName=CLAIM), Context())
    [reply] = replies
    assert reply["Status"] == "SUCCESS" and reply["Reason"].startswith("deleted pytorchjobs")
    assert cluster.pods == {}
