"""Makefile targets run for real (make, the ops CLI, a moto server), with the CDK CLI replaced by a
recording fake so nothing is deployed or destroyed; the install stamps count as up to date."""

from __future__ import annotations

import subprocess

import pytest

from ops_fakes import REPO_ROOT, fake_tool, isolated_aws_env

UP_TO_DATE = ["-o", ".venv/.installed", "-o", "node_modules/.installed"]


def make(target: str, env: dict, cdk, *variables: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *UP_TO_DATE, target, f"CDK={cdk}", *variables],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def cdk(tmp_path):
    record = tmp_path / "cdk-args"
    return fake_tool(tmp_path / "bin", "cdk", f'printf "%s\\n" "$@" > {record}'), record


@pytest.mark.parametrize("target", ["destroy", "diff"])
def test_without_credentials_the_target_stops_before_cdk_asks_anything(tmp_path, cdk, target):
    fake, record = cdk
    result = make(target, isolated_aws_env(tmp_path, credentials=False), fake, "ENV=dev")
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if not line.startswith("make:")]
    assert errors == ["error: no AWS credentials found: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
                      "AWS_SECRET_ACCESS_KEY, or run `aws sso login`"]
    assert not record.exists()  # cdk never ran, so it never asked "Are you sure?"


def test_destroy_with_credentials_for_another_account_stops_before_cdk(aws, tmp_path, cdk):
    fake, record = cdk
    result = make("destroy", isolated_aws_env(tmp_path, aws), fake, "ENV=dev")
    assert result.returncode != 0
    assert "but environments.dev.account is 111111111111" in result.stdout
    assert not record.exists()


def test_destroy_with_the_environments_credentials_reaches_cdk(aws, tmp_path, cdk):
    fake, record = cdk
    result = make("destroy", isolated_aws_env(tmp_path, aws), fake, "ENV=prod")
    assert result.returncode == 0, result.stderr
    assert record.read_text().splitlines() == ["destroy", "--no-notices", "--no-version-reporting", "-c", "env=prod",
                                               "prod/*"]
