"""The pipeline's preflight step (stacks/pipeline.py): `python -m ops preflight --pipeline --assume-role
ARN`, run as the step runs it, in the pipeline account, reading the environment's account as its CDK
bootstrap lookup role. On a moto server: credentials of an IAM user of the pipeline account, the lookup
role in prod's account, prod deployed there as a deploy leaves it (test_ops_preflight_redeploy.deploy)."""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
import subprocess
import sys

import boto3
import pytest

from config.pipeline import lookup_role_name
from ops import access, api_switch, machine, redeploy
from ops.checks import FAIL, PASS, SKIP
from ops.envconfig import load
from ops.preflight import PIPELINE_SKIPS, pipeline_skips
from ops_fakes import REPO_ROOT, isolated_aws_env, run_ops, write_context
from test_ops_preflight_redeploy import REGION, deploy, prod
from test_ops_preflight_redeploy_nodegroups import OTHER, deploy_groups, gpu_group

PIPELINE_ACCOUNT = "333333333333"  # cdk.json's pipeline.account
PROD_ACCOUNT = "222222222222"
LOOKUP_ROLE = f"arn:aws:iam::{PROD_ACCOUNT}:role/{lookup_role_name(PROD_ACCOUNT, REGION)}"


def as_account(monkeypatch, account: str | None) -> None:
    """Whom the moto server (in this process) takes plain credentials for; None: by their access key."""
    if account is None:
        monkeypatch.delenv("MOTO_ACCOUNT_ID", raising=False)
    else:
        monkeypatch.setenv("MOTO_ACCOUNT_ID", account)


@pytest.fixture
def pipeline(aws, monkeypatch, tmp_path):
    """The process environment of the pipeline's step: an IAM user's keys in the pipeline account, and
    prod's account bootstrapped with --trust PIPELINE (its lookup role, the bootstrap version) and
    holding its admin role. Returns (environment, deployer): `deployer` deploys into prod's account,
    as the pipeline's earlier runs did."""
    kw = dict(region_name=REGION, endpoint_url=aws)
    as_account(monkeypatch, PROD_ACCOUNT)
    iam = boto3.client("iam", **kw)
    iam.create_role(
        RoleName=lookup_role_name(PROD_ACCOUNT, REGION), AssumeRolePolicyDocument=json.dumps({"Statement": [
            {"Effect": "Allow", "Principal": {"AWS": PIPELINE_ACCOUNT}, "Action": "sts:AssumeRole"}]}))
    iam.create_role(RoleName="PlatformAdmin", AssumeRolePolicyDocument=json.dumps({"Statement": []}))
    boto3.client("ssm", **kw).put_parameter(Name=machine.BOOTSTRAP_PARAMETER, Value="30", Type="String")
    as_account(monkeypatch, PIPELINE_ACCOUNT)
    iam = boto3.client("iam", **kw)
    iam.create_user(UserName="codebuild")
    key = iam.create_access_key(UserName="codebuild")["AccessKey"]
    env = isolated_aws_env(tmp_path, aws)
    env.update(AWS_ACCESS_KEY_ID=key["AccessKeyId"], AWS_SECRET_ACCESS_KEY=key["SecretAccessKey"])

    def deployer(configured):
        as_account(monkeypatch, PROD_ACCOUNT)
        try:
            return deploy(aws, configured)
        finally:
            as_account(monkeypatch, None)

    as_account(monkeypatch, None)
    return env, deployer


def step(tmp_path, env: dict, **changes):
    """The step's command (stacks/pipeline.py preflight_command) on prod as cdk.json ships it, changed
    by `changes`; (exit code, rows by name, stderr)."""
    context = write_context(tmp_path, "prod", **changes)
    result = run_ops(["preflight", "--env", "prod", "--context-file", str(context), "--pipeline",
                      "--assume-role", LOOKUP_ROLE, "-o", "json"], env)
    rows = {r["name"]: r for r in json.loads(result.stdout)["checks"]} if result.stdout else {}
    return result.returncode, rows, result.stderr


def verdicts(rows: dict) -> dict:
    return {name: row["status"] for name, row in rows.items()}


