"""`python -m ops model token|download|status|logs` through the real kubernetes client.

Only HTTP is replaced: the client's urllib3 pool manager is the recording fake API server
(tests/ops/kube_fakes.py), so the CoreV1Api, BatchV1Api, CustomObjectsApi and the log Watch run
as they would against a cluster.
"""

from __future__ import annotations

import base64
import logging
import os

import pytest

from config.outputs import trainer_image_output
from k8s.pods.model_download import ModelDownload, model_download_manifest
from ops import cli, model
from ops.envconfig import load
from kube_fakes import FakeApiServer, Reset, api_client_on
from ops_fakes import deploy_registry

NS = "/api/v1/namespaces/training"
SECRETS = f"{NS}/secrets"
JOBS = "/apis/batch/v1/namespaces/training/jobs"
TOKEN = "hf_kX9pRrQ2vLm7NwT4aYz3bC8dE1fG6hJ0"
CPU_IMAGE = "111111111111.dkr.ecr.us-west-2.amazonaws.com/cdk-hnb659fds-container-assets:cpu123"
JOB = "model-download-llama-2-7b-hf"


@pytest.fixture
def server(monkeypatch):
    fake = FakeApiServer()
    client = api_client_on(fake)
    monkeypatch.setattr(model, "api_client", lambda kubeconfig, context, environment=None: client)
    return fake


def ops(*argv: str) -> int:
    return cli.main(list(argv))


def secret_token(body: dict) -> str:
    if "stringData" in body:
        return body["stringData"]["token"]
    return base64.b64decode(body["data"]["token"]).decode()


