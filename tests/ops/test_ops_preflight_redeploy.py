"""preflight compares what is deployed with cdk.json (ops/redeploy.py): the edits CloudFormation or
EKS refuse only after a long wait (a smaller file system, a Kubernetes downgrade or skip, another
vpcCidr), and the one that succeeds and loses every run's progress (a file system replaced by an
empty one). The deployed environment is built on a moto server: its Network and Storage stacks'
outputs, the VPC and subnet, the FSx file system and the EKS cluster."""

from __future__ import annotations

import json

import boto3
import pytest

from config.outputs import FSX_FILE_SYSTEM_ID_OUTPUT, TRAINING_SUBNET_ID_OUTPUT, VPC_ID_OUTPUT
from ops import redeploy
from ops.preflight import guarded
from ops.aws import clients
from ops.checks import FAIL, PASS, WARN
from ops.envconfig import load
from ops_fakes import CDK_JSON, deploy_registry, isolated_aws_env, run_ops, write_context

REGION = "us-east-1"  # prod's


@pytest.fixture(scope="module")
def moto_clients(moto_endpoint):
    return clients(REGION)


def prod(tmp_path, **changes):
    """prod as cdk.json ships it, with top-level fields (and `fsx` keys) replaced."""
    if "fsx" in changes:
        shipped = json.loads(CDK_JSON.read_text())["context"]["environments"]["prod"]["fsx"]
        changes["fsx"] = {**shipped, **changes["fsx"]}
    return load("prod", str(write_context(tmp_path, "prod", **changes)))


def deploy(endpoint: str, env, *, stack_prefix: str = "", deployment_type: str = "PERSISTENT_2",
           copy_tags: bool | None = None, version: str | None = None) -> str:
    """`env` as a deploy of it leaves it: the Network and Storage stacks with their outputs, the VPC
    and training subnet, the file system in it and the cluster. The file system's id."""
    kw = dict(region_name=REGION, endpoint_url=endpoint)
    ec2, fsx, eks = (boto3.client(s, **kw) for s in ("ec2", "fsx", "eks"))
    vpc = ec2.create_vpc(CidrBlock=env.vpc_cidr)["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=env.training_subnet_cidr,
                               AvailabilityZone=env.training_availability_zone)["Subnet"]["SubnetId"]
    lustre = {"DeploymentType": deployment_type, "PerUnitStorageThroughput": env.fsx.throughput_per_tib}
    copy_tags = env.fsx_backups if copy_tags is None else copy_tags
    if copy_tags:
        lustre["CopyTagsToBackups"] = True
    fs = fsx.create_file_system(FileSystemType="LUSTRE", StorageCapacity=env.fsx.storage_capacity_gib,
                                SubnetIds=[subnet], LustreConfiguration=lustre)["FileSystem"]["FileSystemId"]
    eks.create_cluster(name=env.cluster_name, version=version or env.kubernetes_version,
                       roleArn=f"arn:aws:iam::{env.account}:role/cluster", resourcesVpcConfig={"subnetIds": [subnet]})
    deploy_registry(endpoint, f"{stack_prefix}{env.name}-Network",
                    {VPC_ID_OUTPUT: vpc, TRAINING_SUBNET_ID_OUTPUT: subnet}, region=REGION)
    deploy_registry(endpoint, f"{stack_prefix}{env.name}-Storage", {FSX_FILE_SYSTEM_ID_OUTPUT: fs}, region=REGION)
    return fs


def judged(env, aws_clients, abandon: str | None = None) -> dict:
    rows = guarded(redeploy.steps(env, aws_clients, abandon))
    assert len({r.name for r in rows}) == len(rows) == 4, rows
    for row in rows:
        assert "\n" not in row.reason, row.reason
    return {r.name: r for r in rows}


def assert_only_failing(rows: dict, name: str) -> None:
    assert [n for n, r in rows.items() if r.status != PASS] == [name], rows


def test_the_first_deploy_passes_every_row_saying_nothing_is_deployed_yet(aws, moto_clients, tmp_path):
    rows = judged(prod(tmp_path), moto_clients)
    assert {r.status for r in rows.values()} == {PASS}, rows
    assert "no prod-Storage stack yet" in rows[redeploy.CAPACITY_ROW].reason
    assert "no cluster of prod yet" in rows[redeploy.KUBERNETES_ROW].reason
    assert "no prod-Network stack yet" in rows[redeploy.VPC_ROW].reason


def test_an_unchanged_configuration_passes_every_row(aws, moto_endpoint, moto_clients, tmp_path):
    env = prod(tmp_path)
    fs = deploy(moto_endpoint, env)
    rows = judged(env, moto_clients)
    assert {r.status for r in rows.values()} == {PASS}, rows
    assert fs in rows[redeploy.FILE_SYSTEM_ROW].reason and "stays" in rows[redeploy.FILE_SYSTEM_ROW].reason