def test_a_clean_environment_passes_read_as_the_lookup_role_of_its_own_account(pipeline, tmp_path):
    env, deployer = pipeline
    deployer(prod(tmp_path))
    code, rows, err = step(tmp_path, env)
    assert code == 0 and FAIL not in verdicts(rows).values(), (err, rows)
    # The step's own keys are the pipeline account's: only the assumed role reads prod's account.
    assert rows["credentials"]["status"] == PASS and PROD_ACCOUNT in rows["credentials"]["reason"]
    for name in (redeploy.CAPACITY_ROW, redeploy.FILE_SYSTEM_ROW, redeploy.KUBERNETES_ROW, redeploy.VPC_ROW,
                 "leftover log groups", "admin role PlatformAdmin", "CDK bootstrap"):
        assert rows[name]["status"] == PASS, rows[name]


def test_without_the_role_the_same_keys_read_the_pipeline_account_and_fail(pipeline, tmp_path):
    env, deployer = pipeline
    deployer(prod(tmp_path))
    result = run_ops(["preflight", "--env", "prod", "--context-file", str(write_context(tmp_path, "prod")),
                      "--pipeline", "-o", "json"], env)
    rows = {r["name"]: r for r in json.loads(result.stdout)["checks"]}
    assert result.returncode == 1 and rows["credentials"]["status"] == FAIL, rows["credentials"]
    assert f"credentials are for account {PIPELINE_ACCOUNT}" in rows["credentials"]["reason"]


def test_the_rows_about_this_machine_and_the_clusters_api_are_skipped_each_saying_why(pipeline, tmp_path):
    env, deployer = pipeline
    deployer(prod(tmp_path))
    _, rows, _ = step(tmp_path, env)
    skipped = {name: row["reason"] for name, row in rows.items() if row["status"] == SKIP}
    assert list(skipped) == [name for name, _ in PIPELINE_SKIPS]
    for name, why in PIPELINE_SKIPS:
        assert skipped[name].startswith(f"not checked in the pipeline: {why}")
    # prod keeps its data on destroy, so it has no training drain to refuse a trainingApi switch.
    assert "no training drain, so nothing in the deploy refuses it" in skipped[api_switch.ROW]
    assert "python -m ops preflight --env prod` where the cluster's API is reachable" in skipped[api_switch.ROW]
    # They are the rows `make deploy`'s preflight has under those names.
    made_here = [access.endpoint_row(prod(tmp_path)).name, api_switch.ROW,
                 *(r.name for r in machine.tool_rows(str(tmp_path / "no-tools")))]
    assert set(made_here) | {"cluster admin"} == set(skipped)
    table = run_ops(["preflight", "--env", "prod", "--context-file", str(write_context(tmp_path, "prod")),
                     "--pipeline", "--assume-role", LOOKUP_ROLE], env).stdout
    assert table.splitlines()[0].startswith("preflight prod (pipeline): ")
    assert f"{len(PIPELINE_SKIPS)} skipped" in table.splitlines()[-1], table


def test_where_the_training_drain_guards_the_switch_the_skipped_row_says_so(tmp_path):
    dev = load("dev", str(write_context(tmp_path, "dev")))
    assert not dev.retain
    [row] = [r for r in pipeline_skips(dev) if r.name == api_switch.ROW]
    assert row.status == SKIP and "the training drain refuses the switch" in row.reason, row.reason


@pytest.mark.parametrize("deployed, configured, failing", [
    ({"fsx": {"storageCapacityGiB": 9600}}, {}, [redeploy.CAPACITY_ROW]),
    ({}, {"kubernetesVersion": "1.34"}, [redeploy.KUBERNETES_ROW]),
    # Another range moves the training subnet too, and with it the file system.
    ({"vpcCidr": "10.32.0.0/16"}, {}, [redeploy.FILE_SYSTEM_ROW, redeploy.VPC_ROW]),
])
def test_a_fail_row_fails_the_step(pipeline, tmp_path, deployed, configured, failing):
    env, deployer = pipeline
    deployer(prod(tmp_path, **deployed))
    code, rows, _ = step(tmp_path, env, **configured)
    assert code == 1 and [n for n, s in verdicts(rows).items() if s == FAIL] == failing, rows


