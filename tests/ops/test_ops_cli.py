"""`python -m ops` as a user runs it: bad input is one line and a non-zero exit, never a traceback."""

from __future__ import annotations

import pytest
import yaml

from ops_fakes import isolated_aws_env, run_ops, write_context


def assert_one_line_error(result, *words: str, code: int = 2) -> str:
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0]
    return lines[0]


@pytest.fixture
def offline(tmp_path):
    """Fake credentials, but every AWS endpoint is a dead loopback port."""
    return isolated_aws_env(tmp_path)


def test_unknown_environment_is_one_config_error_line(offline):
    line = assert_one_line_error(run_ops(["plan", "--env", "staging"], offline), "environments.staging")
    assert line.startswith("config error:") and "dev, prod" in line


def test_preflight_without_credentials_says_so_in_one_line(tmp_path):
    result = run_ops(["preflight", "--env", "dev"], isolated_aws_env(tmp_path, credentials=False))
    assert_one_line_error(result, "no AWS credentials found")
    assert result.stdout == ""


def test_kubeconfig_without_credentials_says_so_in_one_line(tmp_path):
    result = run_ops(["kubeconfig", "--env", "dev"], isolated_aws_env(tmp_path, credentials=False))
    assert_one_line_error(result, "no AWS credentials found")


def test_an_availability_zone_outside_the_region_names_the_field(offline, tmp_path):
    context = write_context(tmp_path, "prod", availabilityZones=["us-west-2a", "us-east-1b"])
    result = run_ops(["preflight", "--env", "prod", "--context-file", str(context)], offline)
    assert_one_line_error(result, "environments.prod.availabilityZones[0]", "'us-west-2a' is not a zone of region us-east-1")


def test_a_missing_context_file_is_one_line(offline, tmp_path):
    result = run_ops(["plan", "--env", "dev", "--context-file", str(tmp_path / "nope.json")], offline)
    assert_one_line_error(result, "nope.json not found")


def test_submit_with_an_unknown_preset_names_it(offline):
    result = run_ops(["submit", "--env", "dev", "--preset", "gpt5", "--image", "img:1", "--dry-run"], offline)
    assert_one_line_error(result, "unknown preset 'gpt5'")


def test_submit_of_a_preset_whose_node_group_the_environment_lacks_is_refused(offline):
    result = run_ops(["submit", "--env", "prod", "--preset", "llama2-7b-fsdp", "--image", "img:1", "--dry-run"],
                     offline)
    assert_one_line_error(result, "config error", "p4d")


def test_submit_dry_run_prints_the_charts_pytorchjob(offline):
    result = run_ops(["submit", "--env", "dev", "--preset", "cpu-ddp", "--image", "registry/trainer:1",
                      "--name", "smoke", "--dry-run"], offline)
    assert result.returncode == 0, result.stderr
    job = yaml.safe_load(result.stdout)
    assert job["kind"] == "PyTorchJob" and job["metadata"]["name"] == "smoke"


@pytest.mark.parametrize("nodes, words", [("0", "must be at least 1, got 0"), ("-3", "got -3"),
                                          ("many", "must be a whole number, got 'many'")])
def test_plan_rejects_a_bad_node_count(offline, nodes, words):
    assert_one_line_error(run_ops(["plan", "--env", "prod", "--nodes", nodes], offline), "--nodes", words)


def test_az_recommend_rejects_an_unknown_region(offline):
    result = run_ops(["az-recommend", "--instance-type", "p5.48xlarge", "--region", "mars-north-1"], offline)
    assert_one_line_error(result, "unknown region 'mars-north-1'")


def test_status_without_a_kubeconfig_points_at_the_kubeconfig_command(offline, tmp_path):
    result = run_ops(["status", "--kubeconfig", str(tmp_path / "missing")], offline)
    assert_one_line_error(result, "no usable kubeconfig", "python -m ops kubeconfig")


def test_no_command_is_one_line(offline):
    assert_one_line_error(run_ops([], offline), "required")


def test_preflight_exits_1_and_prints_the_table_when_a_check_fails(aws, tmp_path):
    """End to end against moto: dev's account 111111111111 is not the caller's 222222222222."""
    result = run_ops(["preflight", "--env", "dev"], isolated_aws_env(tmp_path, aws))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].split() == ["CHECK", "STATUS", "REASON"]
    credentials = next(line for line in lines if line.startswith("credentials"))
    assert "FAIL" in credentials and "111111111111" in credentials
    assert any(line.startswith("training AZ") and "PASS" in line and "usw2-az1" in line for line in lines)
    # Then who can reach the cluster, the bootstrap, and this machine's tools: one row each.
    for name in ("API endpoint", "admin role PlatformAdmin", "cluster admin", "CDK bootstrap", "Docker", "AWS CLI",
                 "Node"):
        assert sum(line.startswith(name + " ") for line in lines) == 1, (name, result.stdout)
