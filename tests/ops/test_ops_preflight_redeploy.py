"""preflight compares what is deployed with cdk.json (ops/redeploy.py): the edits CloudFormation or
EKS refuse only after a long wait (a smaller file system, a Kubernetes downgrade or skip, another
vpcCidr, an admin role that moves to another access entry), and the one that succeeds and loses
every run's progress (a file system replaced by an empty one). The deployed environment is built on
a moto server: its Network, Storage and Cluster stacks (outputs, the Cluster stack's access entries
in its template), the VPC and subnet, the FSx file system and the EKS cluster."""

from __future__ import annotations

import json

import boto3
import pytest

from config.outputs import FSX_FILE_SYSTEM_ID_OUTPUT, TRAINING_SUBNET_ID_OUTPUT, VPC_ID_OUTPUT
from ops import fsx_backup, redeploy
from ops.redeploy import access_entry_conflicts, first_of_two_deploys
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
           copy_tags: bool | None = None, version: str | None = None, backup_id: str | None = None) -> str:
    """`env` as a deploy of it leaves it: the Network and Storage stacks with their outputs (the
    Storage stack's template holds the file system, created from `env`'s fsx.backupId or `backup_id`),
    the VPC and training subnet, the file system in it and the cluster. The file system's id."""
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
    deploy_storage_stack(endpoint, f"{stack_prefix}{env.name}-Storage", fs, backup_id or env.fsx.backup_id)
    return fs


def deploy_storage_stack(endpoint: str, name: str, fs: str, backup_id: str | None) -> None:
    """The Storage stack as cdk deploys it, reduced to what preflight reads: the file system's id
    output, and the file system resource with its BackupId when it was created from a backup."""
    properties = {"FileSystemType": "LUSTRE", **({"BackupId": backup_id} if backup_id else {})}
    template = {"Resources": {"FileSystemFE279E47": {"Type": "AWS::FSx::FileSystem", "Properties": properties}},
                "Outputs": {FSX_FILE_SYSTEM_ID_OUTPUT: {"Value": fs}}}
    cloudformation = boto3.client("cloudformation", region_name=REGION, endpoint_url=endpoint)
    cloudformation.create_stack(StackName=name, TemplateBody=json.dumps(template))


def judged(env, aws_clients, abandon: str | None = None, *, count: int = 6) -> dict:
    rows = guarded(redeploy.steps(env, aws_clients, abandon))
    assert len({r.name for r in rows}) == len(rows) == count, rows
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
    assert "no prod-Cluster stack yet" in rows[redeploy.ADMINS_ROW].reason


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


BACKUP, OTHER_BACKUP = "backup-0123456789abcdef0", "backup-0fedcba9876543210"


def test_a_file_system_created_from_a_backup_stays_while_fsx_backup_id_stays(aws, moto_endpoint, moto_clients,
                                                                             tmp_path):
    env = prod(tmp_path, fsx={"backupId": BACKUP})
    fs = deploy(moto_endpoint, env)
    rows = judged(env, moto_clients)
    assert {r.status for r in rows.values()} == {PASS}, rows
    assert f"{fs} stays" in rows[redeploy.FILE_SYSTEM_ROW].reason


@pytest.mark.parametrize("deployed, configured, words", [
    (BACKUP, None, f"environments.prod.fsx.backupId is not set, {{fs}} was created from {BACKUP}: keep fsx.backupId "
                   f"{BACKUP} as deployed"),
    (BACKUP, OTHER_BACKUP, f"environments.prod.fsx.backupId is {OTHER_BACKUP}, {{fs}} was created from {BACKUP}: keep "
                           f"fsx.backupId {BACKUP} as deployed"),
    (None, BACKUP, f"environments.prod.fsx.backupId is {BACKUP}, but {{fs}} exists, created empty: a file system is "
                   "created from a backup only when it is made"),
])
def test_a_changed_removed_or_added_backup_id_fails_as_a_replacement(aws, moto_endpoint, moto_clients, tmp_path,
                                                                     deployed, configured, words):
    """AWS::FSx::FileSystem BackupId is "Update requires: Replacement" (aws-resource-fsx-filesystem.html;
    createOnlyProperties in cfn-lint's schema): FSx DescribeFileSystems does not say what a file
    system was created from, so the row reads the Storage stack's deployed template."""
    fs = deploy(moto_endpoint, prod(tmp_path), backup_id=deployed)
    rows = judged(prod(tmp_path, fsx={"backupId": configured}), moto_clients)
    assert_only_failing(rows, redeploy.FILE_SYSTEM_ROW)
    row = rows[redeploy.FILE_SYSTEM_ROW]
    assert row.status == FAIL
    for text in (words.format(fs=fs), "Update requires: Replacement", "aws-resource-fsx-filesystem.html",
                 f"ABANDON_FSX={fs}"):
        assert text in row.reason, row.reason
    new = f"a new file system created from {configured}" if configured else "a new, empty file system"
    assert f"replaces {fs} with {new}" in row.reason, row.reason