def test_a_file_system_replacement_fails_the_step_saying_it_must_be_deployed_by_hand(pipeline, tmp_path):
    env, deployer = pipeline
    fs = deployer(prod(tmp_path, trainingAvailabilityZone="us-east-1b"))
    code, rows, _ = step(tmp_path, env)
    row = rows[redeploy.FILE_SYSTEM_ROW]
    assert code == 1 and row["status"] == FAIL
    for words in ("new, empty file system", "The pipeline cannot acknowledge a replacement",
                  f"`make deploy ENV=prod FORCE=1 ABANDON_FSX={fs}`", "the pipeline's next run then finds nothing"):
        assert words in row["reason"], row["reason"]


def _one_usage_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    [line] = result.stderr.splitlines()
    return line


@pytest.mark.parametrize("extra, words", [
    (["--abandon-file-system", "fs-0123456789abcdef0"],
     ["--abandon-file-system does not apply with --pipeline", "make deploy ENV=prod FORCE=1 ABANDON_FSX=fs-0123456789abcdef0"]),
    (["--kubeconfig", "/nonexistent"], ["--kubeconfig does not apply with --pipeline"]),
    (["--assume-role", "cdk-hnb659fds-lookup-role"], ["--assume-role", "must be an IAM role ARN"]),
])
def test_flags_the_pipeline_step_cannot_use_are_one_line_usage_errors(tmp_path, extra, words):
    result = run_ops(["preflight", "--env", "prod", "--pipeline", *extra], isolated_aws_env(tmp_path))
    line = _one_usage_line(result)
    assert all(w in line for w in words), line


def test_a_role_assumed_without_credentials_is_one_line_naming_the_flag(tmp_path):
    result = run_ops(["preflight", "--env", "prod", "--pipeline", "--assume-role", LOOKUP_ROLE],
                     isolated_aws_env(tmp_path, credentials=False))
    line = _one_usage_line(result)
    assert line.startswith(f"error: --assume-role {LOOKUP_ROLE}: no AWS credentials found"), line


# A `python3` that can import only the standard library, this repository and the given distributions,
# as the step's CodeBuild image after its --no-deps install of the step's pins.
ONLY_THESE = """
import importlib.metadata, re, runpy, sys
allowed = set(sys.argv[1].split(","))
owners = importlib.metadata.packages_distributions()
canon = lambda name: re.sub(r"[-_.]+", "-", name).lower()
class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        dists = owners.get(name.partition(".")[0])
        if dists and not any(canon(d) in allowed for d in dists):
            raise ModuleNotFoundError(f"No module named {name!r} (the step does not install it)", name=name)
sys.meta_path.insert(0, NotInstalled())
sys.argv = ["ops", *sys.argv[2:]]
runpy.run_module("ops", run_name="__main__", alter_sys=True)
"""


def test_the_steps_command_runs_with_only_the_packages_the_step_installs(pipeline, tmp_path):
    """The step's exact command, in a Python that finds nothing but the step's pins: a third-party
    import on the preflight path that the step does not install fails here."""
    from stacks.pipeline import PREFLIGHT_PACKAGES, preflight_command

    env, deployer = pipeline
    deployer(prod(tmp_path))
    env = dict(env, LOOKUP_ROLE_ARN=LOOKUP_ROLE)
    python, *module = [os.path.expandvars(a) if a.startswith("$") else a
                       for a in shlex.split(preflight_command("prod").replace('"$LOOKUP_ROLE_ARN"', LOOKUP_ROLE))]
    assert python == "python3" and module[:2] == ["-m", "ops"]
    allowed = ",".join(p.lower().replace("_", "-") for p in PREFLIGHT_PACKAGES)
    result = subprocess.run([sys.executable, "-c", ONLY_THESE, allowed, *module[2:]], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:] + result.stdout[-2000:]
    assert f"0 failed, {len(PIPELINE_SKIPS)} skipped" in result.stdout.splitlines()[-1], result.stdout


