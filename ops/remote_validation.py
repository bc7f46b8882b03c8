"""The pipeline's post-deploy validation step: start the environment's runner and await its verdict.

    python -m ops.remote_validation --project NAME --role-arn STARTER_ROLE_ARN --region REGION

The checks themselves run in the environment's VPC, in the runner CodeBuild project of
stacks/validation.py. This command runs in the pipeline account: it assumes the environment's
starter role (which may only StartBuild and BatchGetBuilds on that project), starts one build,
polls it until it ends and exits 0 only if it SUCCEEDED, printing where its logs are.

A role assumed from CodeBuild's own role session is role chaining, which caps the session at one
hour (IAM User Guide, "Methods to assume a role"); the runner may take three. The role is
therefore assumed again before each session ends.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable

import boto3

from ops.aws import CLIENT_CONFIG, api_failure_types, assumed_credentials, credentials_session, explain
from ops.errors import OpsError

POLL_SECONDS = 30
SESSION_SECONDS = 3600  # the most role chaining allows
REASSUME_AFTER_S = 45 * 60
SESSION_NAME = "pipeline-validation"
ENDED = ("SUCCEEDED", "FAILED", "FAULT", "TIMED_OUT", "STOPPED")


class StepError(Exception):
    """A failure of the step itself (not of a check), reported as one line."""


def _codebuild_client(credentials: dict, region: str) -> Any:
    return credentials_session(credentials, region).client("codebuild", config=CLIENT_CONFIG)


class StarterSession:
    """CodeBuild calls as the starter role, assumed again once the session is REASSUME_AFTER_S old."""

    def __init__(self, sts: Any, role_arn: str, region: str, *, clock: Callable[[], float],
                 make_client: Callable[[dict, str], Any]) -> None:
        self._sts, self._role_arn, self._region = sts, role_arn, region
        self._clock, self._make_client = clock, make_client
        self._client: Any = None
        self._assumed_at = 0.0

    def codebuild(self) -> Any:
        if self._client is None or self._clock() - self._assumed_at >= REASSUME_AFTER_S:
            try:
                credentials = assumed_credentials(self._sts, self._role_arn, SESSION_NAME, SESSION_SECONDS)
            except OpsError as err:
                raise StepError(str(err)) from None
            self._client = self._make_client(credentials, self._region)
            self._assumed_at = self._clock()
        return self._client


def _call(what: Callable[[], dict]) -> dict:
    try:
        return what()
    except api_failure_types() as err:
        raise StepError(explain(err)) from None


def _why(build: dict) -> str:
    """The failed phase and its reason, as CodeBuild reports them."""
    for phase in build.get("phases") or []:
        if phase.get("phaseStatus") not in (None, "SUCCEEDED"):
            reasons = "; ".join(f"{c.get('statusCode')}: {c.get('message')}" for c in phase.get("contexts") or [])
            return f" in {phase['phaseType']}" + (f" ({reasons})" if reasons else "")
    return ""


def await_runner(session: StarterSession, project: str, *, sleep: Callable[[float], None],
                 out: Callable[[str], None] = print) -> bool:
    """Start one build of `project`, wait for it to end; True if it succeeded."""
    build = _call(lambda: session.codebuild().start_build(projectName=project))["build"]
    build_id = build["id"]
    out(f"started {build_id}")
    link_shown, phase = False, build.get("currentPhase")
    while True:
        sleep(POLL_SECONDS)
        [build] = _call(lambda: session.codebuild().batch_get_builds(ids=[build_id]))["builds"]
        link = (build.get("logs") or {}).get("deepLink")
        if link and not link_shown:
            out(f"logs: {link}")
            link_shown = True
        if build.get("currentPhase") != phase:
            phase = build.get("currentPhase")
            out(f"{build_id}: {phase}")
        if build["buildStatus"] in ENDED:
            break
    status = build["buildStatus"]
    out(f"{build_id}: {status}" + ("" if status == "SUCCEEDED" else _why(build)))
    return status == "SUCCEEDED"


def main(argv: list[str] | None = None, *, sts: Any = None, make_client: Callable[[dict, str], Any] | None = None,
         sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.remote_validation", description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", required=True, help="the environment's runner CodeBuild project")
    parser.add_argument("--role-arn", required=True, help="the environment's starter role")
    parser.add_argument("--region", required=True, help="the environment's region")
    args = parser.parse_args(argv)
    session = StarterSession(sts or boto3.client("sts", region_name=args.region, config=CLIENT_CONFIG),
                             args.role_arn, args.region, clock=clock, make_client=make_client or _codebuild_client)
    try:
        return 0 if await_runner(session, args.project, sleep=sleep) else 1
    except StepError as err:
        print(f"remote_validation: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