def test_token_from_an_environment_variable_becomes_the_secret_and_is_never_shown(server, monkeypatch, capsys,
                                                                                  caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("MY_HF_TOKEN", TOKEN)
    server.on("POST", SECRETS, {"kind": "Secret", "metadata": {"name": "hf-token"},
                                "data": {"token": base64.b64encode(TOKEN.encode()).decode()}}, status=201)
    assert ops("model", "token", "--env", "dev", "--from-env", "MY_HF_TOKEN") == 0
    [call] = server.calls
    assert (call.method, call.path) == ("POST", SECRETS)
    assert call.body["metadata"]["name"] == "hf-token" and secret_token(call.body) == TOKEN
    out = capsys.readouterr()
    assert out.out.strip() == "created Secret training/hf-token from environment variable MY_HF_TOKEN for dev"
    assert TOKEN not in out.out + out.err + caplog.text


def test_token_replaces_an_existing_secret(server, tmp_path, capsys):
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    server.on("POST", SECRETS, {"kind": "Status", "code": 409, "reason": "AlreadyExists",
                                "message": 'secrets "hf-token" already exists'}, status=409)
    server.on("PUT", f"{SECRETS}/hf-token", {"kind": "Secret", "metadata": {"name": "hf-token"}})
    assert ops("model", "token", "--env", "dev", "--from-file", str(path)) == 0
    assert [(c.method, c.path) for c in server.calls] == [("POST", SECRETS), ("PUT", f"{SECRETS}/hf-token")]
    assert secret_token(server.calls[1].body) == TOKEN  # the file's newline is not part of it
    out = capsys.readouterr()
    assert out.out.startswith("replaced Secret training/hf-token from file ")
    assert TOKEN not in out.out + out.err


def test_token_from_a_pipe_as_process_substitution_gives_it(server, capsys):
    """`--from-file <(pass show hf)`: the shell hands a /dev/fd/N pipe, read on purpose, where the
    other file arguments refuse a pipe."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, (TOKEN + "\n").encode())
        os.close(write_end)
        server.on("POST", SECRETS, {"kind": "Secret", "metadata": {"name": "hf-token"}}, status=201)
        assert ops("model", "token", "--env", "dev", "--from-file", f"/dev/fd/{read_end}") == 0
    finally:
        os.close(read_end)
    assert secret_token(server.calls[0].body) == TOKEN
    assert TOKEN not in capsys.readouterr().out


@pytest.mark.parametrize("setup, argv", [
    (lambda mp, tmp: mp.delenv("HF_TOKEN", raising=False), ()),
    (lambda mp, tmp: mp.setenv("HF_TOKEN", "  "), ()),
    (lambda mp, tmp: (tmp / "empty").write_text("\n"), ("--from-file", "{tmp}/empty")),
    (lambda mp, tmp: None, ("--from-file", "{tmp}/absent")),
])
def test_a_missing_or_empty_token_is_one_line_exit_2_and_calls_nothing(server, monkeypatch, tmp_path, capsys,
                                                                       setup, argv):
    setup(monkeypatch, tmp_path)
    assert ops("model", "token", "--env", "dev", *(a.format(tmp=tmp_path) for a in argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and ("token" in err or "--from-file" in err)
    assert server.calls == []


def test_a_token_with_a_line_break_is_refused_without_echoing_it(server, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", f"{TOKEN}\nsecond-line")
    assert ops("model", "token", "--env", "dev") == 2
    err = capsys.readouterr().err
    assert "one word" in err and TOKEN not in err
    assert server.calls == []


def test_a_token_variable_that_is_not_utf8_is_refused_like_such_a_file(server, monkeypatch, capsys):
    """Python hands an undecodable byte of the environment over as a lone surrogate; the API server
    would store U+FFFD in its place, a token that silently no longer works."""
    monkeypatch.setenv("HF_TOKEN", TOKEN + "\udcff")
    assert ops("model", "token", "--env", "dev") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --from-env: ") and "UTF-8" in err and TOKEN not in err
    assert server.calls == []


def test_download_creates_the_charts_job_with_the_cpu_image_the_registry_stack_published(server, aws, capsys):
    """The image comes from the Registry stack's outputs (a moto server on loopback), as for
    `submit` and `data`."""
    deploy_registry(aws, "dev-Registry", {trainer_image_output("cpu"): CPU_IMAGE,
                                          trainer_image_output("gpu"): CPU_IMAGE + "-gpu"})
    server.on("POST", JOBS, {"kind": "Job", "metadata": {"name": JOB}}, status=201)
    assert ops("model", "download", "--env", "dev", "--repo", "meta-llama/Llama-2-7b-hf") == 0
    [create] = server.calls
    assert create.body == model_download_manifest(load("dev"), ModelDownload.of("meta-llama/Llama-2-7b-hf"),
                                                  image=CPU_IMAGE)
    assert capsys.readouterr().out.splitlines()[0] == \
        f"created Job training/{JOB}: meta-llama/Llama-2-7b-hf -> /fsx/models/Llama-2-7b-hf"


def test_download_before_any_deploy_asks_for_the_image_in_one_line(server, aws, capsys):
    assert ops("model", "download", "--env", "dev", "--repo", "meta-llama/Llama-2-7b-hf") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no stack dev-Registry" in err and "--image" in err
    assert server.calls == []


def job(phase: str, repo: str = "meta-llama/Llama-2-7b-hf", active: int = 0) -> dict:
    conditions = [{"type": phase, "status": "True", "message": f"it is {phase.lower()}"}] \
        if phase in ("Complete", "Failed") else []
    return {"kind": "Job", "metadata": {"name": JOB, "labels": {"eks-distributed-training.io/model": "Llama-2-7b-hf"},
                                        "annotations": {"eks-distributed-training.io/hf-repo": repo}},
            "status": {"conditions": conditions, "active": active, "startTime": "2026-11-23T10:00:00Z"}}


@pytest.mark.parametrize("existing, code, words", [
    (job("Running", active=1), 0, "already exists and is Running"),
    (job("Complete"), 0, "already exists and is Complete"),
    (job("Failed"), 2, "delete it"),
    (job("Running", repo="someone/else"), 2, "already downloads someone/else"),
])
def test_download_of_an_existing_job_reports_it_instead_of_duplicating(server, capsys, existing, code, words):
    server.on("POST", JOBS, {"kind": "Status", "code": 409, "reason": "AlreadyExists", "message": "exists"},
              status=409)
    server.on("GET", f"{JOBS}/{JOB}", existing)
    assert ops("model", "download", "--env", "dev", "--repo", "meta-llama/Llama-2-7b-hf",
               "--image", CPU_IMAGE) == code
    out = capsys.readouterr()
    assert words in (out.out if code == 0 else out.err)


def test_download_under_a_name_whose_job_another_name_holds_is_refused_naming_name(server, capsys):
    """--name llama-2-7b-hf and Llama-2-7b-hf are two directories but one Job name: the second
    download said the Job 'already exists and is Complete', and its directory stayed empty."""
    server.on("POST", JOBS, {"kind": "Status", "code": 409, "reason": "AlreadyExists", "message": "exists"},
              status=409)
    server.on("GET", f"{JOBS}/{JOB}", job("Complete"))
    assert ops("model", "download", "--env", "dev", "--repo", "meta-llama/Llama-2-7b-hf", "--name", "llama-2-7b-hf",
               "--image", CPU_IMAGE) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1
    assert "/fsx/models/Llama-2-7b-hf" in out.err and "choose another --name" in out.err


def test_status_lists_the_download_jobs(server, capsys):
    server.on("GET", JOBS, {"kind": "JobList", "items": [job("Complete")]})
    assert ops("model", "status") == 0
    assert server.calls[0].query["labelSelector"] == "app.kubernetes.io/component=model-download"
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["MODEL", "REPO", "PHASE", "STARTED", "MESSAGE"]
    assert row.split()[:3] == ["Llama-2-7b-hf", "meta-llama/Llama-2-7b-hf", "Complete"]


def pod(name: str, phase: str, created: str) -> dict:
    return {"metadata": {"name": name, "creationTimestamp": created}, "status": {"phase": phase}}


def test_logs_follow_the_newest_attempts_pod(server, capsys):
    server.on("GET", f"{NS}/pods", {"kind": "PodList", "items": [
        pod(f"{JOB}-aaaaa", "Failed", "2026-11-23T10:00:00Z"), pod(f"{JOB}-bbbbb", "Running", "2026-11-23T10:05:00Z")]})
    server.on("GET", f"{NS}/pods/{JOB}-bbbbb/log", b"progress: Fetching 3 files: 1/3\ncomplete: done\n")
    assert ops("model", "logs", "Llama-2-7b-hf", "-f") == 0
    listing, stream = server.calls
    assert listing.query["labelSelector"] == f"batch.kubernetes.io/job-name={JOB}"
    assert stream.query["container"] == "download" and stream.query["follow"] is True
    assert capsys.readouterr().out.splitlines() == ["progress: Fetching 3 files: 1/3", "complete: done"]


def test_a_followed_log_that_breaks_or_is_refused_is_one_line(server, capsys):
    """A reset mid-log, or a pod gone before its log is read, was a crash report: 'a bug in ops'."""
    server.on("GET", f"{NS}/pods", {"kind": "PodList", "items": [pod(f"{JOB}-bbbbb", "Running", "2026-11-23T10:05:00Z")]})
    server.on("GET", f"{NS}/pods/{JOB}-bbbbb/log", Reset(b"progress: Fetching 3 files: 1/3\n"))
    assert ops("model", "logs", "Llama-2-7b-hf", "-f") == 2
    out = capsys.readouterr()
    assert out.out.splitlines() == ["progress: Fetching 3 files: 1/3"]
    [line] = out.err.splitlines()
    assert line.startswith(f"error: the log stream of pod {JOB}-bbbbb broke (")
    assert "`python -m ops model logs Llama-2-7b-hf -f` follows it again" in line
    server.on("GET", f"{NS}/pods/{JOB}-bbbbb/log", {"kind": "Status", "code": 404, "reason": "NotFound",
                                                    "message": f'pods "{JOB}-bbbbb" not found'}, status=404)
    assert ops("model", "logs", "Llama-2-7b-hf", "-f") == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: ") and f'HTTP 404 pods "{JOB}-bbbbb" not found' in line


def test_logs_of_a_pending_pod_say_so_in_one_line(server, capsys):
    server.on("GET", f"{NS}/pods", {"kind": "PodList", "items": [pod(f"{JOB}-aaaaa", "Pending", "2026-11-23T10:00:00Z")]})
    assert ops("model", "logs", "Llama-2-7b-hf") == 2
    assert "Pending" in capsys.readouterr().err