# What the lookup role may call: the Action patterns of the AWS managed policy ReadOnlyAccess
# (https://docs.aws.amazon.com/aws-managed-policy/latest/reference/ReadOnlyAccess.html, its JSON policy
# document) for the services the pipeline's preflight calls, and only those services: a call to any other
# fails the test below until someone checks the policy. Taken from policy version v178 (the document as
# GetPolicyVersion returns it, mirrored in github.com/zoph-io/MAMIP policies/ReadOnlyAccess); for logs
# only the reads. The lookup role's kms:Decrypt deny does not touch ssm:GetParameter of a String.
READ_ONLY_ACCESS = (
    "cloudformation:BatchDescribeTypeConfigurations", "cloudformation:Describe*", "cloudformation:Detect*",
    "cloudformation:Estimate*", "cloudformation:Get*", "cloudformation:List*", "cloudformation:ValidateTemplate",
    "ec2:Describe*", "ec2:Get*", "ec2:ListImagesInRecycleBin", "ec2:ListSnapshotsInRecycleBin",
    "ec2:SearchLocalGatewayRoutes", "ec2:SearchTransitGatewayRoutes",
    "eks:Describe*", "eks:List*",
    "fsx:Describe*", "fsx:List*",
    "iam:Generate*", "iam:Get*", "iam:List*", "iam:Simulate*",
    "logs:Describe*", "logs:FilterLogEvents", "logs:Get*", "logs:ListTagsForResource", "logs:ListTagsLogGroup",
    # Named one by one: the policy has no servicequotas:Get* or servicequotas:List*.
    "servicequotas:GetAssociationForServiceQuotaTemplate", "servicequotas:GetAutoManagementConfiguration",
    "servicequotas:GetAWSDefaultServiceQuota", "servicequotas:GetQuotaUtilizationReport",
    "servicequotas:GetRequestedServiceQuotaChange", "servicequotas:GetServiceQuota",
    "servicequotas:GetServiceQuotaIncreaseRequestFromTemplate", "servicequotas:ListAWSDefaultServiceQuotas",
    "servicequotas:ListRequestedServiceQuotaChangeHistory",
    "servicequotas:ListRequestedServiceQuotaChangeHistoryByQuota",
    "servicequotas:ListServiceQuotaIncreaseRequestsInTemplate", "servicequotas:ListServiceQuotas",
    "servicequotas:ListServices",
    "ssm:Describe*", "ssm:Get*", "ssm:List*",
    "sts:GetAccessKeyInfo", "sts:GetCallerIdentity", "sts:GetSessionToken",
)
# The step's own role may assume the lookup role and nothing else (stacks/pipeline.py _preflight_step;
# tests/stacks/test_pipeline.py holds the synthesized role to it).
STEP_ROLE_ACTIONS = ("sts:AssumeRole",)
# botocore's service name -> the service prefix IAM authorizes its operations under. A service missing
# here fails the test: its prefix, and whether ReadOnlyAccess covers it, are to be looked up first.
IAM_PREFIX = {"cloudformation": "cloudformation", "ec2": "ec2", "eks": "eks", "fsx": "fsx", "iam": "iam",
              "logs": "logs", "service-quotas": "servicequotas", "ssm": "ssm", "sts": "sts"}

# The step's command with every AWS call recorded as botocore is about to make it: service, operation and
# the access key that signs it, one JSON line each (in a call's before-call event: retries and a call the
# endpoint refuses count once, a call that never leaves the process does not happen anyway).
RECORDING = """
import json, runpy, sys
import boto3
path = sys.argv[1]
built = boto3.Session.__init__
def recording(self, *args, **kwargs):
    built(self, *args, **kwargs)
    def record(model, **_):
        with open(path, "a") as out:
            out.write(json.dumps([model.service_model.service_name, model.name,
                                  self.get_credentials().access_key]) + "\\n")
    self.events.register("before-call", record)
boto3.Session.__init__ = recording
sys.argv = ["ops", *sys.argv[2:]]
runpy.run_module("ops", run_name="__main__", alter_sys=True)
"""


def allowed(action: str, patterns=READ_ONLY_ACCESS) -> bool:
    """IAM's match of an action against a policy's Action element: case-insensitive, * any characters."""
    return any(fnmatch.fnmatchcase(action.lower(), pattern.lower()) for pattern in patterns)