def test_restoring_a_backup_over_a_deployed_file_system_on_purpose_is_acknowledged_like_any_replacement(
        aws, moto_endpoint, moto_clients, tmp_path):
    fs = deploy(moto_endpoint, prod(tmp_path))
    row = judged(prod(tmp_path, fsx={"backupId": BACKUP}), moto_clients, abandon=fs)[redeploy.FILE_SYSTEM_ROW]
    assert row.status == WARN and f"acknowledged (--abandon-file-system {fs})" in row.reason, row.reason
    assert f"a new file system created from {BACKUP}" in row.reason, row.reason


def test_a_storage_template_the_role_may_not_read_warns_that_backup_id_was_not_compared(aws, moto_endpoint, tmp_path):
    from botocore.stub import Stubber

    env = prod(tmp_path, fsx={"backupId": BACKUP})
    fs = deploy(moto_endpoint, env)
    aws_clients = clients(REGION)
    stubber = Stubber(aws_clients.cloudformation)
    stubber.add_response("describe_stacks", aws_clients.cloudformation.describe_stacks(StackName="prod-Storage"),
                         {"StackName": "prod-Storage"})
    stubber.add_client_error("get_template", "AccessDenied", "not authorized to perform: cloudformation:GetTemplate")
    with stubber:
        rows = {r.name: r for r in redeploy.file_system_rows(env, aws_clients)}
    assert rows[redeploy.CAPACITY_ROW].status == PASS
    row = rows[redeploy.FILE_SYSTEM_ROW]
    assert row.status == WARN and fs in row.reason, row.reason
    assert "fsx.backupId was not compared" in row.reason and "GetTemplate not permitted (AccessDenied)" in row.reason


def backup(lifecycle: str = "AVAILABLE", capacity: int = 4800, deployment_type: str = "PERSISTENT_2",
           fs_type: str = "LUSTRE") -> dict:
    """DescribeBackups' answer for BACKUP: a backup of fs-0aaaaaaaaaaaaaaaa (moto keeps no file
    system metadata with a backup and never finishes one, so these rows use botocore's Stubber)."""
    from datetime import datetime, timezone

    return {"Backups": [{
        "BackupId": BACKUP, "Lifecycle": lifecycle, "Type": "USER_INITIATED",
        "CreationTime": datetime(2026, 11, 20, 18, 5, tzinfo=timezone.utc),
        "FileSystem": {"FileSystemId": "fs-0aaaaaaaaaaaaaaaa", "FileSystemType": fs_type, "StorageCapacity": capacity,
                       "LustreConfiguration": {"DeploymentType": deployment_type}}}]}


def backup_row(env, answer: dict | tuple[str, str]):
    """The rows of a deploy of `env` with no Storage stack yet, DescribeBackups answering `answer`
    (a response, or an error code and message)."""
    from botocore.stub import Stubber

    aws_clients = clients(REGION)
    stubber = Stubber(aws_clients.fsx)
    if isinstance(answer, tuple):
        stubber.add_client_error("describe_backups", *answer)
    else:
        stubber.add_response("describe_backups", answer, {"BackupIds": [BACKUP]})
    with stubber:
        rows = {r.name: r for r in redeploy.file_system_rows(env, aws_clients)}
    stubber.assert_no_pending_responses()
    assert [r.status for n, r in rows.items() if n != fsx_backup.BACKUP_ROW] == [PASS, PASS], rows
    assert "\n" not in rows[fsx_backup.BACKUP_ROW].reason
    return rows[fsx_backup.BACKUP_ROW]


def test_a_restore_deploy_passes_an_available_lustre_backup_of_the_configured_capacity(aws, tmp_path):
    row = backup_row(prod(tmp_path, fsx={"backupId": BACKUP}), backup())
    assert row.status == PASS, row.reason
    for words in (f"{BACKUP} is AVAILABLE", "fs-0aaaaaaaaaaaaaaaa", "4800 GiB", "2026-11-20 18:05 UTC"):
        assert words in row.reason, row.reason


