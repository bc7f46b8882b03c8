"""Makefile targets run for real (make, the ops CLI, a moto server), with the CDK CLI replaced by a
recording fake so nothing is deployed or destroyed; the install stamps count as up to date."""

from __future__ import annotations

import subprocess

import pytest

from ops_fakes import REPO_ROOT, fake_tool, isolated_aws_env

UP_TO_DATE = ["-o", ".venv/.installed", "-o", "node_modules/.installed", "-o", "etcd"]


# Set when the suite itself runs under `make test`: the make under test would become a sub-make
# (its messages say `make[1]:`) and inherit the outer make's flags.
_OUTER_MAKE = ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")


def make(target: str, env: dict, cdk, *variables: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in env.items() if k not in _OUTER_MAKE}
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
    # prod is promoted by the pipeline: its stacks are the pipeline's stage (config/pipeline.py).
    assert record.read_text().splitlines() == ["destroy", "--no-notices", "--no-version-reporting", "-c", "env=prod",
                                               "Pipeline/prod/*"]


def test_deploy_by_hand_of_an_environment_the_pipeline_deploys_is_refused_in_one_line(tmp_path, cdk):
    fake, record = cdk
    result = make("deploy", isolated_aws_env(tmp_path), fake, "ENV=prod")
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if not line.startswith("make:")]
    assert len(errors) == 1 and errors[0].startswith("error: prod is deployed by the pipeline"), result.stderr
    assert "make deploy ENV=prod FORCE=1" in errors[0]
    assert not record.exists()


def test_deploy_hands_abandon_fsx_to_preflight_which_checks_it_before_cdk(tmp_path, cdk):
    fake, record = cdk
    result = make("deploy", isolated_aws_env(tmp_path), fake, "ENV=prod", "FORCE=1", "ABANDON_FSX=fs-prod")
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if not line.startswith("make:")]
    assert len(errors) == 1 and "--abandon-file-system: must be a file system id" in errors[0], result.stderr
    assert not record.exists()


@pytest.mark.parametrize("job, words", [
    ("nope", "--job: unknown job 'nope'; local jobs are cpu-ddp"),
    ("llama3-8b-fsdp", "--job: llama3-8b-fsdp needs GPU nodes; local runs take the CPU presets (cpu-ddp"),
])
def test_make_local_rejects_a_bad_job_before_the_synth(tmp_path, cdk, job, words):
    fake, record = cdk
    result = make("local", isolated_aws_env(tmp_path), fake, f"JOB={job}")
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if not line.startswith("make:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {words}"), result.stderr
    assert "llm-tiny" in errors[0]  # every local job is listed
    assert "synth_summary" not in result.stdout and not record.exists()


def test_the_first_install_says_what_it_installs_and_roughly_how_long(tmp_path):
    """Runs the real venv recipe with a stand-in python that makes a venv whose pip does nothing."""
    venv = tmp_path / "venv"
    python = fake_tool(tmp_path / "bin", "python3.11",
                       'mkdir -p "$3/bin" && printf "#!/bin/sh\\nexit 0\\n" > "$3/bin/python" && chmod +x "$3/bin/python"')
    result = subprocess.run(["make", "--no-print-directory", f"{venv}/.installed", f"VENV={venv}", f"PYTHON={python}"],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith(f"Installing the pinned Python packages of requirements.txt into {venv}")
    assert "a few minutes the first time" in first
    assert (venv / ".installed").exists()
    again = subprocess.run(["make", "--no-print-directory", f"{venv}/.installed", f"VENV={venv}", f"PYTHON={python}"],
                           cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert "Installing" not in again.stdout  # only the first time
