"""ops.remote_validation, the pipeline's validation step: start the stage's runner, wait, pass on its verdict.

STS and CodeBuild are botocore Stubbers (moto runs no builds); time is a fake clock, so nothing sleeps.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from ops import remote_validation
from ops_fakes import stubbed

PROJECT = "RunnerProject-abc123"
ROLE = "arn:aws:iam::222222222222:role/prod-cluster-validation-starter"
BUILD = f"{PROJECT}:0d6c2b1e-0000-4000-8000-000000000001"
LINK = "https://console.aws.amazon.com/cloudwatch/home?region=us-east-1#logEvent:group=/runner;stream=1"


class FakeClock:
    def __init__(self):
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def sts_answering(times: int):
    client, stub = stubbed("sts")
    for i in range(times):
        stub.add_response("assume_role", {
            "Credentials": {"AccessKeyId": f"ASIA{i:016d}", "SecretAccessKey": "s", "SessionToken": "t",
                            "Expiration": datetime.now(timezone.utc) + timedelta(hours=1)},
            "AssumedRoleUser": {"AssumedRoleId": "AROAEXAMPLE:pipeline-validation",
                                "Arn": f"{ROLE}/pipeline-validation"}},
            {"RoleArn": ROLE, "RoleSessionName": "pipeline-validation",
             "DurationSeconds": remote_validation.SESSION_SECONDS})
    stub.activate()
    return client, stub


def build(status: str, phase: str = "BUILD", **extra) -> dict:
    return {"id": BUILD, "buildStatus": status, "currentPhase": phase, "logs": {"deepLink": LINK}, **extra}


def codebuild_answering(*statuses: dict):
    client, stub = stubbed("codebuild")
    stub.add_response("start_build", {"build": build("IN_PROGRESS", "SUBMITTED")}, {"projectName": PROJECT})
    for answer in statuses:
        stub.add_response("batch_get_builds", {"builds": [answer]}, {"ids": [BUILD]})
    stub.activate()
    return client, stub


def run(capsys, sts, codebuild, clock=None):
    clock = clock or FakeClock()
    made: list[str] = []

    def make_client(credentials: dict, region: str):
        made.append(credentials["AccessKeyId"])
        assert region == "us-east-1"
        return codebuild

    code = remote_validation.main(["--project", PROJECT, "--role-arn", ROLE, "--region", "us-east-1"],
                                  sts=sts, make_client=make_client, sleep=clock.sleep, clock=clock.monotonic)
    out = capsys.readouterr()
    return code, out, made, clock


def test_a_runner_build_that_succeeds_passes_the_step(capsys):
    sts, sts_stub = sts_answering(1)
    codebuild, cb_stub = codebuild_answering(build("IN_PROGRESS"), build("SUCCEEDED", "COMPLETED"))
    code, out, made, clock = run(capsys, sts, codebuild)
    assert code == 0
    assert f"started {BUILD}" in out.out and LINK in out.out
    assert f"{BUILD}: SUCCEEDED" in out.out
    assert clock.sleeps == [remote_validation.POLL_SECONDS] * 2  # one wait before each look
    sts_stub.assert_no_pending_responses()
    cb_stub.assert_no_pending_responses()


def test_a_failed_check_fails_the_step_and_says_where(capsys):
    failed = build("FAILED", "COMPLETED", phases=[
        {"phaseType": "INSTALL", "phaseStatus": "SUCCEEDED"},
        {"phaseType": "BUILD", "phaseStatus": "FAILED",
         "contexts": [{"statusCode": "COMMAND_EXECUTION_ERROR",
                       "message": "Error while executing command: python3 -m ops validate. Reason: exit status 1"}]}])
    sts, _ = sts_answering(1)
    codebuild, _ = codebuild_answering(failed)
    code, out, _, _ = run(capsys, sts, codebuild)
    assert code == 1
    assert (f"{BUILD}: FAILED in BUILD (COMMAND_EXECUTION_ERROR: Error while executing command: "
            "python3 -m ops validate. Reason: exit status 1)") in out.out
    assert LINK in out.out


@pytest.mark.parametrize("status", ["FAULT", "TIMED_OUT", "STOPPED"])
def test_every_other_end_of_the_runner_build_fails_the_step(capsys, status):
    sts, _ = sts_answering(1)
    codebuild, _ = codebuild_answering(build(status, "COMPLETED"))
    assert run(capsys, sts, codebuild)[0] == 1


def test_a_build_longer_than_a_chained_role_session_assumes_the_role_again(capsys):
    """IAM User Guide, "Methods to assume a role" (https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_manage-assume.html):
    role chaining limits a session to one hour; the runner may take longer than that."""
    polls = int(remote_validation.REASSUME_AFTER_S / remote_validation.POLL_SECONDS) + 2
    sts, sts_stub = sts_answering(2)
    codebuild, _ = codebuild_answering(*[build("IN_PROGRESS")] * polls, build("SUCCEEDED", "COMPLETED"))
    code, _, made, clock = run(capsys, sts, codebuild)
    assert code == 0
    assert made == ["ASIA0000000000000000", "ASIA0000000000000001"]
    assert remote_validation.REASSUME_AFTER_S < remote_validation.SESSION_SECONDS
    sts_stub.assert_no_pending_responses()


def test_a_starter_role_that_cannot_be_assumed_is_one_line_and_exit_1(capsys):
    sts, stub = stubbed("sts")
    stub.add_client_error("assume_role", "AccessDenied", "not authorized to perform sts:AssumeRole")
    stub.activate()
    code, out, made, _ = run(capsys, sts, None)
    assert code == 1 and made == []
    [line] = out.err.strip().splitlines()
    assert line.startswith("remote_validation: AssumeRole not permitted (AccessDenied)")


def test_a_runner_that_is_not_there_is_one_line_and_exit_1(capsys):
    sts, _ = sts_answering(1)
    codebuild, stub = stubbed("codebuild")
    stub.add_client_error("start_build", "ResourceNotFoundException", f"Project cannot be found: {PROJECT}")
    stub.activate()
    code, out, _, _ = run(capsys, sts, codebuild)
    assert code == 1
    assert out.err.strip() == (f"remote_validation: StartBuild failed (ResourceNotFoundException: Project cannot be "
                               f"found: {PROJECT})")