@pytest.mark.parametrize("answer, words", [
    (backup(capacity=9600), ["environments.prod.fsx.storageCapacityGiB is 4800", f"{BACKUP} is of a 9600 GiB",
                             "takes the backup's capacity", "API_CreateFileSystemFromBackup.html",
                             "set storageCapacityGiB to 9600"]),
    (backup(capacity=2400), ["environments.prod.fsx.storageCapacityGiB is 4800", "set storageCapacityGiB to 2400"]),
    (backup(lifecycle="CREATING"), [f"environments.prod.fsx.backupId is {BACKUP}, which is CREATING",
                                    "wait until", "AVAILABLE"]),
    (backup(lifecycle="FAILED"), [f"{BACKUP}, which is FAILED", "choose another backup",
                                  "Name=file-system-id,Values=fs-0aaaaaaaaaaaaaaaa"]),
    (backup(fs_type="OPENZFS"), [f"{BACKUP} is a backup of an OPENZFS file system", "Lustre"]),
    ({"Backups": []}, [f"environments.prod.fsx.backupId is {BACKUP}, which does not exist in us-east-1"]),
    (("BackupNotFound", "No Backup with ID found"), [f"{BACKUP}, which does not exist in us-east-1",
                                                     "aws fsx describe-backups --region us-east-1"]),
])
def test_a_restore_deploy_fails_on_a_backup_it_cannot_create_the_file_system_from(aws, tmp_path, answer, words):
    row = backup_row(prod(tmp_path, fsx={"backupId": BACKUP}), answer)
    assert row.status == FAIL
    for text in words:
        assert text in row.reason, row.reason


@pytest.mark.parametrize("answer, words", [
    (backup(deployment_type="PERSISTENT_1"), [f"{BACKUP} is of a PERSISTENT_1 file system",
                                              "this deploy creates PERSISTENT_2"]),
    (("AccessDenied", "not authorized to perform: fsx:DescribeBackups"),
     [f"could not read {BACKUP}", "DescribeBackups not permitted (AccessDenied)"]),
])
def test_a_restore_deploy_warns_where_it_cannot_tell(aws, tmp_path, answer, words):
    row = backup_row(prod(tmp_path, fsx={"backupId": BACKUP}), answer)
    assert row.status == WARN
    for text in words:
        assert text in row.reason, row.reason


def test_make_deploys_preflight_fails_on_a_backup_that_does_not_exist(aws, tmp_path):
    """moto answers DescribeBackups with no backup for an id it does not hold."""
    context = write_context(tmp_path, "prod", fsx={**json.loads(CDK_JSON.read_text())["context"]["environments"]
                                                         ["prod"]["fsx"], "backupId": BACKUP})
    result = run_ops(["preflight", "--env", "prod", "--context-file", str(context), "-o", "json"],
                     isolated_aws_env(tmp_path, aws))
    assert result.returncode == 1, result.stderr
    [row] = [r for r in json.loads(result.stdout)["checks"] if r["name"] == "fsx.backupId"]
    assert row["status"] == "fail" and "does not exist" in row["reason"], row


@pytest.mark.parametrize("value", ["fs-XYZ", "subnet-0123456789abcdef0", ""])
def test_a_malformed_abandon_file_system_is_a_one_line_usage_error(tmp_path, value):
    result = run_ops(["preflight", "--env", "prod", "--abandon-file-system", value], isolated_aws_env(tmp_path))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [line] = result.stderr.splitlines()
    assert "--abandon-file-system" in line and "fs-" in line, line


# Logical ids as cdk synth gives the Cluster stack's access entries (tests/stacks/test_cluster.py
# pins them against a synth): the construct path Cluster/<id> and 8 hex digits of its hash.
ENTRY_IDS = {"Admin0": "ClusterAdmin0100BBD4C", "Admin1": "ClusterAdmin10A10DA7C", "Admin2": "ClusterAdmin2924602D3",
             "Deployer": "ClusterDeployer2A7FDA0A"}
A, B, C, D = (f"arn:aws:iam::222222222222:role/{n}" for n in ("RoleA", "RoleB", "RoleC", "RoleD"))


