"""submit / status / logs / delete through the real kubeflow-training SDK and kubernetes client.

Only HTTP is replaced: the kubernetes ApiClient's urllib3 pool manager is a recording fake API
server, so everything above it (TrainingClient, CustomObjectsApi, CoreV1Api, the log Watch)
runs as it would against a cluster.
"""

from __future__ import annotations

import os

import pytest
import yaml
from kubeflow.training import TrainingClient
from kubernetes.client import Configuration

from ops import kube
from ops.envconfig import load
from ops.errors import OpsError
from kube_fakes import FakeApiServer, created_jobs, jobs_and_their_policies

JOBS = "/apis/kubeflow.org/v1/namespaces/training/pytorchjobs"
PODS = "/api/v1/namespaces/training/pods"


@pytest.fixture
def api():
    config = Configuration()
    config.host = "https://k8s.test"
    client = TrainingClient(client_configuration=config, namespace="training")
    server = FakeApiServer()
    # custom_api and core_api share one ApiClient, hence one REST client and one pool manager.
    assert client.core_api.api_client is client.custom_api.api_client
    client.custom_api.api_client.rest_client.pool_manager = server
    server.answer(jobs_and_their_policies(server))
    return client, server


def job(name: str, *conditions: tuple[str, str]) -> dict:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "training", "creationTimestamp": "2026-11-22T10:00:00Z"},
            "spec": {"pytorchReplicaSpecs": {}, "runPolicy": {}},
            "status": {"conditions": [{"type": t, "status": s, "message": f"{name} is {t.lower()}"}
                                      for t, s in conditions]}}


def pod(name: str, phase: str) -> dict:
    return {"metadata": {"name": name}, "status": {"phase": phase}}


def test_submit_posts_exactly_the_manifest_the_chart_renders(api):
    client, server = api
    manifest = kube.render(load("dev"), "cpu-ddp", image="registry/trainer:1", job_name="smoke", overrides=None)
    server.on("POST", JOBS, manifest, status=201)
    assert kube.submit(client, manifest) == "training/smoke"
    assert created_jobs(server) == [manifest]


def test_submit_passes_overrides_to_the_chart(api):
    client, server = api
    manifest = kube.render(load("dev"), "cpu-ddp", image="img:1", job_name="smoke",
                           overrides={"max_restarts": 7})
    server.on("POST", JOBS, manifest, status=201)
    kube.submit(client, manifest)
    assert created_jobs(server)[0]["spec"]["elasticPolicy"]["maxRestarts"] == 7


def test_submit_of_an_existing_job_is_one_line_with_the_api_message(api):
    client, server = api
    manifest = kube.render(load("dev"), "cpu-ddp", image="img:1", job_name="smoke", overrides=None)
    server.on("POST", JOBS, {"kind": "Status", "code": 409, "reason": "AlreadyExists",
                             "message": 'pytorchjobs.kubeflow.org "smoke" already exists'}, status=409)
    with pytest.raises(OpsError) as err:
        kube.submit(client, manifest)
    assert "\n" not in str(err.value)
    assert 'HTTP 409 pytorchjobs.kubeflow.org "smoke" already exists' in str(err.value)


def test_submit_refuses_a_manifest_the_sdk_model_would_truncate(api):
    client, server = api
    manifest = kube.render(load("dev"), "cpu-ddp", image="img:1", job_name="smoke", overrides=None)
    manifest["spec"]["notAField"] = True
    with pytest.raises(OpsError, match="would drop fields"):
        kube.submit(client, manifest)
    assert server.calls == []


