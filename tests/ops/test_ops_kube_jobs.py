"""Runs (start / stop / submit), and an API server that cannot be reached, through the real
kubeflow-training SDK and kubernetes client.

Only HTTP is replaced (the recording fake API server of kube_fakes.py), except where the test
needs a real socket: a closed loopback port, and a name that cannot resolve.
"""

from __future__ import annotations

import json
import os
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
from kube_fakes import FakeApiServer, created_jobs, jobs_and_their_policies, training_client_on, worker_status
from kube_http import RESOURCES, Answer, RecordingApiServer, status_body
from ops_fakes import isolated_aws_env, run_ops


def job(name: str, *conditions: str, suspend: bool | None = None, preset: str | None = None,
        image: str = "registry/trainer:1", created: str = "2026-11-22T10:00:00Z") -> dict:
    run_policy = {} if suspend is None else {"suspend": suspend}
    labels = {"eks-distributed-training.io/preset": preset} if preset else {}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "training", "creationTimestamp": created, "labels": labels},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": {"containers": [
                {"name": "pytorch", "image": image}]}}}}, "runPolicy": run_policy},
            "status": {"conditions": [{"type": t, "status": "True", "message": f"{name} is {t.lower()}"}
                                      for t in conditions]}}


def listing(*jobs: dict) -> dict:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJobList", "items": list(jobs)}


PODS = "/api/v1/namespaces/training/pods"
JOBS_PATH_LIST = JOBS


def pod(name: str, run: str, phase: str, *, preset: str = "cpu-ddp", deleted: bool = False,
        status: dict | None = None) -> dict:
    """A worker pod as k8s/pods/pytorchjob.py labels it; `deleted`: terminating (its grace period runs);
    `status`: the pod's whole status (kube_fakes.worker_status) instead of only `phase`."""
    metadata = {"name": name, "namespace": "training",
                "labels": {"eks-distributed-training.io/job": run, "eks-distributed-training.io/preset": preset}}
    if deleted:
        metadata["deletionTimestamp"] = "2026-11-22T10:05:00Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "status": status or {"phase": phase}}


def pod_list(*pods: dict) -> dict:
    return {"apiVersion": "v1", "kind": "PodList", "items": list(pods)}


@pytest.fixture
def api(monkeypatch):
    """The fake server, and `python -m ops` in this process talking to it through a real TrainingClient."""
    server = FakeApiServer()
    server.answer(jobs_and_their_policies(server))
    server.on("GET", PODS, pod_list())
    client = training_client_on(server)
    monkeypatch.setattr(kube, "training_client", lambda *args, **kwargs: client)
    return server


@pytest.fixture(scope="module")
def dev():
    from ops import envconfig

    return envconfig.load("dev")


IMAGE = "registry/trainer:2"


def run_name(dev, preset: str, image: str = IMAGE, **overrides) -> str:
    return kube.render(dev, preset, image=image, job_name=None, overrides=overrides or None)["metadata"]["name"]


def start(*args: str) -> int:
    return cli.main(["start", *args, "--env", "dev", "--image", IMAGE])


def test_start_creates_the_run_of_the_deployed_code_named_after_its_spec(api, dev, capsys):
    api.on("GET", JOBS, listing())
    api.on("POST", JOBS, {}, status=201)
    assert start("cpu-ddp") == 0
    name = created_jobs(api)[-1]["metadata"]["name"]
    assert name == run_name(dev, "cpu-ddp") and re.fullmatch(r"cpu-ddp-[0-9a-f]{8}", name)
    labels = created_jobs(api)[-1]["metadata"]["labels"]
    assert labels["eks-distributed-training.io/spec-digest"] == name.rsplit("-", 1)[1]
    assert capsys.readouterr().out == (f"created PyTorchJob training/{name} (image {IMAGE}); "
                                       "it checkpoints to /fsx/checkpoints/cpu-ddp\n")


def test_new_code_or_new_settings_name_a_new_run_the_same_ones_the_same(dev):
    assert run_name(dev, "llama3-8b-fsdp") == run_name(dev, "llama3-8b-fsdp")
    assert run_name(dev, "llama3-8b-fsdp") != run_name(dev, "llama3-8b-fsdp", image="registry/trainer:3")
    assert run_name(dev, "llama3-8b-fsdp") != run_name(dev, "llama3-8b-fsdp", max_restarts=1)


def test_start_resumes_a_suspended_run_of_this_spec_with_a_merge_patch_of_run_policy_suspend(api, dev, capsys):
    name = run_name(dev, "llama3-8b-fsdp")
    api.on("GET", JOBS, listing(job(name, "Created", "Suspended", suspend=True, preset="llama3-8b-fsdp", image=IMAGE)))
    api.on("GET", f"{JOBS}/{name}", job(name, "Created", "Suspended", suspend=True))
    api.on("PATCH", f"{JOBS}/{name}", job(name, "Created", suspend=False))
    assert start("llama3-8b-fsdp") == 0
    patch = api.calls[-1]
    assert (patch.method, patch.path, patch.body) == ("PATCH", f"{JOBS}/{name}", {"spec": {"runPolicy": {"suspend": False}}})
    # A merge patch changes only that field; the run's spec stays as it was created.
    assert patch.headers["Content-Type"] == "application/merge-patch+json"
    assert not [c for c in api.calls if c.method == "POST"]
    assert capsys.readouterr().out == f"PyTorchJob training/{name} resumed: its pods start\n"


def test_starting_a_running_run_changes_nothing(api, dev, capsys):
    name = run_name(dev, "cpu-ddp")
    api.on("GET", JOBS, listing(job(name, "Created", "Running", suspend=False, preset="cpu-ddp")))
    api.on("GET", f"{JOBS}/{name}", job(name, "Created", "Running", suspend=False))
    assert start("cpu-ddp") == 0
    assert [c.method for c in api.calls] == ["GET", "GET", "GET"]
    assert capsys.readouterr().out == f"PyTorchJob training/{name} is already started (Running): {name} is running\n"


