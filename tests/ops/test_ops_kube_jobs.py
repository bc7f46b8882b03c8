"""start / stop / submit names, and an API server that cannot be reached, through the real
kubeflow-training SDK and kubernetes client.

Only HTTP is replaced (the recording fake API server of kube_fakes.py), except where the test
needs a real socket: a closed loopback port, and a name that cannot resolve.
"""

from __future__ import annotations

import json
import re
import socket

import pytest
import yaml
from kubeflow.training import TrainingClient
from kubernetes.client import Configuration

from config.presets import PRESETS
from ops import cli, kube
from ops.errors import OpsError
from kube_fakes import JOBS_PATH as JOBS, POLICIES_PATH as POLICIES
from kube_fakes import FakeApiServer, created_jobs, jobs_and_their_policies, training_client_on
from ops_fakes import isolated_aws_env, run_ops


def job(name: str, *conditions: str, suspend: bool | None = None) -> dict:
    run_policy = {} if suspend is None else {"suspend": suspend}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "training", "creationTimestamp": "2026-11-22T10:00:00Z"},
            "spec": {"pytorchReplicaSpecs": {}, "runPolicy": run_policy},
            "status": {"conditions": [{"type": t, "status": "True", "message": f"{name} is {t.lower()}"}
                                      for t in conditions]}}


@pytest.fixture
def api(monkeypatch):
    """The fake server, and `python -m ops` in this process talking to it through a real TrainingClient."""
    server = FakeApiServer()
    server.answer(jobs_and_their_policies(server))
    client = training_client_on(server)
    monkeypatch.setattr(kube, "training_client", lambda *args, **kwargs: client)
    return server


def test_start_resumes_the_deployed_suspended_job_with_a_merge_patch_of_run_policy_suspend(api, capsys):
    api.on("GET", f"{JOBS}/llama3-8b-fsdp", job("llama3-8b-fsdp", "Created", "Suspended", suspend=True))
    api.on("PATCH", f"{JOBS}/llama3-8b-fsdp", job("llama3-8b-fsdp", "Created", suspend=False))
    assert cli.main(["start", "llama3-8b-fsdp"]) == 0
    get, patch = api.calls
    assert (get.method, patch.method, patch.path) == ("GET", "PATCH", f"{JOBS}/llama3-8b-fsdp")
    assert patch.body == {"spec": {"runPolicy": {"suspend": False}}}
    # A merge patch changes only that field; the deployed spec stays as the chart rendered it.
    assert patch.headers["Content-Type"] == "application/merge-patch+json"
    assert capsys.readouterr().out == "PyTorchJob training/llama3-8b-fsdp resumed: its pods start\n"


def test_stop_suspends_a_running_job(api, capsys):
    api.on("GET", f"{JOBS}/cpu-ddp", job("cpu-ddp", "Created", "Running"))
    api.on("PATCH", f"{JOBS}/cpu-ddp", job("cpu-ddp", "Created", "Running", suspend=True))
    assert cli.main(["stop", "cpu-ddp"]) == 0
    assert api.calls[-1].body == {"spec": {"runPolicy": {"suspend": True}}}
    assert "suspended: its pods stop" in capsys.readouterr().out


def test_starting_a_started_job_changes_nothing(api, capsys):
    api.on("GET", f"{JOBS}/cpu-ddp", job("cpu-ddp", "Created", "Running", suspend=False))
    assert cli.main(["start", "cpu-ddp"]) == 0
    assert [c.method for c in api.calls] == ["GET"]
    assert capsys.readouterr().out == "PyTorchJob training/cpu-ddp is already started (Running)\n"


