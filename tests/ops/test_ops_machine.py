"""Preflight's machine rows: CDK bootstrap read from a real moto server (SSM, CloudFormation), and
Docker, the AWS CLI and Node found on a PATH of fake executables in a temporary directory."""

from __future__ import annotations

import json

import boto3
import pytest

from ops import aws as ops_aws
from ops import machine
from ops.checks import FAIL, PASS, WARN
from ops.envconfig import load
from ops_fakes import fake_tool

ACCOUNT = "222222222222"


@pytest.fixture(scope="module")
def moto_clients(moto_endpoint):
    return ops_aws.clients("us-east-1")


def put_bootstrap_version(value: str) -> None:
    boto3.client("ssm", region_name="us-east-1").put_parameter(Name=machine.BOOTSTRAP_PARAMETER, Value=value,
                                                               Type="String")


def test_an_unbootstrapped_account_fails_with_the_bootstrap_command(aws, moto_clients):
    """AWS CDK Developer Guide, bootstrapping-env.html: each target account and region must be
    bootstrapped; the default synthesizer reads /cdk-bootstrap/hnb659fds/version."""
    row = machine.bootstrap_row(load("prod"), moto_clients, ACCOUNT)
    assert row.status == FAIL
    assert row.reason == (f"{ACCOUNT}/us-east-1 is not bootstrapped: run `npx cdk bootstrap aws://{ACCOUNT}/us-east-1`")


def test_a_toolkit_stack_without_the_version_parameter_is_named(aws, moto_clients):
    template = {"Resources": {"Other": {"Type": "AWS::SSM::Parameter",
                                        "Properties": {"Type": "String", "Value": "x", "Name": "/unrelated"}}}}
    boto3.client("cloudformation", region_name="us-east-1").create_stack(
        StackName="CDKToolkit", TemplateBody=json.dumps(template))
    row = machine.bootstrap_row(load("prod"), moto_clients, ACCOUNT)
    assert row.status == FAIL and "stack CDKToolkit is CREATE_COMPLETE but has no version parameter" in row.reason


@pytest.mark.parametrize("version, status, words", [
    ("30", PASS, "bootstrapped (version 30)"),
    ("6", PASS, "bootstrapped (version 6)"),
    ("5", FAIL, "bootstrap version 5 in us-east-1, aws-cdk-lib needs 6 or later"),
])
def test_the_bootstrap_version_must_be_one_aws_cdk_lib_accepts(aws, moto_clients, version, status, words):
    put_bootstrap_version(version)
    row = machine.bootstrap_row(load("prod"), moto_clients, ACCOUNT)
    assert row.status == status and words in row.reason


def test_bootstrap_of_another_account_is_not_guessed(aws, moto_clients):
    row = machine.bootstrap_row(load("prod"), moto_clients, "123456789012")
    assert row.status == WARN and "credentials are for 123456789012" in row.reason


@pytest.fixture
def bin_dir(tmp_path):
    return tmp_path / "bin"


def healthy(bin_dir):
    fake_tool(bin_dir, "docker", 'echo "28.2.2"')
    fake_tool(bin_dir, "aws", 'echo "aws-cli/2.31.0 Python/3.13.7 Linux/6.8 exe/x86_64"')
    fake_tool(bin_dir, "node", 'echo "v20.20.2"')


def test_a_machine_with_every_tool_passes(bin_dir, monkeypatch):
    monkeypatch.delenv("CDK_DOCKER", raising=False)
    healthy(bin_dir)
    rows = machine.tool_rows(str(bin_dir))
    assert [(r.name, r.status) for r in rows] == [("Docker", PASS), ("AWS CLI", PASS), ("Node", PASS)]
    assert rows[0].reason == "daemon running (server 28.2.2)" and rows[2].reason == "Node.js v20.20.2"


def test_each_missing_tool_is_one_line_saying_how_to_get_it(bin_dir, monkeypatch):
    monkeypatch.delenv("CDK_DOCKER", raising=False)
    bin_dir.mkdir()
    rows = {r.name: r for r in machine.tool_rows(str(bin_dir))}
    assert all(r.status == FAIL and "\n" not in r.reason for r in rows.values())
    assert "docker not found" in rows["Docker"].reason and machine.DOCKER_INSTALL in rows["Docker"].reason
    assert "aws not found" in rows["AWS CLI"].reason and machine.AWS_CLI_INSTALL in rows["AWS CLI"].reason
    assert "node not found" in rows["Node"].reason and machine.NODE_INSTALL in rows["Node"].reason


def test_docker_without_a_running_daemon_fails(bin_dir, monkeypatch):
    monkeypatch.delenv("CDK_DOCKER", raising=False)
    fake_tool(bin_dir, "docker", 'echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock." >&2; exit 1')
    row = machine.docker_row(str(bin_dir))
    assert row.status == FAIL
    assert "daemon is not running (Cannot connect to the Docker daemon" in row.reason


def test_a_daemon_error_after_an_empty_answer_is_shown(bin_dir, monkeypatch):
    """docker info --format prints an empty line on stdout and the reason on stderr."""
    monkeypatch.delenv("CDK_DOCKER", raising=False)
    fake_tool(bin_dir, "docker", 'echo; echo "permission denied while trying to connect to the Docker daemon" >&2; exit 1')
    row = machine.docker_row(str(bin_dir))
    assert row.status == FAIL and "(permission denied while trying to connect" in row.reason


def test_cdk_docker_names_the_container_tool_cdk_uses(bin_dir, monkeypatch):
    """AWS CDK CLI reference: CDK_DOCKER overrides the docker command used to build image assets."""
    monkeypatch.setenv("CDK_DOCKER", "finch")
    fake_tool(bin_dir, "docker", 'echo "28.2.2"')
    row = machine.docker_row(str(bin_dir))
    assert row.status == FAIL and row.reason.startswith("finch not found")


def test_node_older_than_the_cdk_cli_supports_fails(bin_dir):
    fake_tool(bin_dir, "node", 'echo "v16.20.2"')
    row = machine.node_row(str(bin_dir))
    assert row.status == FAIL and "Node.js v16.20.2 is too old: the CDK CLI needs 18 or later" in row.reason
