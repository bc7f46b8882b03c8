"""`ops data`: render a data source's Job, create it (refusing while one for the source runs),
and follow it to the end, through the real kubernetes client over the recording fake API server."""

from __future__ import annotations

import pytest
import yaml

from k8s.pods.data_job import DATA_SOURCE_LABEL
from kube_fakes import FakeApiServer, Reset, api_client_on
from ops import data
from ops.cli import main
from ops.envconfig import load
from ops.errors import OpsError

JOBS = "/apis/batch/v1/namespaces/training/jobs"
PODS = "/api/v1/namespaces/training/pods"
IMAGE = "registry.example/trainer:cpu-1"


@pytest.fixture
def api():
    server = FakeApiServer()
    return api_client_on(server), server


def job(name: str, *, active: int = 0, condition: tuple[str, str] | None = None) -> dict:
    status: dict = {"active": active} if active else {}
    if condition:
        status["conditions"] = [{"type": condition[0], "status": "True", "message": condition[1]}]
    return {"apiVersion": "batch/v1", "kind": "Job", "status": status,
            "metadata": {"name": name, "namespace": "training", "labels": {DATA_SOURCE_LABEL: "imagenet"}}}


def pods(*items: tuple[str, str]) -> dict:
    return {"kind": "PodList", "apiVersion": "v1", "metadata": {},
            "items": [{"metadata": {"name": n}, "status": {"phase": phase}} for n, phase in items]}


def test_start_creates_exactly_the_rendered_job(api):
    client, server = api
    manifest = data.render(load("dev"), "imagenet", image=IMAGE)
    server.on("GET", JOBS, {"kind": "JobList", "apiVersion": "batch/v1", "metadata": {}, "items": []})
    server.on("POST", JOBS, dict(job("data-imagenet-7xk2p"), spec=manifest["spec"]), status=201)
    assert data.start(client, manifest) == "data-imagenet-7xk2p"
    listing, create = server.calls
    assert listing.query["labelSelector"] == f"{DATA_SOURCE_LABEL}=imagenet"
    assert (create.method, create.path, create.body) == ("POST", JOBS, manifest)


def test_start_refuses_while_a_job_for_the_same_source_runs(api):
    client, server = api
    manifest = data.render(load("dev"), "imagenet", image=IMAGE)
    server.on("GET", JOBS, {"kind": "JobList", "apiVersion": "batch/v1", "metadata": {},
                            "items": [job("data-imagenet-old", condition=("Complete", "")),
                                      job("data-imagenet-abc", active=1)]})
    with pytest.raises(OpsError, match=r"^data Job data-imagenet-abc for source imagenet is still running"):
        data.start(client, manifest)
    assert [c.method for c in server.calls] == ["GET"]


def test_follow_streams_every_pods_log_and_ends_with_the_jobs_result(api):
    client, server = api
    server.on("GET", f"{JOBS}/data-imagenet-7xk2p", job("data-imagenet-7xk2p", condition=("Complete", "done")))
    server.on("GET", PODS, pods(("data-imagenet-7xk2p-b", "Succeeded"), ("data-imagenet-7xk2p-a", "Failed")))
    server.on("GET", f"{PODS}/data-imagenet-7xk2p-a/log", b"s3sync: 0/17 files\nKilled")
    server.on("GET", f"{PODS}/data-imagenet-7xk2p-b/log", b"s3sync: done: 17 copied\nImageFolder at /fsx/data/imagenet\n")
    lines: list[str] = []
    assert data.follow(client, "data-imagenet-7xk2p", echo=lines.append, sleep=pytest.fail) == 0
    assert lines == [
        "job training/data-imagenet-7xk2p: Complete",
        "[data-imagenet-7xk2p-a] s3sync: 0/17 files", "[data-imagenet-7xk2p-a] Killed",
        "[data-imagenet-7xk2p-b] s3sync: done: 17 copied", "[data-imagenet-7xk2p-b] ImageFolder at /fsx/data/imagenet",
    ]
    log_calls = [c for c in server.calls if c.path.endswith("/log")]
    assert all(c.query["follow"] is True and c.query["container"] == "data" for c in log_calls)
    assert [c.query["labelSelector"] for c in server.calls if c.path == PODS][0] == "batch.kubernetes.io/job-name=data-imagenet-7xk2p"