def test_a_finished_job_is_not_restarted_and_submit_is_named(api, capsys):
    api.on("GET", f"{JOBS}/cpu-ddp", job("cpu-ddp", "Created", "Running", "Succeeded", suspend=False))
    assert cli.main(["start", "cpu-ddp"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has finished (Succeeded)" in err and "ops submit --preset" in err
    assert [c.method for c in api.calls] == ["GET"]


def test_starting_a_preset_that_is_not_deployed_is_one_line(api, capsys):
    assert cli.main(["start", "llama31-70b-fsdp"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "HTTP 404" in err and "`python -m ops status` lists the jobs" in err


def test_start_and_stop_take_only_presets(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["start", "gpt5"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid choice: 'gpt5'" in err and "cpu-ddp" in err


def test_submit_without_a_name_creates_a_new_job_with_a_generated_name(api, capsys):
    api.on("POST", JOBS, {}, status=201)
    names = []
    for _ in range(2):
        assert cli.main(["submit", "--env", "dev", "--preset", "cpu-ddp", "--image", "registry/trainer:1"]) == 0
        names.append(created_jobs(api)[-1]["metadata"]["name"])
    assert all(re.fullmatch(r"cpu-ddp-[a-z0-9]{6}", n) for n in names) and names[0] != names[1]
    assert created_jobs(api)[-1]["spec"]["elasticPolicy"]["rdzvId"].startswith(names[1])
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"created PyTorchJob training/{names[1]} (image registry/trainer:1)")


def test_submit_creates_the_jobs_peers_policy_first_and_hands_it_to_the_job(api):
    """Its pods never start without the rule that lets them reach each other (k8s/network.py), and
    the policy goes when the job is deleted (an ownerReference to the job)."""
    api.on("POST", JOBS, {}, status=201)
    assert cli.main(["submit", "--env", "dev", "--preset", "cpu-ddp", "--image", "img:1", "--name", "run-7"]) == 0
    steps = [(c.method, c.path) for c in api.calls]
    assert steps == [("POST", POLICIES), ("POST", JOBS), ("GET", f"{JOBS}/run-7"), ("PATCH", f"{POLICIES}/run-7-peers")]
    policy = api.calls[0].body
    same_job = {"matchLabels": {"training.kubeflow.org/job-name": "run-7"}}
    assert policy["spec"]["podSelector"] == same_job
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": same_job}], "ports": [{"protocol": "TCP"}]}]
    assert api.calls[-1].body == {"metadata": {"ownerReferences": [
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "run-7", "uid": "uid-run-7"}]}}


def test_a_refused_job_takes_its_new_peers_policy_with_it_but_never_an_existing_one(api, capsys):
    api.on("POST", JOBS, {"kind": "Status", "code": 422, "reason": "Invalid", "message": "denied by webhook"}, status=422)
    assert cli.main(["submit", "--env", "dev", "--preset", "cpu-ddp", "--image", "img:1", "--name", "run-8"]) == 2
    assert ("DELETE", f"{POLICIES}/run-8-peers") in [(c.method, c.path) for c in api.calls]
    api.calls.clear()
    api.on("POST", POLICIES, {"kind": "Status", "code": 409, "reason": "AlreadyExists", "message": "exists"}, status=409)
    assert cli.main(["submit", "--env", "dev", "--preset", "cpu-ddp", "--image", "img:1", "--name", "cpu-ddp"]) == 2
    assert "DELETE" not in [c.method for c in api.calls]
    assert capsys.readouterr().err.count("\n") == 2


def test_generated_names_stay_valid_job_names_for_every_preset():
    from k8s.jobs import _JOB_NAME
    for name in [*PRESETS, "a" * 60]:
        generated = kube.unique_name(name)
        assert _JOB_NAME.match(generated) and len(generated) <= kube.MAX_JOB_NAME, generated


def test_submit_of_an_existing_name_is_one_line_saying_what_to_do(api, capsys):
    api.on("POST", JOBS, {"kind": "Status", "code": 409, "reason": "AlreadyExists",
                          "message": 'pytorchjobs.kubeflow.org "cpu-ddp" already exists'}, status=409)
    assert cli.main(["submit", "--env", "dev", "--preset", "cpu-ddp", "--image", "img:1", "--name", "cpu-ddp"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert 'HTTP 409 pytorchjobs.kubeflow.org "cpu-ddp" already exists' in line
    assert line.endswith("`ops start PRESET` resumes a deployed job; `ops submit` without --name picks a new name")


def test_set_env_pairs_reach_the_job_as_variables(api):
    api.on("POST", JOBS, {}, status=201)
    assert cli.main(["submit", "--env", "dev", "--preset", "cpu-ddp", "--image", "img:1",
                     "--set", "env.LOGLEVEL=DEBUG", "--set", "env.PORT=8080", "--set", "max_restarts=2"]) == 0
    [body] = created_jobs(api)
    env = body["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "LOGLEVEL", "value": "DEBUG"} in env and {"name": "PORT", "value": "8080"} in env
    assert body["spec"]["elasticPolicy"]["maxRestarts"] == 2


def test_status_json_is_one_document_of_the_jobs(api, capsys):
    api.on("GET", JOBS, {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJobList", "items": [
        job("a", "Created", "Running"), job("b", "Created", "Suspended", suspend=True)]})
    assert cli.main(["status", "-o", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["phase"]) for r in rows] == [("a", "Running"), ("b", "Suspended")]
    assert set(rows[0]) == {"name", "phase", "message", "created"}


# ---- an API server that cannot be reached -----------------------------------------------------

def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed when the block exits: nothing listens there


def kubeconfig_for(tmp_path, server: str):
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    return path


def test_a_closed_port_is_one_line_naming_the_endpoint_and_the_likely_cause(tmp_path):
    endpoint = f"https://127.0.0.1:{closed_port()}"
    result = run_ops(["status", "--kubeconfig", str(kubeconfig_for(tmp_path, endpoint))], isolated_aws_env(tmp_path))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: cannot reach the Kubernetes API endpoint {endpoint} (connection refused): ")
    assert "endpointAccess.publicCidrs" in line and "inside the VPC" in line


@pytest.mark.parametrize("call", [
    lambda c: kube.status(c), lambda c: kube.set_suspended(c, "cpu-ddp", True),
    lambda c: kube.logs(c, "cpu-ddp"), lambda c: kube.delete(c, "cpu-ddp")])
def test_every_job_command_reports_an_unreachable_endpoint_the_same_way(call):
    config = Configuration()
    config.host = f"https://127.0.0.1:{closed_port()}"
    client = kube.guard(TrainingClient(client_configuration=config, namespace="training"))
    with pytest.raises(OpsError) as err:
        call(client)
    assert str(err.value).startswith(f"cannot reach the Kubernetes API endpoint {config.host} (connection refused)")


def test_a_name_that_does_not_resolve_points_at_a_private_endpoint_or_a_stale_kubeconfig():
    config = Configuration()
    config.host = "https://0123456789abcdef.gr7.us-west-2.eks.amazonaws.com.invalid"
    client = kube.guard(TrainingClient(client_configuration=config, namespace="training"))
    with pytest.raises(OpsError) as err:
        kube.status(client)
    assert str(err.value).startswith(f"cannot resolve the Kubernetes API endpoint {config.host}: a private endpoint")
    assert "python -m ops kubeconfig" in str(err.value)


@pytest.mark.parametrize("status, words", [
    (401, ["rejected the credentials (HTTP 401 on GET " + JOBS + ")", "expired", "aws sso login"]),
    (403, ["denied GET " + JOBS + " (HTTP 403)", "access entry", "adminRoleArns"])])
def test_401_and_403_are_one_line_naming_the_endpoint_and_the_cause(api, capsys, status, words):
    api.on("GET", JOBS, {"kind": "Status", "code": status, "reason": "Unauthorized", "message": "Unauthorized"},
           status=status)
    assert cli.main(["status"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: the Kubernetes API endpoint https://k8s.test ")
    for word in words:
        assert word in line


def test_expired_aws_credentials_behind_the_kubeconfig_are_one_line(tmp_path):
    """The kubeconfig `ops kubeconfig` writes runs `aws eks get-token`; with expired credentials
    that command fails (here a real process that fails as the AWS CLI does)."""
    path = kubeconfig_for(tmp_path, f"https://127.0.0.1:{closed_port()}")
    doc = yaml.safe_load(path.read_text())
    doc["users"][0]["user"] = {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "sh",
        "args": ["-c", "echo 'An error occurred (ExpiredToken) when calling the GetCallerIdentity operation' >&2; "
                       "exit 255"]}}
    path.write_text(yaml.safe_dump(doc))
    result = run_ops(["status", "--kubeconfig", str(path)], isolated_aws_env(tmp_path))
    assert result.returncode == 2
    [line] = result.stderr.splitlines()  # no logging noise from the kubernetes client or urllib3
    assert line.startswith("error: the kubeconfig's credential command failed (exec: process returned 255. "
                           "An error occurred (ExpiredToken)")
    assert line.endswith("the AWS credentials have expired or are missing; refresh them (`aws sso login`, "
                         "or new keys) and retry")