def test_status_reports_the_current_phase_of_each_job(api):
    client, server = api
    server.on("GET", JOBS, {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJobList", "items": [
        job("a", ("Created", "True"), ("Running", "True")),
        job("b", ("Created", "True"), ("Running", "True"), ("Succeeded", "True")),
        job("c", ("Created", "True"), ("Running", "False"), ("Failed", "True")),
        job("d")]})
    server.on("GET", PODS, {"kind": "PodList", "items": []})
    rows = {r.name: r for r in kube.status(client)}
    assert {n: r.phase for n, r in rows.items()} == {"a": "Running", "b": "Succeeded", "c": "Failed", "d": "Pending"}
    assert rows["c"].message == "c is failed"
    table = kube.render_status(list(rows.values()))
    assert table.splitlines()[0].split() == ["NAME", "PHASE", "CREATED", "MESSAGE"]


def test_status_of_one_job_reads_that_job(api):
    client, server = api
    server.on("GET", f"{JOBS}/smoke", job("smoke", ("Created", "True")))
    server.on("GET", PODS, {"kind": "PodList", "items": []})
    [row] = kube.status(client, "smoke")
    assert row.phase == "Created"
    assert server.calls[0].path == f"{JOBS}/smoke"


def test_logs_follow_streams_worker_0(api, capsys):
    client, server = api
    server.on("GET", PODS, {"kind": "PodList", "items": [pod("smoke-worker-0", "Running")]})
    server.on("GET", f"{PODS}/smoke-worker-0/log", b"epoch 1 loss 0.9\nepoch 2 loss 0.5\n")
    kube.logs(client, "smoke", follow=True)
    listing, stream = server.calls[0], server.calls[-1]
    # Only Worker replicas exist in our jobs; the operator labels none of them master.
    assert listing.query["labelSelector"] == ("training.kubeflow.org/job-name=smoke,"
                                              "training.kubeflow.org/replica-type=worker,"
                                              "training.kubeflow.org/replica-index=0")
    assert stream.path == f"{PODS}/smoke-worker-0/log"
    assert stream.query["container"] == "pytorch" and stream.query["follow"] is True
    out = capsys.readouterr().out.splitlines()
    assert out == ["[smoke-worker-0] epoch 1 loss 0.9", "[smoke-worker-0] epoch 2 loss 0.5"]


def test_logs_without_follow_prints_what_is_there(api):
    client, server = api
    server.on("GET", PODS, {"kind": "PodList", "items": [pod("smoke-worker-0", "Succeeded")]})
    server.on("GET", f"{PODS}/smoke-worker-0/log", b"done\n")
    lines: list[str] = []
    kube.logs(client, "smoke", echo=lines.append)
    assert lines == ["[smoke-worker-0] done"]
    assert "follow" not in server.calls[-1].query


def test_logs_put_the_trainers_efa_verdict_first(api):
    """A worker that stopped because NCCL was not on EFA (trainer/nccl_net.py) ends its log with the
    reason; `ops logs` shows that line before the rest."""
    client, server = api
    verdict = ("EFA check failed: NCCL fell back to Socket instead of the aws-ofi-nccl plugin: traffic would go "
               "over TCP, not EFA")
    server.on("GET", PODS, {"kind": "PodList", "items": [pod("llm-worker-0", "Failed")]})
    server.on("GET", f"{PODS}/llm-worker-0/log", f"starting\nloading config\n{verdict}\n".encode())
    lines: list[str] = []
    kube.logs(client, "llm", echo=lines.append)
    assert lines == [f"==> [llm-worker-0] {verdict}", "[llm-worker-0] starting", "[llm-worker-0] loading config",
                     f"[llm-worker-0] {verdict}"]


def test_logs_of_a_pending_worker_say_so(api):
    client, server = api
    server.on("GET", PODS, {"kind": "PodList", "items": [pod("smoke-worker-0", "Pending")]})
    with pytest.raises(OpsError, match="smoke-worker-0 is Pending"):
        kube.logs(client, "smoke")