BACK_OFF = ("CrashLoopBackOff", "back-off 2m40s restarting failed container=pytorch")


@pytest.mark.parametrize("statuses, says", [
    ([{"unschedulable": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}] * 2,
     "(Pending): {name} is running; 2 pods unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu"),
    ([{"waiting": ("ErrImagePull", "not found"), "image": "registry/trainer:2"}] * 2,
     "(Pending): {name} is running; 2 pods cannot pull image registry/trainer:2 (ErrImagePull: not found); a run "
     "keeps its image: push it, or `python -m ops delete {name}` and start again"),
    ([{}, {"last_exited": 1, "waiting": BACK_OFF, "restarts": 5}],
     "(Running): {name} is running; {name}-worker-1 exited 1 (a crash, or a peer stopped first); {name}-worker-1 in "
     "CrashLoopBackOff after 5 restart(s) in place"),
], ids=["unschedulable", "image-pull", "crash-loop"])
def test_starting_a_started_run_says_what_its_pods_say_as_status_does(api, dev, capsys, statuses, says):
    """A user starts a run again to learn why nothing happens: its pods wait for a node or an image,
    or crash in a loop, while the PyTorchJob's condition still says Running."""
    name = run_name(dev, "cpu-ddp")
    api.on("GET", JOBS, listing(job(name, "Created", "Running", suspend=False, preset="cpu-ddp")))
    api.on("GET", f"{JOBS}/{name}", job(name, "Created", "Running", suspend=False))
    api.on("GET", PODS, pod_list(*(exited(name, i, **s) for i, s in enumerate(statuses))))
    assert start("cpu-ddp") == 0
    [line] = capsys.readouterr().out.splitlines()
    assert line.startswith(f"PyTorchJob training/{name} is already started {says.format(name=name)}"), line
    [listed] = [c for c in api.calls if c.path == PODS]  # one pod list, of this run only
    assert listed.query["labelSelector"] == f"eks-distributed-training.io/job={name}"
    assert not [c for c in api.calls if c.method != "GET"], "nothing changed"


def test_start_resumes_a_run_that_was_stopped_after_it_was_listed(api, dev, capsys):
    name = run_name(dev, "cpu-ddp")
    api.on("GET", JOBS, listing(job(name, "Created", "Running", suspend=False, preset="cpu-ddp")))
    api.on("GET", f"{JOBS}/{name}", job(name, "Created", "Suspended", suspend=True))
    api.on("PATCH", f"{JOBS}/{name}", job(name, "Created", suspend=False))
    assert start("cpu-ddp") == 0
    assert [c.body for c in api.calls if c.method == "PATCH"] == [{"spec": {"runPolicy": {"suspend": False}}}]
    assert capsys.readouterr().out == f"PyTorchJob training/{name} resumed: its pods start\n"


def test_start_refuses_while_a_run_of_older_code_is_active_and_names_the_choice(api, capsys):
    """Two active runs of a preset would write one checkpoint folder."""
    old = job("llama3-8b-fsdp-0ld0ld00", "Created", "Running", preset="llama3-8b-fsdp", image="registry/trainer:1")
    api.on("GET", JOBS, listing(old))
    assert start("llama3-8b-fsdp") == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "already runs as PyTorchJob training/llama3-8b-fsdp-0ld0ld00 (Running, image registry/trainer:1)" in line
    assert f"image {IMAGE}" in line and "`python -m ops stop llama3-8b-fsdp-0ld0ld00`" in line
    assert line.endswith("the new run resumes from /fsx/checkpoints/llama3-8b-fsdp")
    assert [c.method for c in api.calls] == ["GET"], "nothing created, nothing stopped"


def test_start_refuses_to_resume_a_suspended_run_while_another_run_of_the_preset_is_active(api, dev, capsys):
    """Resuming this spec's suspended run beside an active one (a rollback to older code after newer code
    started) would put two runs on one checkpoint folder, as creating one would."""
    name = run_name(dev, "cpu-ddp")
    api.on("GET", JOBS, listing(
        job(name, "Created", "Suspended", suspend=True, preset="cpu-ddp", image=IMAGE, created="2026-11-01T00:00:00Z"),
        job("cpu-ddp-n3wn3w00", "Created", "Running", preset="cpu-ddp", image="registry/trainer:3")))
    api.on("GET", f"{JOBS}/{name}", job(name, "Created", "Suspended", suspend=True))
    assert start("cpu-ddp") == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "already runs as PyTorchJob training/cpu-ddp-n3wn3w00 (Running, image registry/trainer:3)" in line
    assert "`python -m ops stop cpu-ddp-n3wn3w00`" in line
    assert [c.method for c in api.calls] == ["GET"], "nothing resumed"


def test_validations_smoke_run_is_no_run_of_its_preset(api, dev, capsys):
    """It checkpoints to a folder of its own, so it does not block `ops start cpu-ddp`."""
    smoke = job("validation-cpu-ddp", "Created", "Running", preset="cpu-ddp")
    smoke["metadata"]["labels"]["eks-distributed-training.io/validation"] = "true"
    api.on("GET", JOBS, listing(smoke))
    api.on("POST", JOBS, {}, status=201)
    assert start("cpu-ddp") == 0
    assert capsys.readouterr().out.startswith(f"created PyTorchJob training/{run_name(dev, 'cpu-ddp')}")


def test_start_beside_a_suspended_or_finished_older_run_creates_and_says_which_stay(api, dev, capsys):
    api.on("GET", JOBS, listing(
        job("cpu-ddp-aaaaaaaa", "Created", "Succeeded", preset="cpu-ddp", created="2026-11-01T00:00:00Z"),
        job("cpu-ddp-bbbbbbbb", "Created", "Suspended", suspend=True, preset="cpu-ddp"),
        job("vision-tiny-cccccccc", "Created", "Running", preset="vision-tiny")))
    api.on("POST", JOBS, {}, status=201)
    assert start("cpu-ddp") == 0
    created, older = capsys.readouterr().out.splitlines()
    assert created.startswith(f"created PyTorchJob training/{run_name(dev, 'cpu-ddp')}")
    assert older.startswith("older runs of cpu-ddp, left as they are: cpu-ddp-aaaaaaaa (Succeeded, "
                            "image registry/trainer:1), cpu-ddp-bbbbbbbb (Suspended, ")