def test_growing_the_file_system_and_changing_its_throughput_pass(aws, moto_endpoint, moto_clients, tmp_path):
    fs = deploy(moto_endpoint, prod(tmp_path))
    rows = judged(prod(tmp_path, fsx={"storageCapacityGiB": 9600, "throughputPerTiB": 250}), moto_clients)
    assert {r.status for r in rows.values()} == {PASS}, rows
    assert f"grows {fs} from 4800 to 9600 GiB" in rows[redeploy.CAPACITY_ROW].reason


def test_a_smaller_file_system_fails_naming_the_field_both_sizes_and_what_to_do(aws, moto_endpoint, moto_clients,
                                                                                 tmp_path):
    fs = deploy(moto_endpoint, prod(tmp_path, fsx={"storageCapacityGiB": 9600}))
    rows = judged(prod(tmp_path), moto_clients)
    assert_only_failing(rows, redeploy.CAPACITY_ROW)
    row = rows[redeploy.CAPACITY_ROW]
    assert row.status == FAIL
    for words in ("environments.prod.fsx.storageCapacityGiB is 4800", f"{fs} has 9600 GiB", "can only grow",
                  "managing-storage-capacity.html", "set it to 9600 or more"):
        assert words in row.reason, row.reason


def test_moving_the_training_zone_fails_saying_the_file_system_is_replaced_by_an_empty_one(aws, moto_endpoint,
                                                                                           moto_clients, tmp_path):
    fs = deploy(moto_endpoint, prod(tmp_path, trainingAvailabilityZone="us-east-1b"))
    rows = judged(prod(tmp_path), moto_clients)
    assert_only_failing(rows, redeploy.FILE_SYSTEM_ROW)
    row = rows[redeploy.FILE_SYSTEM_ROW]
    assert row.status == FAIL
    for words in ("environments.prod.trainingAvailabilityZone is us-east-1a", f"{fs} is in us-east-1b",
                  "new, empty file system", "step 0", "aws-resource-fsx-filesystem.html",
                  f"make deploy ENV=prod ABANDON_FSX={fs}"):
        assert words in row.reason, row.reason


def test_more_zones_move_the_training_subnet_and_so_replace_the_file_system(aws, moto_endpoint, moto_clients,
                                                                            tmp_path):
    fs = deploy(moto_endpoint, prod(tmp_path))
    env = prod(tmp_path, availabilityZones=["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d", "us-east-1f"])
    row = judged(env, moto_clients)[redeploy.FILE_SYSTEM_ROW]
    assert row.status == FAIL
    assert f"the training subnet's range becomes {env.training_subnet_cidr}" in row.reason, row.reason
    assert fs in row.reason


@pytest.mark.parametrize("deployed, words", [
    (dict(deployment_type="PERSISTENT_1"),
     "the deployed file system is PERSISTENT_1, this deploy creates PERSISTENT_2"),
    (dict(copy_tags=False), "environments.prod.removalPolicy and fsx.s3ImportPath/s3ExportPath turn backups on"),
])
def test_a_file_system_property_fsx_cannot_change_in_place_fails_as_a_replacement(aws, moto_endpoint, moto_clients,
                                                                                  tmp_path, deployed, words):
    fs = deploy(moto_endpoint, prod(tmp_path), **deployed)
    row = judged(prod(tmp_path), moto_clients)[redeploy.FILE_SYSTEM_ROW]
    assert row.status == FAIL and words in row.reason and fs in row.reason, row.reason
    assert "Update requires: Replacement" in row.reason
    assert "aws-properties-fsx-filesystem-lustreconfiguration.html" in row.reason


def test_a_replacement_acknowledged_by_naming_the_file_system_warns_and_lets_the_deploy_go(aws, moto_endpoint,
                                                                                          moto_clients, tmp_path):
    fs = deploy(moto_endpoint, prod(tmp_path, trainingAvailabilityZone="us-east-1b"))
    row = judged(prod(tmp_path), moto_clients, abandon=fs)[redeploy.FILE_SYSTEM_ROW]
    assert row.status == WARN, row.reason
    for words in (f"acknowledged (--abandon-file-system {fs})", "kept outside the stack", "aws fsx delete-file-system"):
        assert words in row.reason, row.reason


def test_an_acknowledgement_naming_another_file_system_fails(aws, moto_endpoint, moto_clients, tmp_path):
    fs = deploy(moto_endpoint, prod(tmp_path, trainingAvailabilityZone="us-east-1b"))
    row = judged(prod(tmp_path), moto_clients, abandon="fs-0123456789abcdef0")[redeploy.FILE_SYSTEM_ROW]
    assert row.status == FAIL
    assert f"--abandon-file-system names fs-0123456789abcdef0, but the deployed file system is {fs}" in row.reason


