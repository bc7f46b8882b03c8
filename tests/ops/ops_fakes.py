"""Helpers for the ops tests: an isolated AWS environment, Stubbed clients, context files, and
running `python -m ops` as a user would. Every path points boto3 at loopback and hides any real
credentials and config, so no test can reach AWS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
from botocore.stub import Stubber

REPO_ROOT = Path(__file__).resolve().parents[2]
CDK_JSON = REPO_ROOT / "cdk.json"
# A loopback port nothing listens on: a stray call fails at once instead of leaving the machine.
DEAD_ENDPOINT = "http://127.0.0.1:9"
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def isolated_aws_env(home: Path, endpoint: str = DEAD_ENDPOINT, credentials: bool = True) -> dict[str, str]:
    """The process environment a test runs boto3 under: no profile, no IMDS, loopback only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KUBECONFIG", "MOTO_"))}
    env.update({
        "HOME": str(home),
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(home / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "no-aws-credentials"),
        "AWS_DEFAULT_REGION": "us-east-1",
        "PYTHONPATH": str(REPO_ROOT),
    })
    if credentials:
        env.update(FAKE_CREDENTIALS)
    return env


def stubbed(service: str, region: str = "us-east-1"):
    """A client whose every call must be answered by the returned Stubber (unanswered: error)."""
    client = boto3.client(service, region_name=region, endpoint_url=DEAD_ENDPOINT,
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    return client, Stubber(client)


def write_context(tmp_path: Path, env_name: str, **changes) -> Path:
    """A copy of cdk.json's environment `env_name` with top-level fields replaced."""
    context = json.loads(CDK_JSON.read_text())["context"]
    env = dict(context["environments"][env_name], **changes)
    path = tmp_path / "context.json"
    path.write_text(json.dumps({"context": {"environments": {env_name: env}}}))
    return path


def run_ops(args: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ops", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