def test_start_refuses_while_the_pods_of_a_stopped_run_still_save_and_names_them(api, dev, capsys):
    """`ops stop OLD` then `ops start`: the old pods save on SIGTERM (minutes, for a large model) and
    renew the checkpoint folder's lease meanwhile; the new run's rank 0 waits only 140 s for that
    lease (trainer/lease.py WAIT_S), then fails and spends a restart."""
    old = "cpu-ddp-0ld0ld00"
    api.on("GET", JOBS, listing(job(old, "Created", "Suspended", suspend=True, preset="cpu-ddp")))
    api.on("POST", JOBS, {}, status=201)
    api.on("GET", PODS, pod_list(
        pod(f"{old}-worker-0", old, "Running", deleted=True), pod(f"{old}-worker-1", old, "Running", deleted=True),
        pod("cpu-ddp-aaaaaaaa-worker-0", "cpu-ddp-aaaaaaaa", "Succeeded"),  # a finished run's: it stays, saving nothing
        pod("validation-cpu-ddp-worker-0", "validation-cpu-ddp", "Running")))  # its own checkpoint folder
    assert start("cpu-ddp") == 2
    [line] = capsys.readouterr().err.splitlines()
    assert (f"the pods of a stopped run of preset cpu-ddp are still stopping ({old}-worker-0, {old}-worker-1): they "
            "save a checkpoint into /fsx/checkpoints/cpu-ddp first") in line, line
    assert "start again once they are gone" in line
    [listed] = [c for c in api.calls if c.path == PODS]
    assert listed.query["labelSelector"] == "eks-distributed-training.io/preset=cpu-ddp"
    assert not [c for c in api.calls if c.method != "GET"], "nothing created"
    api.on("GET", PODS, pod_list(pod("cpu-ddp-aaaaaaaa-worker-0", "cpu-ddp-aaaaaaaa", "Succeeded")))
    assert start("cpu-ddp") == 0  # once they are gone
    assert created_jobs(api)[-1]["metadata"]["name"] == run_name(dev, "cpu-ddp")


@pytest.mark.parametrize("phase, code, words", [
    ("Succeeded", 0, "has finished (Succeeded): nothing to start"), ("Failed", 2, "failed (`python -m ops logs")])
def test_a_finished_run_of_this_spec_is_not_restarted(api, dev, capsys, phase, code, words):
    name = run_name(dev, "cpu-ddp")
    api.on("GET", JOBS, listing(job(name, "Created", "Running", phase, suspend=False, preset="cpu-ddp")))
    assert start("cpu-ddp") == code
    out = capsys.readouterr()
    assert words in out.out + out.err and f"`python -m ops delete {name}`" in out.out + out.err
    assert [c.method for c in api.calls] == ["GET"]


def test_stop_suspends_every_active_run_of_a_preset(api, capsys):
    api.on("GET", JOBS, listing(job("cpu-ddp-aaaaaaaa", "Created", "Running", preset="cpu-ddp"),
                                job("cpu-ddp-bbbbbbbb", "Created", "Suspended", suspend=True, preset="cpu-ddp")))
    api.on("GET", f"{JOBS}/cpu-ddp-aaaaaaaa", job("cpu-ddp-aaaaaaaa", "Created", "Running"))
    api.on("PATCH", f"{JOBS}/cpu-ddp-aaaaaaaa", job("cpu-ddp-aaaaaaaa", "Created", "Running", suspend=True))
    assert cli.main(["stop", "cpu-ddp"]) == 0
    [patch] = [c for c in api.calls if c.method == "PATCH"]
    assert patch.path.endswith("/cpu-ddp-aaaaaaaa") and patch.body == {"spec": {"runPolicy": {"suspend": True}}}
    assert capsys.readouterr().out == "PyTorchJob training/cpu-ddp-aaaaaaaa suspended: its pods stop\n"


def test_stop_takes_a_run_by_name(api, capsys):
    api.on("GET", JOBS, listing(job("my-run", "Created", "Running", preset="cpu-ddp")))
    api.on("GET", f"{JOBS}/my-run", job("my-run", "Created", "Running"))
    api.on("PATCH", f"{JOBS}/my-run", job("my-run", "Created", "Running", suspend=True))
    assert cli.main(["stop", "my-run"]) == 0
    assert "my-run suspended" in capsys.readouterr().out