def test_logs_of_a_worker_that_cannot_pull_its_image_say_why_it_waits(api):
    """"Its log starts when it runs" alone sent the user waiting for a pod that never runs."""
    from kube_fakes import worker_status

    client, server = api
    pull_fails = ("ImagePullBackOff", 'Back-off pulling image "registry/trainer:3"')
    waits = {**pod("smoke-worker-0", "Pending"),
             "status": worker_status("pytorch", waiting=pull_fails, image="registry/trainer:3")}
    server.on("GET", PODS, {"kind": "PodList", "items": [waits]})
    with pytest.raises(OpsError) as caught:
        kube.logs(client, "smoke")
    assert str(caught.value) == ('worker pod smoke-worker-0 is Pending: it cannot pull image registry/trainer:3 '
                                 '(ImagePullBackOff: Back-off pulling image "registry/trainer:3"); its log starts when '
                                 'it runs')


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_logs_of_an_ended_run_whose_pods_are_gone_say_where_the_log_is(api, phase):
    """cleanPodPolicy Running deletes the pods still running when a run ends: a Failed run's worker 0
    is gone, and "no pod (yet)" would send the user waiting for one that never comes."""
    client, server = api
    server.on("GET", PODS, {"kind": "PodList", "items": []})
    server.on("GET", f"{JOBS}/llm", job("llm", ("Running", "True"), (phase, "True")))
    with pytest.raises(OpsError) as caught:
        kube.logs(client, "llm")
    assert str(caught.value) == (
        f"job llm has ended ({phase}) and its worker 0 pod is gone; its log stays in CloudWatch Logs: "
        "group /aws/containerinsights/ENV-training/application, the streams that name llm-worker-0")


def test_logs_of_a_run_not_started_yet_or_not_there_say_so(api):
    client, server = api
    server.on("GET", PODS, {"kind": "PodList", "items": []})
    server.on("GET", f"{JOBS}/smoke", job("smoke", ("Created", "True")))
    with pytest.raises(OpsError, match=r"job smoke has no worker 0 pod \(yet\)"):
        kube.logs(client, "smoke")
    with pytest.raises(OpsError, match="lists the jobs in training"):
        kube.logs(client, "ghost")


def test_delete_deletes_the_job_and_a_missing_one_is_one_line(api):
    client, server = api
    server.on("DELETE", f"{JOBS}/smoke", {"kind": "Status", "status": "Success"})
    kube.delete(client, "smoke")
    assert (server.calls[0].method, server.calls[0].path) == ("DELETE", f"{JOBS}/smoke")
    with pytest.raises(OpsError, match="Failed to delete PyTorchJob: training/ghost: HTTP 404"):
        kube.delete(client, "ghost")


def test_training_client_reads_the_given_kubeconfig(tmp_path):
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://cluster.example:443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    client = kube.training_client(str(path), namespace="research")
    assert client.namespace == "research"
    assert client.custom_api.api_client.configuration.host == "https://cluster.example:443"


@pytest.mark.parametrize("text, says", [
    ("", "is empty"), ("\n# only a comment\n", "is empty"), ("---\n", "is empty"),
    ("apiVersion: v1\n---\nkind: Config\n", "holds 2 YAML documents"), ("- a\n- b\n", "got list"),
])
def test_a_kubeconfig_that_is_no_mapping_is_one_line_saying_what_it_holds(tmp_path, text, says):
    """An empty file was reported as 'got list': the list of its YAML documents, which has none."""
    path = tmp_path / "config"
    path.write_text(text)
    with pytest.raises(OpsError) as err:
        kube.check_kubeconfig(str(path))
    assert str(err.value).startswith(f"--kubeconfig: {path} ") and says in str(err.value)


def _api_client_problem(kubeconfig: str | None) -> str:
    """The OpsError line of kube.api_client, in this process under a deadline: the client opens the
    files a kubeconfig names with a plain open(), which waits for ever on a named pipe."""
    from cli_sweep import run_in_process

    problems = []

    def attempt(_):
        with pytest.raises(OpsError) as err:
            kube.api_client(kubeconfig)
        problems.append(str(err.value))

    outcome = run_in_process(attempt, [], timeout_s=30)
    assert not outcome.hung and not outcome.escaped, outcome.escaped or "no answer in 30 s"
    return problems[0]