def deploy_cluster_stack(endpoint: str, admins: list[str], deployer: str | None = None, *, name: str = "prod-Cluster",
                         handler: bool = True) -> None:
    """The Cluster stack as a deploy of `admins` (and `deployer`) leaves it: an access entry per
    principal, keyed by position, beside the kubectl handler's own (its role's ARN is a GetAtt)."""
    entries = [(f"Admin{i}", arn) for i, arn in enumerate(admins)] + ([("Deployer", deployer)] if deployer else [])
    resources = {ENTRY_IDS[cid]: {"Type": "AWS::EKS::AccessEntry",
                                  "Properties": {"ClusterName": "prod-training", "PrincipalArn": arn}}
                 for cid, arn in entries}
    if handler:
        resources["ClusterClusterAdminRoleAccessF2BFF759"] = {
            "Type": "AWS::EKS::AccessEntry", "Properties": {
                "ClusterName": "prod-training",
                "PrincipalArn": {"Fn::GetAtt": ["ClusterKubectlProviderHandlerServiceRoleB460AA6D", "Arn"]}}}
    cloudformation = boto3.client("cloudformation", region_name=REGION, endpoint_url=endpoint)
    cloudformation.create_stack(StackName=name, TemplateBody=json.dumps({"Resources": resources}))


def entries(admins: list[str], deployer: str | None = None) -> dict[str, str]:
    return {**{f"Admin{i}": arn for i, arn in enumerate(admins)}, **({"Deployer": deployer} if deployer else {})}


def creations(deployed: dict[str, str], configured: dict[str, str]) -> list[tuple[str, str]]:
    """What CloudFormation creates, in the update's first phase, for an update from `deployed` to
    `configured`: a new id, or an id whose PrincipalArn changes (create-only, so a replacement,
    created before the old one is deleted in the clean-up phase)."""
    return [(cid, arn) for cid, arn in configured.items() if deployed.get(cid) != arn]


def refused(deployed: dict[str, str], configured: dict[str, str]) -> bool:
    """Whether EKS refuses one of that update's creations: every deployed entry still exists while
    the update creates, and EKS holds one access entry per principal (ResourceInUseException)."""
    return any(arn in deployed.values() for _, arn in creations(deployed, configured))


@pytest.mark.parametrize("deployed, configured", [
    (entries([A, B]), entries([A, B])),
    (entries([A, B]), entries([A, B, C])),  # appended
    (entries([A, B, C]), entries([A, B])),  # removed from the end
    (entries([A, B]), entries([A, C])),  # replaced in place by a role nobody holds
    (entries([A], D), entries([A], C)),  # another deployer
    (entries([A], D), entries([A])),  # deployer dropped
])
def test_edits_that_keep_each_deployed_principal_at_its_entry_conflict_with_nothing(deployed, configured):
    assert not refused(deployed, configured)
    assert access_entry_conflicts(deployed, configured) == []


@pytest.mark.parametrize("deployed, configured, moves", [
    (entries([A, B]), entries([B]), [(B, "Admin1", "Admin0")]),  # the first role removed
    (entries([A, B]), entries([B, A]), [(B, "Admin1", "Admin0"), (A, "Admin0", "Admin1")]),  # reordered
    (entries([A]), entries([C, A]), [(A, "Admin0", "Admin1")]),  # a role put first
    (entries([A, B, C]), entries([A, C]), [(C, "Admin2", "Admin1")]),  # a middle role removed
    (entries([A], D), entries([A, D]), [(D, "Deployer", "Admin1")]),  # the deployer made an admin role
    (entries([A, D]), entries([A], D), [(D, "Admin1", "Deployer")]),  # an admin role made the deployer
])
def test_a_principal_that_moves_to_another_entry_is_a_conflict(deployed, configured, moves):
    """AWS::EKS::AccessEntry's PrincipalArn is create-only (cfn-lint 1.58.0's schema,
    cfnlint/data/schemas/resources/7e47c035c1923d24.json: createOnlyProperties PrincipalArn,
    ClusterName, Type; "Update requires: Replacement" in
    https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-eks-accessentry.html),
    so CloudFormation creates the entry with the moved principal while the entry that holds it is
    still there, and EKS answers 409 ResourceInUseException "The specified access entry resource is
    already in use on this cluster" (as terraform-aws-modules/terraform-aws-eks#3293 met it)."""
    assert refused(deployed, configured)
    assert access_entry_conflicts(deployed, configured) == moves