def test_an_acknowledgement_when_nothing_is_replaced_warns_that_it_is_unused(aws, moto_endpoint, moto_clients,
                                                                              tmp_path):
    fs = deploy(moto_endpoint, prod(tmp_path))
    row = judged(prod(tmp_path), moto_clients, abandon=fs)[redeploy.FILE_SYSTEM_ROW]
    assert row.status == WARN and "replaces no file system" in row.reason, row.reason


@pytest.mark.parametrize("deployed, configured, status, words", [
    ("1.35", "1.35", PASS, ["prod-training runs 1.35"]),
    ("1.34", "1.35", PASS, ["updates prod-training from 1.34 to 1.35"]),
    ("1.36", "1.35", FAIL, ["environments.prod.kubernetesVersion is 1.35, the cluster prod-training runs 1.36: "
                            "EKS cannot downgrade a cluster", "set kubernetesVersion to 1.36"]),
    ("1.33", "1.35", FAIL, ["environments.prod.kubernetesVersion is 1.35, the cluster prod-training runs 1.33: "
                            "EKS updates one minor version at a time", "set 1.34, deploy, then 1.35"]),
])
def test_kubernetes_version_may_stay_or_go_up_one_minor_version(aws, moto_endpoint, moto_clients, tmp_path,
                                                                 deployed, configured, status, words):
    deploy(moto_endpoint, prod(tmp_path), version=deployed)
    rows = judged(prod(tmp_path, kubernetesVersion=configured), moto_clients)
    row = rows[redeploy.KUBERNETES_ROW]
    assert row.status == status and all(w in row.reason for w in words), row.reason
    if status == FAIL:
        assert "update-cluster.html" in row.reason
        assert_only_failing(rows, redeploy.KUBERNETES_ROW)


def test_another_vpc_cidr_fails_naming_both_ranges(aws, moto_endpoint, moto_clients, tmp_path):
    deploy(moto_endpoint, prod(tmp_path, vpcCidr="10.32.0.0/16"))
    row = judged(prod(tmp_path), moto_clients)[redeploy.VPC_ROW]
    assert row.status == FAIL
    for words in ("environments.prod.vpcCidr is 10.16.0.0/16", "is 10.32.0.0/16", "set vpcCidr back to 10.32.0.0/16"):
        assert words in row.reason, row.reason


def test_a_pipeline_deployed_stage_is_found_by_its_prefixed_stack_names(aws, moto_endpoint, moto_clients, tmp_path):
    fs = deploy(moto_endpoint, prod(tmp_path, fsx={"storageCapacityGiB": 9600}), stack_prefix="Pipeline-")
    rows = judged(prod(tmp_path), moto_clients)
    assert rows[redeploy.CAPACITY_ROW].status == FAIL and fs in rows[redeploy.CAPACITY_ROW].reason


def test_a_file_system_gone_from_under_its_stack_warns(aws, moto_endpoint, moto_clients, tmp_path):
    deploy_registry(moto_endpoint, "prod-Storage", {FSX_FILE_SYSTEM_ID_OUTPUT: "fs-0123456789abcdef0"}, region=REGION)
    rows = judged(prod(tmp_path), moto_clients)
    assert rows[redeploy.CAPACITY_ROW].status == WARN
    assert "fs-0123456789abcdef0" in rows[redeploy.CAPACITY_ROW].reason


def test_make_deploys_preflight_fails_on_a_zone_move_and_passes_with_the_acknowledgement(aws, moto_endpoint,
                                                                                          tmp_path):
    fs = deploy(moto_endpoint, prod(tmp_path, trainingAvailabilityZone="us-east-1b"))
    context = write_context(tmp_path, "prod")  # as shipped: the training zone us-east-1a
    base = ["preflight", "--env", "prod", "--context-file", str(context), "-o", "json"]
    env = isolated_aws_env(tmp_path, aws)
    refused = run_ops(base, env)
    assert f"ABANDON_FSX={fs}" in refused.stdout and refused.returncode == 1, refused.stderr
    acknowledged = run_ops(base + ["--abandon-file-system", fs], env)
    assert f"acknowledged (--abandon-file-system {fs})" in acknowledged.stdout, acknowledged.stderr


@pytest.mark.parametrize("value", ["fs-XYZ", "subnet-0123456789abcdef0", ""])
def test_a_malformed_abandon_file_system_is_a_one_line_usage_error(tmp_path, value):
    result = run_ops(["preflight", "--env", "prod", "--abandon-file-system", value], isolated_aws_env(tmp_path))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [line] = result.stderr.splitlines()
    assert "--abandon-file-system" in line and "fs-" in line, line