def recorded_step(tmp_path, env: dict, **changes) -> tuple[dict, list[str], list[str]]:
    """The step's command run with RECORDING: (rows by name, the IAM actions signed with the step's own keys,
    those signed with any other key, i.e. the assumed lookup role's)."""
    calls = tmp_path / "calls.jsonl"
    context = write_context(tmp_path, "prod", **changes)
    result = subprocess.run([sys.executable, "-c", RECORDING, str(calls), "preflight", "--env", "prod",
                             "--context-file", str(context), "--pipeline", "--assume-role", LOOKUP_ROLE, "-o", "json"],
                            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode in (0, 1) and "Traceback" not in result.stderr, result.stderr[-2000:]
    rows = {r["name"]: r for r in json.loads(result.stdout)["checks"]}
    own, assumed = [], []
    for service, operation, key in map(json.loads, calls.read_text().splitlines()):
        assert service in IAM_PREFIX, (f"preflight calls {service}.{operation}: add the service's IAM prefix and "
                                       f"ReadOnlyAccess's patterns for it, or call something else")
        (own if key == env["AWS_ACCESS_KEY_ID"] else assumed).append(f"{IAM_PREFIX[service]}:{operation}")
    return rows, own, assumed


NOTHING = "nothing, fsx.backupId set"
ROLLED = "prod, its p5 node group on another reservation"


@pytest.mark.parametrize("deployed", [NOTHING, ROLLED])
def test_every_call_of_the_step_is_one_the_lookup_roles_read_only_access_allows(pipeline, aws, monkeypatch, tmp_path,
                                                                                 deployed):
    """Each AWS call the step makes as the CDK bootstrap lookup role is one that ReadOnlyAccess allows: a call
    the role is denied is only a warn row, so a missing permission would let the step pass unchecked. The
    step's own keys make the AssumeRole and nothing else. Two deployments, so that most reads happen: nothing
    deployed yet (the leftover log groups and the configured backup are read), and a deployed prod whose p5
    group the deploy would roll (the Cluster stack's template, the cluster and its live node groups)."""
    env, _ = pipeline
    changes = {}
    if deployed == NOTHING:
        fsx = json.loads(write_context(tmp_path, "prod").read_text())["context"]["environments"]["prod"]["fsx"]
        changes = {"fsx": dict(fsx, backupId="backup-0123456789abcdef0")}
    else:
        as_account(monkeypatch, PROD_ACCOUNT)
        deploy_groups(aws, prod(tmp_path), gpu_group("p5", reservation=OTHER, nodes=4))
        as_account(monkeypatch, None)
    rows, own, assumed = recorded_step(tmp_path, env, **changes)
    assert own == list(STEP_ROLE_ACTIONS), own
    assert rows["credentials"]["status"] == PASS, rows["credentials"]  # the rest was read in prod's account
    denied = sorted({action for action in assumed if not allowed(action)})
    assert not denied, f"ReadOnlyAccess does not allow {denied}: the lookup role's preflight would only warn there"
    # The reads each account sends the rows to: had they not happened, the recording would prove little.
    called = set(assumed)
    assert {"sts:GetCallerIdentity", "ec2:DescribeInstanceTypeOfferings", "servicequotas:GetServiceQuota",
            "eks:DescribeAddonVersions", "cloudformation:DescribeStacks", "iam:GetRole",
            "ssm:GetParameter"} <= called, sorted(called)
    assert ({"logs:DescribeLogGroups", "fsx:DescribeBackups"} if deployed == NOTHING else
            {"cloudformation:GetTemplate", "eks:DescribeCluster", "eks:ListNodegroups", "eks:DescribeNodegroup",
             "fsx:DescribeFileSystems", "ec2:DescribeSubnets"}) <= called, sorted(called)


def test_the_read_only_table_refuses_what_read_only_access_does_not_grant():
    """The matcher the test above relies on: a write, another service's action and the step role's own
    AssumeRole are outside the table; IAM compares actions case-insensitively."""
    for action in ("eks:UpdateNodegroupConfig", "ec2:CreateTags", "servicequotas:RequestServiceQuotaIncrease",
                   "sts:AssumeRole", "ssm:PutParameter", "logs:DeleteLogGroup", "kms:Decrypt"):
        assert not allowed(action), action
    assert allowed("EKS:describeaddonconfiguration", ["eks:Describe*"])


def test_the_admins_rows_read_of_the_clusters_entries_is_one_read_only_access_allows():
    """The recorded step above creates no access entry, so the admins row's eks:ListAccessEntries (an
    entry made outside the stack, ops/redeploy.py) is not among its calls: held to the table here."""
    assert allowed("eks:ListAccessEntries")
