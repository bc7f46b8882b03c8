"""Helpers for the ops tests: an isolated AWS environment, Stubbed clients, context files, and
running `python -m ops` as a user would. Every path points boto3 at loopback and hides any real
credentials and config, so no test can reach AWS."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import stat
import subprocess
import sys
import threading
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
        # preflight's public-IP check (ops/access.py) stays on loopback too.
        "OPS_CHECKIP_URL": endpoint,
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


@contextlib.contextmanager
def checkip_server(answer: str):
    """A loopback stand-in for https://checkip.amazonaws.com answering `answer`; yields its URL."""
    with loopback_get_server(lambda path: f"{answer}\n".encode()) as url:
        yield f"{url}/"


@contextlib.contextmanager
def loopback_get_server(respond):
    """A loopback HTTP server answering every GET with the bytes `respond(path)` returns; yields
    its base URL (no trailing slash)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body = respond(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def fake_tool(bin_dir: Path, name: str, script: str) -> Path:
    """An executable `name` in bin_dir running a /bin/sh script (put bin_dir on PATH)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + script + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def deploy_registry(endpoint: str, name: str, outputs: dict[str, str], region: str = "us-west-2") -> None:
    """A CloudFormation stack of that name on the moto server (dev's region by default) with those
    outputs: what `ops` reads the published trainer images from."""
    cloudformation = boto3.client("cloudformation", region_name=region, endpoint_url=endpoint)
    template = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
                "Outputs": {key: {"Value": value} for key, value in outputs.items()}}
    cloudformation.create_stack(StackName=name, TemplateBody=json.dumps(template))