def _kubeconfig(path, **user) -> str:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://cluster.example:443"}}],
        "users": [{"name": "u", "user": user or {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    return str(path)


def test_the_default_kubeconfig_is_checked_like_a_named_one(tmp_path, monkeypatch):
    """Without --kubeconfig or KUBECONFIG the client reads ~/.kube/config: /dev/zero there reported
    a bug in ops."""
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").symlink_to("/dev/zero")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert _api_client_problem(None) == (f"~/.kube/config: {tmp_path}/.kube/config is a character device, "
                                         "expected a regular file")


@pytest.mark.parametrize("given", [False, True])
def test_a_named_pipe_at_the_default_kubeconfig_is_refused_not_waited_on(tmp_path, given):
    """Importing the Kubeflow SDK reads the default kubeconfig (for TrainingClient's default
    namespace), whatever --kubeconfig says: a pipe at ~/.kube/config hung `ops status` with or
    without --kubeconfig. A fresh process, as the import happens once."""
    from ops_fakes import isolated_aws_env, run_ops

    (tmp_path / ".kube").mkdir()
    os.mkfifo(tmp_path / ".kube" / "config")
    flag = ["--kubeconfig", _kubeconfig(tmp_path / "good")] if given else []
    done = run_ops(["status", *flag], isolated_aws_env(tmp_path), timeout=30)
    assert (done.returncode, done.stderr) == (2, f"error: ~/.kube/config: {tmp_path}/.kube/config is a named pipe, "
                                                 "expected a regular file\n")


@pytest.mark.parametrize("special, what", [("fifo", "is a named pipe, expected a regular file"),
                                           ("sparse", "is larger than 16,777,216 bytes")])
def test_a_token_file_the_kubeconfig_names_is_checked_before_the_client_reads_it_whole(tmp_path, special, what):
    """The client reads a user's tokenFile whole with open().read(): a pipe waited for ever, and
    /dev/zero or a huge file filled the memory. A relative name is the kubeconfig's folder's, as
    the client reads it."""
    token = tmp_path / "token"
    if special == "fifo":
        os.mkfifo(token)
    else:  # just past the limit: read whole by the unchecked client, it costs no more than that
        with open(token, "wb") as f:
            f.truncate((16 << 20) + 1)
    path = _kubeconfig(tmp_path / "config", tokenFile="token")
    assert _api_client_problem(path) == f"--kubeconfig: {path}: users[0].user.tokenFile: {token} {what}"


def test_submit_checks_the_pod_template_against_the_podspec_schema_with_the_overrides_applied(monkeypatch):
    """The operator drops pod-template fields it does not know; `ops submit --set ...` refuses
    them instead, in one line naming the field."""
    import k8s.pods.pytorchjob
    from config import ConfigError

    env = load("dev")
    overrides = {"env": {"LOGLEVEL": "DEBUG"}, "max_restarts": 2}
    rendered = kube.render(env, "llama3-8b-fsdp", image="img:1", job_name="smoke", overrides=overrides)
    assert {"name": "LOGLEVEL", "value": "DEBUG"} in rendered["spec"]["pytorchReplicaSpecs"]["Worker"][
        "template"]["spec"]["containers"][0]["env"]
    monkeypatch.setattr(k8s.pods.pytorchjob, "network_env",
                        lambda instance, **_: [{"name": "NCCL_DEBUG", "value": "INFO", "valueFrum": {}}])
    with pytest.raises(ConfigError, match="valueFrum") as err:
        kube.render(env, "llama3-8b-fsdp", image="img:1", job_name="smoke", overrides=overrides)
    assert "PyTorchJob/llama3-8b-fsdp Worker pod template" in str(err.value) and "\n" not in str(err.value)
