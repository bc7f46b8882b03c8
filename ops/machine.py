"""What `cdk deploy` needs besides the account: CDK bootstrap in the target account and region,
and on this machine a running Docker daemon (the trainer images are built during the deploy), the
AWS CLI (kubectl's token comes from `aws eks get-token`) and Node (the CDK CLI runs on it).

Each missing piece is one row saying how to get it. Tools are found on PATH (a test passes its
own), and asked for their version with a short timeout so a wedged daemon cannot hang preflight.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from config import Environment
from config.pipeline import BOOTSTRAP_QUALIFIER
from ops.aws import AwsClients, api_failure_types, error_code, explain
from ops import proc
from ops.checks import FAIL, PASS, WARN, Check

# The version DefaultStackSynthesizer's templates require, under the qualifier (aws-cdk-lib 2.275.0,
# stack-synthesizers/default-synthesizer.js: MIN_BOOTSTRAP_STACK_VERSION=6,
# DEFAULT_BOOTSTRAP_STACK_VERSION_SSM_PARAMETER="/cdk-bootstrap/${Qualifier}/version").
BOOTSTRAP_PARAMETER = f"/cdk-bootstrap/{BOOTSTRAP_QUALIFIER}/version"
MIN_BOOTSTRAP_VERSION = 6
TOOLKIT_STACK = "CDKToolkit"
# aws-cdk 2.x's package.json: "engines": {"node": ">= 18.0.0"}.
MIN_NODE_MAJOR = 18
TOOL_TIMEOUT_S = 15
DOCKER_INSTALL = "https://docs.docker.com/engine/install/"
AWS_CLI_INSTALL = "https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html"
NODE_INSTALL = "https://nodejs.org/en/download"


def bootstrap_row(env: Environment, aws: AwsClients, account: str) -> Check:
    name = "CDK bootstrap"
    command = f"npx cdk bootstrap aws://{env.account}/{env.region}"
    if account != env.account:
        return Check(name, WARN, f"not checked: these credentials are for {account}, the environment deploys to "
                                 f"{env.account}")
    try:
        value = aws.ssm.get_parameter(Name=BOOTSTRAP_PARAMETER)["Parameter"]["Value"]
    except api_failure_types() as err:
        if error_code(err) != "ParameterNotFound":
            return Check(name, WARN, f"could not read {BOOTSTRAP_PARAMETER}: {explain(err)}")
        return Check(name, FAIL, f"{env.account}/{env.region} is not bootstrapped{_toolkit_state(aws)}: run `{command}`")
    version = int(value) if value.isdigit() else 0
    if version < MIN_BOOTSTRAP_VERSION:
        return Check(name, FAIL, f"bootstrap version {value} in {env.region}, aws-cdk-lib needs "
                                 f"{MIN_BOOTSTRAP_VERSION} or later: run `{command}` again")
    return Check(name, PASS, f"{env.account}/{env.region} bootstrapped (version {version})")


def _toolkit_state(aws: AwsClients) -> str:
    """Why a bootstrap is missing, when the CDKToolkit stack exists but is broken."""
    try:
        stacks = aws.cloudformation.describe_stacks(StackName=TOOLKIT_STACK)["Stacks"]
    except api_failure_types():
        return ""
    status = stacks[0]["StackStatus"] if stacks else ""
    if not status:
        return ""
    if "ROLLBACK" in status or "FAILED" in status:
        return f" (stack {TOOLKIT_STACK} is {status}: delete it, then bootstrap)"
    return f" (stack {TOOLKIT_STACK} is {status} but has no version parameter)"


def _run(tool: str, args: list[str], path: str | None) -> tuple[int, str]:
    env = dict(os.environ, PATH=path) if path is not None else None
    try:
        done = proc.run([tool, *args], timeout=TOOL_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return 124, f"no answer in {TOOL_TIMEOUT_S} s"
    except OSError as err:
        return 126, str(err)
    text = (done.stdout.strip() or done.stderr.strip()).splitlines()
    return done.returncode, (text[0] if text else "")[:120]


def _ask(row: str, command: str, args: list[str], path: str | None, missing: str) -> Check | tuple[int, str]:
    """The tool's exit code and first line of output, or the failing row when it is not on PATH."""
    tool = shutil.which(command, path=path)
    if tool is None:
        return Check(row, FAIL, f"{command} not found: {missing}")
    return _run(tool, args, path)


def docker_row(path: str | None = None) -> Check:
    # cdk builds images with $CDK_DOCKER when set (e.g. finch or podman), else docker.
    command = os.environ.get("CDK_DOCKER", "docker")
    answer = _ask("Docker", command, ["info", "--format", "{{.ServerVersion}}"], path,
                  f"the trainer images are built during `cdk deploy`; install Docker ({DOCKER_INSTALL})")
    if isinstance(answer, Check):
        return answer
    code, text = answer
    if code != 0 or not text:
        return Check("Docker", FAIL, f"{command} is installed but its daemon is not running ({text or 'no answer'}): "
                                     "start Docker Desktop, or `sudo systemctl start docker`")
    return Check("Docker", PASS, f"daemon running (server {text})")


def aws_cli_row(path: str | None = None) -> Check:
    answer = _ask("AWS CLI", "aws", ["--version"], path,
                  f"kubectl gets its tokens from `aws eks get-token`; install AWS CLI v2 ({AWS_CLI_INSTALL})")
    if isinstance(answer, Check):
        return answer
    code, text = answer
    if code != 0:
        return Check("AWS CLI", FAIL, f"`aws --version` failed ({text}): reinstall AWS CLI v2 ({AWS_CLI_INSTALL})")
    return Check("AWS CLI", PASS, text)


def node_row(path: str | None = None) -> Check:
    answer = _ask("Node", "node", ["--version"], path,
                  f"the CDK CLI runs on Node.js {MIN_NODE_MAJOR} or later; install an LTS release ({NODE_INSTALL})")
    if isinstance(answer, Check):
        return answer
    code, text = answer
    match = re.match(r"v?(\d+)\.", text)
    if code != 0 or not match:
        return Check("Node", FAIL, f"`node --version` failed ({text}); reinstall Node.js ({NODE_INSTALL})")
    if int(match[1]) < MIN_NODE_MAJOR:
        return Check("Node", FAIL, f"Node.js {text} is too old: the CDK CLI needs {MIN_NODE_MAJOR} or later "
                                   f"({NODE_INSTALL})")
    return Check("Node", PASS, f"Node.js {text}")


def tool_rows(path: str | None = None) -> list[Check]:
    return [docker_row(path), aws_cli_row(path), node_row(path)]