def test_a_followed_log_that_breaks_is_one_line_saying_the_job_goes_on(api):
    """A reset mid-log (the API server or kubelet restarting) was a crash report: 'a bug in ops'."""
    client, server = api
    server.on("GET", f"{JOBS}/data-x", job("data-x", active=1))
    server.on("GET", PODS, pods(("data-x-a", "Running")))
    server.on("GET", f"{PODS}/data-x-a/log", Reset(b"s3sync: 0/17 files\n"))
    lines: list[str] = []
    with pytest.raises(OpsError) as err:
        data.follow(client, "data-x", echo=lines.append, sleep=pytest.fail)
    assert lines == ["job training/data-x: Running", "[data-x-a] s3sync: 0/17 files"]
    assert str(err.value).startswith("the log stream of pod data-x-a broke (")
    assert "`kubectl -n training logs -f job/data-x` follows it again" in str(err.value)


def test_follow_of_a_failed_job_says_why_and_returns_1(api):
    client, server = api
    server.on("GET", f"{JOBS}/data-x", job("data-x", condition=("Failed", "Job has reached the specified backoff limit")))
    server.on("GET", PODS, pods())
    lines: list[str] = []
    assert data.follow(client, "data-x", echo=lines.append, sleep=pytest.fail) == 1
    assert lines[-1] == "job training/data-x failed: Job has reached the specified backoff limit"


def test_follow_waits_while_the_pod_is_pending(api):
    client, server = api
    server.on("GET", f"{JOBS}/data-x", job("data-x"))
    server.on("GET", PODS, pods(("data-x-a", "Pending")))
    lines: list[str] = []
    naps = []

    def nap(seconds):
        naps.append(seconds)
        server.on("GET", f"{JOBS}/data-x", job("data-x", condition=("Complete", "")))
        server.on("GET", PODS, pods(("data-x-a", "Succeeded")))
        server.on("GET", f"{PODS}/data-x-a/log", b"done\n")

    assert data.follow(client, "data-x", echo=lines.append, sleep=nap, poll_seconds=3) == 0
    assert naps == [3]
    assert lines == ["job training/data-x: Pending (pod data-x-a Pending)", "job training/data-x: Complete",
                     "[data-x-a] done"]


def test_dry_run_prints_the_job_and_an_unknown_source_is_one_line(capsys):
    assert main(["data", "--env", "dev", "--source", "c4", "--image", IMAGE, "--dry-run"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed == data.render(load("dev"), "c4", image=IMAGE)
    assert main(["data", "--env", "dev", "--source", "coco", "--image", IMAGE, "--dry-run"]) == 2
    assert capsys.readouterr().err == ("error: --source: 'coco' is not a data source of dev; its sources: "
                                       "imagenet, c4\n")


def test_api_errors_are_one_line(api):
    client, server = api
    manifest = data.render(load("dev"), "imagenet", image=IMAGE)
    server.on("GET", JOBS, {"kind": "Status", "code": 429, "reason": "TooManyRequests",
                            "message": "the server has received too many requests"}, status=429)
    with pytest.raises(OpsError) as err:
        data.start(client, manifest)
    assert str(err.value) == "Kubernetes API: HTTP 429 the server has received too many requests"
    server.on("GET", JOBS, {"kind": "Status", "code": 403, "message": "jobs.batch is forbidden"}, status=403)
    with pytest.raises(OpsError) as err:  # what ops.kube's guard says for every command
        data.start(client, manifest)
    assert "denied GET /apis/batch/v1/namespaces/training/jobs (HTTP 403)" in str(err.value)