@pytest.mark.parametrize("deployed, configured", [
    (entries([A, B]), entries([B])),
    (entries([A, B]), entries([B, A])),
    (entries([A, B, C]), entries([A, C])),
    (entries([A, B, C]), entries([C, B, A], D)),
    (entries([A], D), entries([A, D])),
    (entries([A, D]), entries([A], D)),
    (entries([A, B], D), entries([D, B], A)),
])
def test_the_two_deploys_the_row_advises_are_each_conflict_free(deployed, configured):
    """The first deploy keeps the longest prefix of deployed admin roles that each stay at their
    entry or leave the configuration, and the deployer if it stays or leaves: it only deletes
    entries, so it creates nothing EKS could refuse. The second creates each entry whose principal
    changes; a principal still held then sits, after the first deploy, at an entry other than its
    new one, so it is in the new configuration at another place, which the first deploy removed.
    Both steps are checked here with the create-before-delete model above, not with the row's code."""
    admins, deployer = first_of_two_deploys(deployed, configured)
    first = entries(list(admins), deployer)
    assert first.items() <= deployed.items(), "the first deploy only deletes"
    assert not refused(deployed, first) and not refused(first, configured)
    assert access_entry_conflicts(first, configured) == []


def test_the_first_of_two_deploys_keeps_what_it_can():
    assert first_of_two_deploys(entries([A, B, C]), entries([A, C])) == ((A, B), None)  # B leaves: kept a deploy longer
    assert first_of_two_deploys(entries([A, B], D), entries([B, A], D)) == ((), D)
    assert first_of_two_deploys(entries([A, B, C]), entries([B, C])) == ((A,), None)


def test_an_admin_role_removed_from_the_front_fails_naming_the_moves_and_the_safe_way(aws, moto_endpoint,
                                                                                    moto_clients, tmp_path):
    deploy_cluster_stack(moto_endpoint, [A, B, C])
    rows = judged(prod(tmp_path, adminRoleArns=[B, C]), moto_clients)
    assert_only_failing(rows, redeploy.ADMINS_ROW)
    row = rows[redeploy.ADMINS_ROW]
    assert row.status == FAIL
    for words in ("environments.prod.adminRoleArns", f"{B} moves from adminRoleArns[1] to adminRoleArns[0]",
                  f"{C} moves from adminRoleArns[2] to adminRoleArns[1]", "ResourceInUseException",
                  "aws-resource-eks-accessentry.html", "remove roles only from the end",
                  f"first with adminRoleArns [{A}], then with the new list"):
        assert words in row.reason, row.reason


def test_the_deployer_made_an_admin_role_fails_naming_deployer_principal_arn(aws, moto_endpoint, moto_clients,
                                                                             tmp_path):
    deploy_cluster_stack(moto_endpoint, [A], D)
    row = judged(prod(tmp_path, adminRoleArns=[A, D]), moto_clients)[redeploy.ADMINS_ROW]
    assert row.status == FAIL
    assert f"{D} moves from deployerPrincipalArn to adminRoleArns[1]" in row.reason, row.reason
    assert f"first with adminRoleArns [{A}] and no deployerPrincipalArn" in row.reason, row.reason


def test_no_deployed_role_left_for_the_first_deploy_says_to_name_a_deployer_for_it(aws, moto_endpoint, moto_clients,
                                                                                   tmp_path):
    deploy_cluster_stack(moto_endpoint, [A])
    row = judged(prod(tmp_path, adminRoleArns=[C, A]), moto_clients)[redeploy.ADMINS_ROW]
    assert row.status == FAIL
    assert "adminRoleArns may be empty only with deployerPrincipalArn" in row.reason, row.reason


@pytest.mark.parametrize("deployed, configured, words", [
    ([A, B], [A, B], "2 admin access entries keep their principals"),
    ([A, B], [A, B, C], f"adds {C}"),
    ([A, B, C], [A], "removes adminRoleArns[1], adminRoleArns[2]"),
])
def test_admin_roles_unchanged_appended_or_cut_from_the_end_pass(aws, moto_endpoint, moto_clients, tmp_path,
                                                                 deployed, configured, words):
    deploy_cluster_stack(moto_endpoint, deployed)
    row = judged(prod(tmp_path, adminRoleArns=configured), moto_clients)[redeploy.ADMINS_ROW]
    assert row.status == PASS and words in row.reason, row.reason