def test_stopping_what_is_neither_a_run_nor_a_preset_is_one_line(api, capsys):
    api.on("GET", JOBS, listing(job("cpu-ddp-aaaaaaaa", "Created", "Succeeded", preset="cpu-ddp")))
    assert cli.main(["stop", "gpt5"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "no PyTorchJob training/gpt5, and no preset of that name" in line


@pytest.mark.parametrize("runs", [(), (job("cpu-ddp-aaaaaaaa", "Created", "Succeeded", preset="cpu-ddp"),
                                       job("cpu-ddp-bbbbbbbb", "Created", "Suspended", suspend=True, preset="cpu-ddp"))],
                         ids=["no run", "finished and suspended runs"])
def test_stopping_a_preset_with_nothing_running_succeeds_and_says_so(api, capsys, runs):
    """As stopping a run that is already suspended does: `ops stop X && ops start X` is a second day's script."""
    api.on("GET", JOBS, listing(*runs))
    assert cli.main(["stop", "cpu-ddp"]) == 0
    out = capsys.readouterr()
    assert out.out == "nothing of preset cpu-ddp is running in training: nothing to stop\n" and out.err == ""
    assert {c.method for c in api.calls} == {"GET"}, "nothing changed"


def test_start_takes_only_presets(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["start", "gpt5", "--env", "dev"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid choice: 'gpt5'" in err and "cpu-ddp" in err


def test_submit_creates_the_run_of_this_spec_and_a_second_submit_is_a_conflict(api, dev, capsys):
    api.on("GET", JOBS, listing())
    api.on("POST", JOBS, {}, status=201)
    assert cli.main(["submit", "--env", "dev", "--preset", "cpu-ddp", "--image", IMAGE]) == 0
    name = created_jobs(api)[-1]["metadata"]["name"]
    assert name == run_name(dev, "cpu-ddp")
    assert created_jobs(api)[-1]["spec"]["elasticPolicy"]["rdzvId"].startswith(name)
    api.on("GET", JOBS, listing(job(name, "Created", "Suspended", suspend=True, preset="cpu-ddp")))
    api.on("POST", POLICIES, {"kind": "Status", "code": 409, "reason": "AlreadyExists", "message": "exists"}, status=409)
    api.on("POST", JOBS, {"kind": "Status", "code": 409, "reason": "AlreadyExists",
                          "message": f'pytorchjobs.kubeflow.org "{name}" already exists'}, status=409)
    assert cli.main(["submit", "--env", "dev", "--preset", "cpu-ddp", "--image", IMAGE]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert f'HTTP 409 pytorchjobs.kubeflow.org "{name}" already exists' in line
    assert line.endswith("`ops start PRESET --env ENV` resumes it; `ops submit --name` names another")


def test_submit_creates_the_runs_peers_policy_first_and_hands_it_to_the_run(api):
    """Its pods never start without the rule that lets them reach each other (k8s/pods/network_policy.py), and
    the policy goes when the run is deleted (an ownerReference to the run)."""
    api.on("GET", JOBS, listing())
    api.on("POST", JOBS, {}, status=201)
    assert cli.main(["submit", "--env", "dev", "--preset", "cpu-ddp", "--image", "img:1", "--name", "run-7"]) == 0
    steps = [(c.method, c.path) for c in api.calls]
    assert steps == [("GET", JOBS), ("GET", PODS), ("POST", POLICIES), ("POST", JOBS), ("GET", f"{JOBS}/run-7"),
                     ("PATCH", f"{POLICIES}/run-7-peers")]
    policy = api.calls[2].body
    same_job = {"matchLabels": {"training.kubeflow.org/job-name": "run-7"}}
    assert policy["spec"]["podSelector"] == same_job
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": same_job}], "ports": [{"protocol": "TCP"}]}]
    assert api.calls[-1].body == {"metadata": {"ownerReferences": [
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "run-7", "uid": "uid-run-7"}]}}


def test_start_creates_the_runs_peers_policy_as_submit_does(api, dev):
    api.on("GET", JOBS, listing())
    api.on("POST", JOBS, {}, status=201)
    assert start("cpu-ddp") == 0
    name = run_name(dev, "cpu-ddp")
    steps = [(c.method, c.path) for c in api.calls]
    assert steps[1:] == [("GET", PODS), ("POST", POLICIES), ("POST", JOBS), ("GET", f"{JOBS}/{name}"),
                         ("PATCH", f"{POLICIES}/{name}-peers")]
    assert api.calls[2].body["spec"]["podSelector"] == {"matchLabels": {"training.kubeflow.org/job-name": name}}


def test_a_refused_run_takes_its_new_peers_policy_with_it_but_never_an_existing_one(api, capsys):
    api.on("GET", JOBS, listing())
    api.on("POST", JOBS, {"kind": "Status", "code": 422, "reason": "Invalid", "message": "denied by webhook"}, status=422)
    assert cli.main(["submit", "--env", "dev", "--preset", "cpu-ddp", "--image", "img:1", "--name", "run-8"]) == 2
    assert ("DELETE", f"{POLICIES}/run-8-peers") in [(c.method, c.path) for c in api.calls]
    api.calls.clear()
    api.on("POST", POLICIES, {"kind": "Status", "code": 409, "reason": "AlreadyExists", "message": "exists"}, status=409)
    assert cli.main(["submit", "--env", "dev", "--preset", "cpu-ddp", "--image", "img:1", "--name", "run-9"]) == 2
    assert "DELETE" not in [c.method for c in api.calls]
    assert capsys.readouterr().err.count("\n") == 2

def test_run_names_stay_valid_job_names_for_every_preset():
    from config.kubernetes import JOB_NAME_PATTERN, MAX_JOB_NAME
    from k8s.pods.pytorchjob import run_name as name_of

    for preset in [*PRESETS, "a" * 60]:
        name = name_of(preset, "0123abcd")
        assert JOB_NAME_PATTERN.match(name) and len(name) <= MAX_JOB_NAME and name.endswith("-0123abcd"), name


def test_set_env_pairs_reach_the_job_as_variables(api):
    api.on("GET", JOBS, listing())
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


def exited(run: str, index: int, **status) -> dict:
    return pod(f"{run}-worker-{index}", run, "", status=worker_status("pytorch", **status))


def test_status_shows_each_worker_pods_last_exit_and_what_it_means_and_when_restarts_cannot_help(api, capsys):
    """The pod's status is its workers' (trainer.launch). The PyTorchJob (restartPolicy OnFailure) restarts a
    pod that exits 65 until its backoff limit, and its conditions never say why: only the pods do."""
    api.on("GET", JOBS, listing(job("cpu-ddp-aaaaaaaa", "Created", "Running", preset="cpu-ddp"),
                                job("vision-tiny-bbbbbbbb", "Created", "Running", preset="vision-tiny")))
    api.on("GET", PODS, pod_list(
        exited("cpu-ddp-aaaaaaaa", 0, last_exited=65), exited("cpu-ddp-aaaaaaaa", 1, exited=1),
        exited("vision-tiny-bbbbbbbb", 0, last_exited=143), exited("vision-tiny-bbbbbbbb", 1, last_exited=143)))
    assert cli.main(["status"]) == 0
    first, second = capsys.readouterr().out.splitlines()[1:]
    assert first.split()[:2] == ["cpu-ddp-aaaaaaaa", "Running"]
    assert first.endswith("cpu-ddp-aaaaaaaa is running; cpu-ddp-aaaaaaaa-worker-0 exited 65 (checkpoints exist and "
                          "none loads); cpu-ddp-aaaaaaaa-worker-1 exited 1 (a crash, or a peer stopped first); exit 65 "
                          "will not get better by restarting: `python -m ops logs cpu-ddp-aaaaaaaa` says why"), first
    assert second.endswith("vision-tiny-bbbbbbbb is running; vision-tiny-bbbbbbbb-worker-0, vision-tiny-bbbbbbbb-worker-1 "
                           "exited 143 (preempted after a checkpoint)"), second
    [listed] = [c for c in api.calls if c.path == PODS]  # one list for every run
    assert listed.query["labelSelector"] == "eks-distributed-training.io/job"


def test_status_tells_a_pod_that_keeps_crashing_from_one_that_crashed_once(api, capsys):
    """Under OnFailure a crashed worker restarts in place: one that recovered and one the kubelet
    holds back between ever longer restarts both read 'exited 1' from their last exit."""
    back_off = ("CrashLoopBackOff", "back-off 2m40s restarting failed container=pytorch")
    api.on("GET", JOBS, listing(job("cpu-ddp-aaaaaaaa", "Created", "Running", preset="cpu-ddp")))
    api.on("GET", PODS, pod_list(exited("cpu-ddp-aaaaaaaa", 0, last_exited=1),
                                 exited("cpu-ddp-aaaaaaaa", 1, last_exited=1, waiting=back_off, restarts=5)))
    assert cli.main(["status"]) == 0
    [row] = capsys.readouterr().out.splitlines()[1:]
    assert row.endswith("exited 1 (a crash, or a peer stopped first); cpu-ddp-aaaaaaaa-worker-1 in CrashLoopBackOff "
                        "after 5 restart(s) in place: the kubelet starts it again after each exit, waiting longer "
                        "each time, up to 5 minutes"), row
    assert row.count("CrashLoopBackOff") == 1 and "worker-0 in CrashLoopBackOff" not in row, row


SCHEDULER_SAYS = ("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.\n preemption: 0/3 nodes are available: "
                  "3 No preemption victims found for incoming pod.")


def test_status_says_why_a_run_waits_when_its_pods_are_unschedulable_in_one_line(api, capsys):
    """The PyTorchJob stays Created, its conditions silent, while the scheduler finds no node for its pods."""
    api.on("GET", JOBS, listing(job("cpu-ddp-aaaaaaaa", "Created", preset="cpu-ddp")))
    api.on("GET", PODS, pod_list(*(pod(f"cpu-ddp-aaaaaaaa-worker-{i}", "cpu-ddp-aaaaaaaa", "",
                                       status=worker_status("pytorch", unschedulable=SCHEDULER_SAYS)) for i in (0, 1))))
    assert cli.main(["status"]) == 0
    [row] = capsys.readouterr().out.splitlines()[1:]
    assert row.split()[:2] == ["cpu-ddp-aaaaaaaa", "Created"]
    assert row.endswith("cpu-ddp-aaaaaaaa is created; 2 pods unschedulable: 0/3 nodes are available: 3 Insufficient "
                        "nvidia.com/gpu"), row


def test_a_running_job_whose_pods_all_wait_for_nodes_again_is_shown_pending(api, capsys):
    """The operator leaves a job's Running condition True when its nodes go and its pods are made
    again; until one of them runs, nothing trains."""
    api.on("GET", JOBS, listing(job("cpu-ddp-aaaaaaaa", "Created", "Running", preset="cpu-ddp")))
    api.on("GET", PODS, pod_list(*(pod(f"cpu-ddp-aaaaaaaa-worker-{i}", "cpu-ddp-aaaaaaaa", "",
                                       status=worker_status("pytorch", unschedulable=SCHEDULER_SAYS)) for i in (0, 1))))
    assert cli.main(["status"]) == 0
    [row] = capsys.readouterr().out.splitlines()[1:]
    assert row.split()[:2] == ["cpu-ddp-aaaaaaaa", "Pending"], row
    assert row.endswith("cpu-ddp-aaaaaaaa is running; 2 pods unschedulable: 0/3 nodes are available: 3 Insufficient "
                        "nvidia.com/gpu"), row


def test_status_says_why_a_job_whose_containers_cannot_start_waits_in_one_line(api, capsys):
    """An image the registry does not have, and a container the kubelet cannot create: the pods are
    scheduled and Pending, and the PyTorchJob stays Created without a word."""
    api.on("GET", JOBS, listing(job("cpu-ddp-aaaaaaaa", "Created", preset="cpu-ddp")))
    api.on("GET", PODS, pod_list(
        exited("cpu-ddp-aaaaaaaa", 0, waiting=("ErrImagePull", "rpc error: code = NotFound desc = not found"),
               image="registry/trainer:3"),
        exited("cpu-ddp-aaaaaaaa", 1, waiting=("CreateContainerConfigError", 'secret "hf-token" not found'))))
    assert cli.main(["status"]) == 0
    [row] = capsys.readouterr().out.splitlines()[1:]
    assert row.split()[:2] == ["cpu-ddp-aaaaaaaa", "Created"]
    assert row.endswith("cpu-ddp-aaaaaaaa is created; 1 pod cannot pull image registry/trainer:3 (ErrImagePull: "
                        "rpc error: code = NotFound desc = not found); 1 pod cannot start its container "
                        '(CreateContainerConfigError: secret "hf-token" not found); a run keeps its image: push it, '
                        "or `python -m ops delete cpu-ddp-aaaaaaaa` and start again"), row


def test_status_of_one_run_reads_only_its_pods_and_none_for_a_run_that_has_none(api, capsys):
    api.on("GET", f"{JOBS}/cpu-ddp-aaaaaaaa", job("cpu-ddp-aaaaaaaa", "Created", "Running"))
    assert cli.main(["status", "cpu-ddp-aaaaaaaa"]) == 0
    [listed] = [c for c in api.calls if c.path == PODS]
    assert listed.query["labelSelector"] == "eks-distributed-training.io/job=cpu-ddp-aaaaaaaa"
    assert capsys.readouterr().out.splitlines()[1].endswith("cpu-ddp-aaaaaaaa is running")
    api.calls.clear()
    api.on("GET", JOBS, listing(job("cpu-ddp-aaaaaaaa", "Created", "Succeeded"),
                                job("cpu-ddp-bbbbbbbb", "Created", "Suspended", suspend=True)))
    assert cli.main(["status"]) == 0
    assert [c.path for c in api.calls] == [JOBS], "a finished or suspended run has no pods to read"


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


@pytest.fixture
def silent_endpoint():
    """A loopback port that accepts connections (the kernel completes them from the listen backlog)
    and never answers: a wedged API server, or a proxy whose far side is gone."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(8)
        yield f"http://127.0.0.1:{held.getsockname()[1]}"


@pytest.mark.parametrize("call", [
    lambda c: kube.status(c), lambda c: kube.set_suspended(c, "cpu-ddp", True),
    lambda c: kube.logs(c, "cpu-ddp"), lambda c: kube.delete(c, "cpu-ddp")])
def test_every_job_command_gives_up_on_an_api_server_that_never_answers(call, silent_endpoint, monkeypatch):
    monkeypatch.setattr(kube, "READ_TIMEOUT_S", 0.2)
    config = Configuration()
    config.host = silent_endpoint
    client = kube.guard(TrainingClient(client_configuration=config, namespace="training"))
    with pytest.raises(OpsError) as err:
        call(client)
    assert str(err.value).startswith(f"cannot reach the Kubernetes API endpoint {silent_endpoint} "
                                     "(no answer within 0.2 s): ")


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


def test_a_credential_command_that_never_answers_is_ended_and_one_line(tmp_path, monkeypatch, capsys):
    """The kubernetes client waits for a kubeconfig's exec command without a bound: a plugin that
    waited on something (a prompt nobody sees, a network that drops packets) hung `ops status`.
    Now it is given CREDENTIAL_TIMEOUT_S, then ended with everything it started."""
    from ops import kube

    monkeypatch.setattr(kube, "CREDENTIAL_TIMEOUT_S", 1.0)
    path, pid = kubeconfig_for(tmp_path, f"https://127.0.0.1:{closed_port()}"), tmp_path / "pid"
    doc = yaml.safe_load(path.read_text())
    doc["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "sh",
                                        "args": ["-c", f"echo $$ > {pid}; exec sleep 600"]}}
    path.write_text(yaml.safe_dump(doc))
    assert cli.main(["status", "--kubeconfig", str(path)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: the kubeconfig's credential command sh did not answer within 1 s: run it alone"), \
        line
    with pytest.raises(ProcessLookupError):  # ended, not left behind
        os.kill(int(pid.read_text()), 0)


# ---- the environment's cluster ----------------------------------------------------------------

DEV_ARN = "arn:aws:eks:us-west-2:111111111111:cluster/dev-training"
PROD_ARN = "arn:aws:eks:us-east-1:222222222222:cluster/prod-training"


@pytest.fixture
def cluster():
    """The recording API server over real HTTP, serving the kinds `start` creates."""
    server = RecordingApiServer(resources={**RESOURCES, "networking.k8s.io/v1": {
        "networkpolicies": ("NetworkPolicy", True)}})
    yield server
    server.close()


def eks_kubeconfig(tmp_path, server, *clusters: str, current: str | None = None):
    """A kubeconfig as `aws eks update-kubeconfig` writes it: cluster, user and context each named
    by the cluster's ARN; every entry reaches `server`."""
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": current or clusters[0],
        "clusters": [{"name": c, "cluster": {"server": server.url}} for c in clusters],
        "users": [{"name": c, "user": {"token": "t"}} for c in clusters],
        "contexts": [{"name": c, "context": {"cluster": c, "user": c}} for c in clusters]}))
    return path


def writes(server) -> list[str]:
    return [f"{r.method} {r.path}" for r in server.requests if r.method != "GET"]


@pytest.mark.parametrize("command", [
    ["start", "cpu-ddp", "--image", IMAGE], ["submit", "--preset", "cpu-ddp", "--image", IMAGE], ["status"],
    ["stop", "cpu-ddp"], ["delete", "cpu-ddp-0"], ["logs", "cpu-ddp-0"]], ids=lambda c: c[0])
def test_a_command_for_one_environment_on_another_environments_cluster_is_refused_before_any_request(
        command, cluster, tmp_path):
    """prod's run, rendered for prod's node groups and image, was created on dev's cluster (whose
    FSx holds dev's checkpoints of the same preset), and stop/delete acted on dev's runs."""
    path = eks_kubeconfig(tmp_path, cluster, DEV_ARN)
    result = run_ops([*command, "--env", "prod", "--kubeconfig", str(path)], isolated_aws_env(tmp_path))
    assert result.returncode == 2 and result.stdout == "", result.stdout
    [line] = result.stderr.splitlines()
    assert line == (f"error: --env prod: the current context '{DEV_ARN}' points at cluster {DEV_ARN}, not prod's "
                    "cluster prod-training (account 222222222222, us-east-1); run `python -m ops kubeconfig "
                    "--env prod` or pass --context of prod's cluster")
    assert cluster.requests == []


@pytest.mark.parametrize("command, env_name, other_arn", [
    (["data", "--source", "c4", "--image", IMAGE, "--no-follow"], "dev", PROD_ARN),
    (["model", "token"], "prod", DEV_ARN),
    (["model", "download", "--repo", "org/model", "--image", IMAGE], "prod", DEV_ARN)],
    ids=["data", "model token", "model download"])
def test_jobs_and_secrets_for_one_environment_are_not_written_to_another_environments_cluster(
        command, env_name, other_arn, cluster, tmp_path):
    """The data Job writes the cluster's FSx, the token Secret and the download Job its models: on
    another environment's cluster they land in that environment's storage."""
    path = eks_kubeconfig(tmp_path, cluster, other_arn)
    result = run_ops([*command, "--env", env_name, "--kubeconfig", str(path)],
                     {**isolated_aws_env(tmp_path), "HF_TOKEN": "hf_" + "x" * 34})
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: --env {env_name}: the current context '{other_arn}' points at cluster {other_arn}")
    assert cluster.requests == []


@pytest.mark.parametrize("other", [
    "arn:aws:eks:us-east-1:333333333333:cluster/prod-training", "arn:aws:eks:us-west-2:222222222222:cluster/prod-training",
    "arn:aws:eks:us-east-1:222222222222:cluster/staging-training"], ids=["account", "region", "name"])
def test_a_cluster_of_another_account_region_or_name_is_another_cluster(other, cluster, tmp_path):
    path = eks_kubeconfig(tmp_path, cluster, PROD_ARN, other, current=PROD_ARN)
    result = run_ops(["start", "cpu-ddp", "--image", IMAGE, "--env", "prod", "--kubeconfig", str(path),
                      "--context", other], isolated_aws_env(tmp_path))
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: --env prod: --context '{other}' points at cluster {other}, not prod's cluster ")
    assert writes(cluster) == []


@pytest.mark.parametrize("current, context", [(DEV_ARN, PROD_ARN), (PROD_ARN, None)], ids=["--context", "current"])
def test_a_context_on_the_environments_own_cluster_creates_the_run(current, context, cluster, tmp_path):
    path = eks_kubeconfig(tmp_path, cluster, DEV_ARN, PROD_ARN, current=current)
    result = run_ops(["start", "cpu-ddp", "--image", IMAGE, "--env", "prod", "--kubeconfig", str(path),
                      *(["--context", context] if context else [])], isolated_aws_env(tmp_path))
    assert "--env prod" not in result.stderr
    assert "POST /apis/kubeflow.org/v1/namespaces/training/pytorchjobs" in writes(cluster)


def test_a_cluster_an_earlier_release_named_is_taken_as_the_environments(cluster, tmp_path):
    """Clusters created before the stack named them <env>-training carry a generated name, which
    ops/kubeconfig.py finds by its stack tag: in the environment's own account and region, a name
    that is not one of ours is not another environment's cluster."""
    legacy = "arn:aws:eks:us-east-1:222222222222:cluster/ClusterEB0386A7-1f2e3d4c5b6a"
    path = eks_kubeconfig(tmp_path, cluster, legacy, current=legacy)
    result = run_ops(["start", "cpu-ddp", "--image", IMAGE, "--env", "prod", "--kubeconfig", str(path)],
                     isolated_aws_env(tmp_path))
    assert "--env prod" not in result.stderr
    assert "POST /apis/kubeflow.org/v1/namespaces/training/pytorchjobs" in writes(cluster)


def test_a_cluster_not_named_by_an_eks_arn_is_taken_as_it_is(cluster, tmp_path):
    """A kind cluster, or an entry renamed by hand: nothing says whose it is."""
    result = run_ops(["start", "cpu-ddp", "--image", IMAGE, "--env", "prod",
                      "--kubeconfig", str(cluster.kubeconfig(tmp_path / "kubeconfig"))], isolated_aws_env(tmp_path))
    assert "--env prod" not in result.stderr
    assert "POST /apis/kubeflow.org/v1/namespaces/training/pytorchjobs" in writes(cluster)


def test_without_env_any_cluster_is_the_one_meant(cluster, tmp_path):
    path = eks_kubeconfig(tmp_path, cluster, DEV_ARN)
    result = run_ops(["status", "--kubeconfig", str(path)], isolated_aws_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert [r.path for r in cluster.requests] == ["/apis/kubeflow.org/v1/namespaces/training/pytorchjobs"]


# ---- an API server that answers badly ---------------------------------------------------------

def answering(*answers: Answer, path: str = JOBS_PATH_LIST):
    """An answer for RecordingApiServer: `answers` in turn to the requests for `path`, then the store."""
    left = list(answers)

    def answer(request):
        return left.pop(0) if request.path == path and left else None
    return answer


def too_many(retry_after: str) -> Answer:
    return Answer(429, status_body(429, "TooManyRequests", "Too many requests, please try again later."),
                  {"Retry-After": retry_after})


def test_a_throttled_read_is_retried_after_the_wait_the_api_server_asks_for(tmp_path):
    """API priority and fairness answers 429 with Retry-After; the wait asked for is honoured."""
    server = RecordingApiServer(answer=answering(too_many("1")))
    try:
        server.add("kubeflow.org/v1", "pytorchjobs", "training", job("cpu-ddp-aaaaaaaa", "Created", "Running"))
        result = run_ops(["status", "--kubeconfig", str(server.kubeconfig(tmp_path / "kubeconfig"))],
                         isolated_aws_env(tmp_path))
    finally:
        server.close()
    assert result.returncode == 0, result.stderr
    assert "cpu-ddp-aaaaaaaa  Running" in result.stdout
    assert [r.path for r in server.requests] == [JOBS_PATH_LIST, JOBS_PATH_LIST, PODS]  # then the running run's pods


@pytest.mark.parametrize("status", [429, 503])
def test_a_wait_past_the_cap_is_not_waited_for_and_is_one_line_saying_when_to_retry(status, tmp_path):
    """urllib3 waits as long as Retry-After says, three times over: `ops status` sat for three hours."""
    answer = Answer(status, status_body(status, "TooManyRequests" if status == 429 else "ServiceUnavailable",
                                        "try again later"), {"Retry-After": "3600"})
    server = RecordingApiServer(answer=answering(answer, answer, answer, answer))
    try:
        result = run_ops(["status", "--kubeconfig", str(server.kubeconfig(tmp_path / "kubeconfig"))],
                         isolated_aws_env(tmp_path), timeout=60)
    finally:
        server.close()
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert f"HTTP {status} try again later" in line and "the API server asks to retry in 3600 s" in line
    assert [r.path for r in server.requests] == [JOBS_PATH_LIST]


def worker_0(run: str, phase: str = "Running") -> dict:
    """Worker 0's pod as the Training Operator labels it, which the SDK finds it by."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{run}-worker-0", "labels": {
        "training.kubeflow.org/job-name": run, "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": "0"}}, "status": {"phase": phase}}


WORKER_0_LOG = "/api/v1/namespaces/training/pods/cpu-ddp-aaaaaaaa-worker-0/log"


@pytest.mark.parametrize("broken, words", [
    (Answer(200, b"epoch 1 loss 0.9\n" + b"x" * 4096, reset_after=17), "the log stream of pod cpu-ddp-aaaaaaaa-worker-0 broke"),
    (Answer(404, status_body(404, "NotFound", 'pods "cpu-ddp-aaaaaaaa-worker-0" not found')),
     'HTTP 404 pods "cpu-ddp-aaaaaaaa-worker-0" not found'),
    (Answer(500, status_body(500, "InternalError", "dial tcp 10.0.1.5:10250: i/o timeout")),
     "HTTP 500 dial tcp 10.0.1.5:10250: i/o timeout")], ids=["reset mid-log", "pod deleted", "kubelet unreachable"])
def test_a_followed_log_that_breaks_or_whose_pod_is_gone_ends_in_one_line(broken, words, tmp_path):
    """The SDK follows each pod in a thread of its own: an error there printed that thread's
    traceback, and `ops logs -f` then waited forever for a line that would never come."""
    server = RecordingApiServer(answer=answering(broken, path=WORKER_0_LOG))
    try:
        server.add("kubeflow.org/v1", "pytorchjobs", "training", job("cpu-ddp-aaaaaaaa", "Created", "Running"))
        server.add("v1", "pods", "training", worker_0("cpu-ddp-aaaaaaaa"))
        result = run_ops(["logs", "-f", "cpu-ddp-aaaaaaaa", "--kubeconfig",
                          str(server.kubeconfig(tmp_path / "kubeconfig"))], isolated_aws_env(tmp_path), timeout=60)
    finally:
        server.close()
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ") and words in line
    if broken.reset_after:  # what came before the break is shown, and following again is the way on
        assert result.stdout == "[cpu-ddp-aaaaaaaa-worker-0] epoch 1 loss 0.9\n"
        assert "`python -m ops logs cpu-ddp-aaaaaaaa -f` follows it again" in line


@pytest.mark.parametrize("gone, words", [
    (Answer(404, status_body(404, "NotFound", 'pods "cpu-ddp-aaaaaaaa-worker-0" not found')),
     'HTTP 404 pods "cpu-ddp-aaaaaaaa-worker-0" not found'),
    (Answer(500, status_body(500, "InternalError", "dial tcp 10.0.1.5:10250: i/o timeout")),
     "HTTP 500 dial tcp 10.0.1.5:10250: i/o timeout")], ids=["pod deleted", "kubelet unreachable"])
def test_a_log_that_cannot_be_read_says_why_in_one_line(gone, words, tmp_path):
    """The SDK raises its own "Failed to read logs for pod ..." inside the handler of the API's
    error, not from it: the line said that much and dropped the reason."""
    server = RecordingApiServer(answer=answering(gone, path=WORKER_0_LOG))
    try:
        server.add("kubeflow.org/v1", "pytorchjobs", "training", job("cpu-ddp-aaaaaaaa", "Created", "Running"))
        server.add("v1", "pods", "training", worker_0("cpu-ddp-aaaaaaaa"))
        result = run_ops(["logs", "cpu-ddp-aaaaaaaa", "--kubeconfig", str(server.kubeconfig(tmp_path / "kubeconfig"))],
                         isolated_aws_env(tmp_path), timeout=60)
    finally:
        server.close()
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("error: Failed to read logs for pod training/cpu-ddp-aaaaaaaa-worker-0") and words in line, line


def test_a_followed_log_that_ends_ends_the_command(tmp_path):
    server = RecordingApiServer(logs="epoch 1 loss 0.9\nepoch 2 loss 0.5")
    try:
        server.add("v1", "pods", "training", worker_0("cpu-ddp-aaaaaaaa"))
        result = run_ops(["logs", "-f", "cpu-ddp-aaaaaaaa", "--kubeconfig",
                          str(server.kubeconfig(tmp_path / "kubeconfig"))], isolated_aws_env(tmp_path), timeout=60)
    finally:
        server.close()
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[cpu-ddp-aaaaaaaa-worker-0] epoch 1 loss 0.9",
                                          "[cpu-ddp-aaaaaaaa-worker-0] epoch 2 loss 0.5"]
    [stream] = [r for r in server.requests if r.path == WORKER_0_LOG]
    assert stream.query["follow"] in ("true", "True") and stream.query["container"] == "pytorch"


def test_a_connection_reset_mid_answer_is_one_line_that_does_not_blame_the_network_path(tmp_path):
    """The endpoint answered and the connection then broke (an API server or load balancer
    restarting): retried as urllib3 retries reads, then one line; not 'cannot reach', whose
    publicCidrs and VPN advice is for an endpoint that never answers."""
    reset = Answer(200, b'{"kind": "PyTorchJobList", "items": [' + b" " * 4096 + b"]}", reset_after=20)
    server = RecordingApiServer(answer=answering(*[reset] * 8))
    try:
        result = run_ops(["status", "--kubeconfig", str(server.kubeconfig(tmp_path / "kubeconfig"))],
                         isolated_aws_env(tmp_path))
    finally:
        server.close()
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: the connection to the Kubernetes API endpoint {server.url} broke mid-answer "
                           "(Connection reset by peer)")
    assert "publicCidrs" not in line and "retry" in line
    assert len(server.requests) == 4  # the first try and urllib3's three retries of a read