def test_a_pipeline_deployed_cluster_stack_is_read_too(aws, moto_endpoint, moto_clients, tmp_path):
    deploy_cluster_stack(moto_endpoint, [A, B], name="Pipeline-prod-Cluster")
    row = judged(prod(tmp_path, adminRoleArns=[B]), moto_clients)[redeploy.ADMINS_ROW]
    assert row.status == FAIL and "Pipeline-prod-Cluster" in row.reason, row.reason


def test_a_template_the_role_may_not_read_warns(aws, moto_endpoint, tmp_path):
    """A read-only role without cloudformation:GetTemplate: the row warns, the others still judge."""
    from botocore.stub import Stubber

    deploy_cluster_stack(moto_endpoint, [A, B])
    aws_clients = clients(REGION)
    stubber = Stubber(aws_clients.cloudformation)
    stubber.add_response("describe_stacks", aws_clients.cloudformation.describe_stacks(StackName="prod-Cluster"),
                         {"StackName": "prod-Cluster"})
    stubber.add_client_error("get_template", "AccessDenied", "not authorized to perform: cloudformation:GetTemplate")
    step = [s for s in redeploy.steps(prod(tmp_path, adminRoleArns=[B]), aws_clients) if s[0] == redeploy.ADMINS_ROW]
    with stubber:
        [row] = guarded(step)
    assert row.status == WARN and "GetTemplate not permitted (AccessDenied)" in row.reason, row.reason


def admins_row_with_cluster_entries(tmp_path, configured: list[str], answer: list[str] | tuple[str, str]):
    """The admins row of a deploy of `configured` over a Cluster stack of [A, B], the cluster's own
    access entries answering `answer` (principal ARNs, or an error code and message). moto has no
    access entries, so the EKS client is a Stubber: the cluster found by name, then its list."""
    from botocore.stub import Stubber

    aws_clients = clients(REGION)
    stubber = Stubber(aws_clients.eks)
    stubber.add_response("describe_cluster", {"cluster": {"name": "prod-training"}}, {"name": "prod-training"})
    if isinstance(answer, tuple):
        stubber.add_client_error("list_access_entries", *answer)
    else:
        stubber.add_response("list_access_entries", {"accessEntries": answer}, {"clusterName": "prod-training"})
    step = [s for s in redeploy.steps(prod(tmp_path, adminRoleArns=configured), aws_clients)
            if s[0] == redeploy.ADMINS_ROW]
    with stubber:
        [row] = guarded(step)
    stubber.assert_no_pending_responses()
    assert "\n" not in row.reason
    return row


HANDLER_ROLE = "arn:aws:iam::222222222222:role/prod-Cluster-KubectlHandlerRole-1A2B3C"


def test_a_role_the_deploy_adds_that_already_has_an_entry_made_outside_the_stack_fails(aws, moto_endpoint, tmp_path):
    """Someone gave C cluster access with the console; adding C to adminRoleArns creates a second
    entry for it, which EKS refuses (one entry per principal), after the Cluster stack's wait."""
    deploy_cluster_stack(moto_endpoint, [A, B])
    row = admins_row_with_cluster_entries(tmp_path, [A, B, C], [A, B, C, HANDLER_ROLE])
    assert row.status == FAIL, row.reason
    for words in ("environments.prod.adminRoleArns", f"{C} already has an access entry on cluster prod-training",
                  "prod-Cluster did not create", "You can't specify the same ARN in more than one access entry",
                  "API_CreateAccessEntry.html", "ResourceInUseException",
                  f"aws eks delete-access-entry --cluster-name prod-training --principal-arn {C}"):
        assert words in row.reason, row.reason
    assert A not in row.reason.split("already")[0], "A and B are the stack's own entries"


def test_a_role_the_deploy_adds_that_holds_no_entry_yet_passes(aws, moto_endpoint, tmp_path):
    deploy_cluster_stack(moto_endpoint, [A, B])
    row = admins_row_with_cluster_entries(tmp_path, [A, B, C], [A, B, HANDLER_ROLE])
    assert row.status == PASS and f"adds {C}" in row.reason, row.reason


def test_a_cluster_whose_entries_the_role_may_not_list_warns_naming_the_roles_unchecked(aws, moto_endpoint, tmp_path):
    deploy_cluster_stack(moto_endpoint, [A, B])
    row = admins_row_with_cluster_entries(tmp_path, [A, B, C], ("AccessDeniedException",
                                                                "not authorized to perform: eks:ListAccessEntries"))
    assert row.status == WARN, row.reason
    assert "ListAccessEntries not permitted (AccessDeniedException)" in row.reason and C in row.reason, row.reason
