"""`ops validate --drill preemption` judges what the cluster does when a worker of a run goes away.

The drill runs with the real kubectl against a recording API server on loopback (kube_http.py)
that plays the Training Operator one poll of the job's status at a time: it makes the run's two
worker pods, and after the drill deletes one it replaces it (or not) and sets the job's status as
the scenario says. The workers' logs are what trainer/ddp.py printed here for a run of the drill's
length: its first two epochs and a snapshot, its resume from that snapshot to the end, or a fresh
start from epoch 0.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from config.kubernetes import JOBSET_NAME_LABEL, NODEGROUP_LABEL, OPERATOR_JOB_NAME_LABEL, TRAINING_NAMESPACE
from k8s.pods.validation import SMOKE_RUN
from kube_http import RESOURCES, RESOURCES_V2, RecordingApiServer, Request
from ops import envconfig, preemption_drill
from ops.commands import validate as command
from ops.errors import OpsError
from tests.conftest import REPO_ROOT

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="needs a kubectl binary on PATH (the runner installs one)")
JOB_KEY = ("kubeflow.org/v1", "pytorchjobs", TRAINING_NAMESPACE, SMOKE_RUN)
# (the job's key, the key of the object holding the trainer's command where that is not the job)
KEYS = {"v1": (JOB_KEY, None),
        "v2": (("trainer.kubeflow.org/v1alpha1", "trainjobs", TRAINING_NAMESPACE, SMOKE_RUN),
               ("trainer.kubeflow.org/v1alpha1", "trainingruntimes", TRAINING_NAMESPACE, SMOKE_RUN))}
KINDS = {"v1": "PyTorchJob", "v2": "TrainJob"}
SUCCESS = {"v1": "Succeeded", "v2": "Complete"}  # the condition of a finished run
TRAINER_SNAPSHOT = "TRAINER-SNAPSHOT"  # where the trainer wrote here; served as the drill's path


@pytest.fixture(scope="module")
def trainer_logs(tmp_path_factory) -> dict[str, str]:
    """trainer.ddp's own output, with the drill's epoch count: `first` the first two epochs and their
    snapshot, `resumed` the restart from that snapshot to the end, `fresh` a run from epoch 0."""
    tmp = tmp_path_factory.mktemp("ddp")
    snapshot, epochs = tmp / "s.pt", str(preemption_drill.DRILL_EPOCHS)
    script = (
        "import sys\nfrom trainer.ddp import main\n"
        f"for mark, argv in (('first', ['--epochs', '2', '--snapshot-path', {str(snapshot)!r}]),"
        f" ('resumed', ['--epochs', {epochs!r}, '--snapshot-path', {str(snapshot)!r}]),"
        f" ('fresh', ['--epochs', {epochs!r}, '--snapshot-path', {str(tmp / 'other.pt')!r}])):\n"
        "    print('=' + mark, flush=True)\n"
        "    assert main([*argv, '--save-every', '2', '--samples', '128']) == 0\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    logs, mark = {}, None
    for line in done.stdout.replace(str(snapshot), TRAINER_SNAPSHOT).splitlines():
        if line.startswith("="):
            mark = line[1:]
        elif not line.startswith("SUMMARY"):
            logs[mark] = logs.get(mark, "") + line + "\n"
    assert "Epoch 1 | Snapshot saved" in logs["first"] and "Resuming from snapshot" in logs["resumed"]
    return logs


def other_rank(log: str) -> str:
    """What a rank other than 0 prints of rank 0's log: its epoch lines only."""
    return "".join(line.replace("[RANK 0]", "[RANK 2]") + "\n" for line in log.splitlines() if "Batchsize" in line)


class Operator:
    """The cluster as the drill polls it. Each GET of the job is one step: at the first the workers
    have logged epoch 0, from the second (or the first, with `saves_at_once`) worker 0 has logged a
    snapshot. After a pod's deletion, `after_delete` says what happens at the next poll:
    resumes      a replacement pod resumes from the snapshot, then the job Succeeds at the end
    starts-over  a replacement pod starts at epoch 0, then the job Succeeds at the end
    ends-early   the job Succeeds at once, as v1.9.4 marks an elastic job whose survivor exits 0
    restarting   the replacement stays Pending and the job Restarting, forever
    never-saves  (before any deletion) the workers never log a snapshot.
    Under trainingApi v2 (`api="v2"`) it plays Trainer and JobSet instead: the job is a TrainJob whose
    success is its Complete condition, and a deleted pod restarts the JobSet: every pod of the gang is
    replaced by one of a new name, with the next restart attempt and the same completion index."""

    def __init__(self, logs: dict[str, str], after_delete: str, saves_at_once: bool = False, api: str = "v1"):
        self.trainer, self.after_delete, self.saves_at_once, self.api = logs, after_delete, saves_at_once, api
        self.polls, self.deleted, self.replaced_at, self.attempt = 0, None, None, 0
        self.log_of: dict[str, str] = {}  # pod uid -> its log now
        self.job_key, self.runtime_key = KEYS[api]
        self.server = RecordingApiServer(status_for=lambda kind, name: {"conditions": [
            {"type": "Created", "status": "True"}]}, logs=self.pod_log, before=self.step,
            resources=RESOURCES_V2 if api == "v2" else RESOURCES)
        for index in range(2):
            self.server.add("v1", "nodes", "", {"metadata": {"name": f"cpu-{index}", "labels": {NODEGROUP_LABEL: "cpu"}},
                                                "status": {"conditions": [{"type": "Ready", "status": "True"}]}})

    @property
    def run(self) -> dict | None:
        """The object that holds the trainer's command: the PyTorchJob, or the TrainJob's runtime."""
        return self.server.objects.get(self.runtime_key or self.job_key)

    def pod_log(self, pod: dict) -> str:
        snapshot = preemption_drill.flag_value(preemption_drill.worker_container(self.run)["command"],
                                               "--snapshot-path") if self.run else ""
        return self.log_of.get(pod["metadata"].get("uid", ""), "").replace(TRAINER_SNAPSHOT, snapshot)

    def pod_name(self, index: int) -> str:
        """v1: the operator's fixed name; v2: the Job controller's, new on every JobSet attempt."""
        return f"{SMOKE_RUN}-worker-{index}" if self.api == "v1" else f"{SMOKE_RUN}-node-0-{index}-a{self.attempt}x{index}"

    def pod(self, index: int) -> dict:
        if self.api == "v1":
            labels, annotations = {OPERATOR_JOB_NAME_LABEL: SMOKE_RUN, "training.kubeflow.org/replica-index": str(index)}, {}
        else:
            labels = {JOBSET_NAME_LABEL: SMOKE_RUN, "jobset.sigs.k8s.io/restart-attempt": str(self.attempt)}
            annotations = {preemption_drill.COMPLETION_INDEX_ANNOTATION: str(index)}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": self.pod_name(index), "labels": labels,
                                                                "annotations": annotations},
                "spec": {"containers": [{"name": preemption_drill.worker_container(self.run)["name"], "image": "i"}]}}

    def uid(self, index: int) -> str:
        return self.server.objects[("v1", "pods", TRAINING_NAMESPACE, self.pod_name(index))]["metadata"]["uid"]

    def status(self, condition: str | None) -> None:
        conditions = [{"type": condition, "status": "True", "message": f"{KINDS[self.api]} {SMOKE_RUN} is {condition}"}]
        self.server.objects[self.job_key]["status"] = {"conditions": conditions if condition else []}

    def replace_pods(self, victim: int) -> None:
        """The operator recreates the deleted pod under its name; JobSet recreates the whole gang."""
        if self.api == "v1":
            self.server.add("v1", "pods", TRAINING_NAMESPACE, self.pod(victim))
            return
        for index in range(2):
            self.server.objects.pop(("v1", "pods", TRAINING_NAMESPACE, self.pod_name(index)), None)
        self.attempt += 1
        for index in range(2):
            self.server.add("v1", "pods", TRAINING_NAMESPACE, self.pod(index))

    def victim(self) -> int:
        if self.api == "v1":
            return int(self.deleted.rsplit("-", 1)[1])
        return int(self.deleted_pod["metadata"]["annotations"][preemption_drill.COMPLETION_INDEX_ANNOTATION])

    def step(self, request: Request) -> None:
        if request.method == "DELETE" and "/pods/" in request.path:
            self.deleted = request.path.rsplit("/", 1)[1]
            self.deleted_pod = self.server.objects[("v1", "pods", TRAINING_NAMESPACE, self.deleted)]
            return
        if request.method != "GET" or not request.path.endswith(f"/{self.job_key[1]}/{SMOKE_RUN}") or \
                self.job_key not in self.server.objects:
            return
        self.polls += 1
        if self.polls == 1:
            for index in range(2):
                self.server.add("v1", "pods", TRAINING_NAMESPACE, self.pod(index))
            self.status("Running" if self.api == "v1" else None)
        first = self.trainer["first"]
        saved = self.after_delete != "never-saves" and (self.polls >= 2 or self.saves_at_once)
        if self.deleted is None:
            epoch0 = first.splitlines()[0] + "\n"
            self.log_of[self.uid(0)] = first if saved else epoch0
            self.log_of[self.uid(1)] = other_rank(first if saved else epoch0)
        elif self.replaced_at is None:
            self.replaced_at = self.polls
            if self.after_delete == "ends-early":
                self.status(SUCCESS[self.api])
                return
            self.replace_pods(self.victim())
            self.status("Restarting" if self.api == "v1" else None)
        elif self.after_delete in ("resumes", "starts-over"):
            log = self.trainer["resumed" if self.after_delete == "resumes" else "fresh"]
            victim = self.victim()
            self.log_of[self.uid(victim)] = log
            self.log_of[self.uid(1 - victim)] = other_rank(log)
            self.status(SUCCESS[self.api])


def _dist(folder, training_api: str):
    from k8s.pods.validation import validation_objects

    (folder / "validation").mkdir()
    (folder / "validation" / "cluster-validation.yaml").write_text(yaml.safe_dump_all(
        validation_objects(dataclasses.replace(envconfig.load("dev"), training_api=training_api))))
    return folder


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    return _dist(tmp_path_factory.mktemp("dist"), "v1")


@pytest.fixture(scope="module")
def v2_dist(tmp_path_factory):
    return _dist(tmp_path_factory.mktemp("dist-v2"), "v2")


@pytest.fixture
def drill(tmp_path, monkeypatch, dist, v2_dist, trainer_logs, capsys):
    """drill(after_delete, timeout=60, api="v1"): the drill's exit status, its output and the cluster
    it ran on."""
    monkeypatch.setattr(preemption_drill, "POLL_SECONDS", 0.05)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TRAINER_IMAGE_CPU", "registry/trainer:cpu-1")
    started = []

    def run(after_delete: str, timeout: float = 60, api: str = "v1"):
        operator = Operator(trainer_logs, after_delete, api=api)
        started.append(operator)
        monkeypatch.setenv("KUBECONFIG", str(operator.server.kubeconfig(tmp_path / "kubeconfig")))
        status = command.run(command.Options(dist=v2_dist if api == "v2" else dist, timeout=timeout,
                                             drill="preemption"))
        return status, capsys.readouterr().out, operator
    yield run
    for operator in started:
        operator.server.close()


def rows(out: str) -> dict[str, tuple[str, str]]:
    """The report's rows: name -> (STATUS, reason)."""
    found = {}
    for name in (preemption_drill.SNAPSHOT, preemption_drill.NOT_EARLY, preemption_drill.RESUMED_ROW,
                 preemption_drill.SUCCEEDED):
        [line] = [l for l in out.splitlines() if l.startswith(name + " ")]
        status, _, reason = line[len(name):].strip().partition(" ")
        found[name] = (status, reason.strip())
    return found


def test_a_cluster_that_replaces_the_worker_and_resumes_passes_every_row(drill):
    status, out, operator = drill("resumes")
    assert status == 0, out
    assert all(s == "PASS" for s, _ in rows(out).values()), out
    assert out.strip().splitlines()[-1] == "4 passed, 0 warned, 0 failed"
    [job] = [o for k, o in operator.server.objects.items() if k == JOB_KEY]
    container = preemption_drill.worker_container(job)
    snapshot = preemption_drill.flag_value(container["command"], "--snapshot-path")
    # The smoke run, made long enough to preempt, with a snapshot and a rendezvous of its own.
    assert container["image"] == "registry/trainer:cpu-1"
    assert preemption_drill.flag_value(container["command"], "--epochs") == str(preemption_drill.DRILL_EPOCHS)
    assert preemption_drill.flag_value(container["command"], "--samples") == str(preemption_drill.DRILL_SAMPLES)
    assert snapshot.startswith("/fsx/checkpoints/.validation/cpu-ddp/drill-") and snapshot.endswith("/snapshot.pt")
    assert job["spec"]["elasticPolicy"]["rdzvId"].startswith(f"{SMOKE_RUN}-drill-")
    # The pod that saved the snapshot is the one deleted, once, after the snapshot was seen.
    deletes = [r.path for r in operator.server.requests if r.method == "DELETE" and "/pods/" in r.path]
    assert deletes == [f"/api/v1/namespaces/{TRAINING_NAMESPACE}/pods/{SMOKE_RUN}-worker-0"]
    assert rows(out)[preemption_drill.RESUMED_ROW][1] == (
        f"the replacement {SMOKE_RUN}-worker-0 started at epoch 2, at or after the snapshot's 2 "
        f"('Resuming from snapshot {snapshot} at epoch 2')")


def test_a_job_that_ends_succeeded_after_the_deletion_before_the_final_epoch_fails_naming_it(drill):
    status, out, _ = drill("ends-early")
    assert status == 1, out
    found = rows(out)
    assert found[preemption_drill.NOT_EARLY] == ("FAIL", (
        f"PyTorchJob {SMOKE_RUN} Succeeded after the deletion, but no worker had logged its final epoch "
        f"{preemption_drill.DRILL_EPOCHS - 1} (last logged: 1): a preempted run reported as finished"))
    assert found[preemption_drill.RESUMED_ROW] == ("FAIL", f"no replacement for the deleted pod {SMOKE_RUN}-worker-0 "
                                                           "appeared")
    assert found[preemption_drill.SUCCEEDED][0] == "PASS"  # Succeeded, which is the fault the row above names


def test_a_replacement_that_starts_over_at_epoch_0_fails_naming_it(drill):
    status, out, _ = drill("starts-over")
    assert status == 1, out
    assert rows(out)[preemption_drill.RESUMED_ROW] == ("FAIL", (
        f"the replacement {SMOKE_RUN}-worker-0 started over at epoch 0, but the snapshot held 2 epoch(s): "
        "work was lost"))
    assert rows(out)[preemption_drill.NOT_EARLY][0] == "PASS"


def test_no_snapshot_before_the_timeout_fails_every_row_without_deleting_a_pod(drill):
    status, out, operator = drill("never-saves", timeout=1.5)
    assert status == 1, out
    found = rows(out)
    assert found[preemption_drill.SNAPSHOT][0] == "FAIL" and "within 1.5 s (timed out)" in \
        found[preemption_drill.SNAPSHOT][1]
    assert {found[n] for n in found if n != preemption_drill.SNAPSHOT} == {
        ("FAIL", "not checked: no worker was preempted")}
    assert not [r for r in operator.server.requests if r.method == "DELETE" and "/pods/" in r.path]


def test_a_job_that_never_ends_after_the_deletion_fails_once_the_timeout_is_up(tmp_path, dist, trainer_logs):
    """The command as a user runs it, with its own poll interval: it ends at --timeout, exit 1."""
    operator = Operator(trainer_logs, "restarting", saves_at_once=True)
    try:
        env = {**os.environ, "KUBECONFIG": str(operator.server.kubeconfig(tmp_path / "kubeconfig")),
               "HOME": str(tmp_path), "TRAINER_IMAGE_CPU": "registry/trainer:cpu-1"}
        done = subprocess.run([sys.executable, "-m", "ops", "validate", "--dist", str(dist), "--drill", "preemption",
                               "--timeout", "3"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    finally:
        operator.server.close()
    assert done.returncode == 1, done.stdout + done.stderr
    found = rows(done.stdout)
    assert found[preemption_drill.SNAPSHOT][0] == "PASS"
    assert found[preemption_drill.SUCCEEDED] == ("FAIL", f"PyTorchJob {SMOKE_RUN} had not ended 3 s after the drill "
                                                         "began (timed out)")
    assert found[preemption_drill.RESUMED_ROW] == ("FAIL", f"the replacement {SMOKE_RUN}-worker-0 logged no epoch")
    assert found[preemption_drill.NOT_EARLY][0] == "WARN"


def test_an_unreachable_cluster_is_one_line_and_exit_2(tmp_path, dist):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "gone",
        "clusters": [{"name": "gone", "cluster": {"server": "http://127.0.0.1:1"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path), "TRAINER_IMAGE_CPU": "img:1"}
    done = subprocess.run([sys.executable, "-m", "ops", "validate", "--dist", str(dist), "--drill", "preemption",
                           "--timeout", "30"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: kubectl get nodes") and "127.0.0.1:1" in line


def test_a_dist_without_the_smoke_run_is_one_line_and_exit_2(tmp_path):
    from k8s.pods.validation import validation_objects

    (tmp_path / "validation").mkdir()
    objects = [o for o in validation_objects(envconfig.load("dev")) if o["kind"] != "PyTorchJob"]
    (tmp_path / "validation" / "cluster-validation.yaml").write_text(yaml.safe_dump_all(objects))
    with pytest.raises(OpsError, match=f"--drill preemption: .* holds no smoke run \\(PyTorchJob or TrainJob {SMOKE_RUN}\\)"):
        command.run(command.Options(dist=tmp_path, timeout=30, drill="preemption"))


def test_the_smoke_run_without_its_nodes_is_refused_naming_the_group(tmp_path, monkeypatch, dist):
    server = RecordingApiServer()
    try:
        monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig(tmp_path / "kubeconfig")))
        monkeypatch.setenv("HOME", str(tmp_path))
        with pytest.raises(OpsError, match="cannot run the smoke run: .*node group cpu has 0 Ready node"):
            command.run(command.Options(dist=dist, timeout=30, drill="preemption"))
    finally:
        server.close()
    assert not [r for r in server.requests if r.method in ("POST", "DELETE")]


def test_flags_are_replaced_in_place_or_appended():
    assert preemption_drill.with_flags(["torchrun", "-m", "x", "--epochs", "20"], {"--epochs": "30", "--samples": "9"}) \
        == ["torchrun", "-m", "x", "--epochs", "30", "--samples", "9"]


# --- trainingApi v2: a TrainJob, whose JobSet restarts the whole gang -----------------------------

def test_under_v2_a_jobset_restart_that_resumes_passes_every_row(drill):
    from config.kubernetes import RUN_ID_ENV

    status, out, operator = drill("resumes", api="v2")
    assert status == 0, out
    assert all(s == "PASS" for s, _ in rows(out).values()), out
    assert "preemption drill on TrainJob validation-cpu-ddp" in out
    requests = operator.server.requests
    creates = [r.path.rsplit("/", 1)[1] for r in requests if r.method == "POST"]
    assert creates == ["trainingruntimes", "trainjobs"], "Trainer's webhook needs the runtime first"
    assert not [r for r in requests if "pytorchjobs" in r.path], "a v2 cluster has no PyTorchJob kind"
    runtime = operator.run
    container = preemption_drill.worker_container(runtime)
    snapshot = preemption_drill.flag_value(container["command"], "--snapshot-path")
    assert container["image"] == "registry/trainer:cpu-1"
    assert preemption_drill.flag_value(container["command"], "--epochs") == str(preemption_drill.DRILL_EPOCHS)
    assert snapshot.startswith("/fsx/checkpoints/.validation/cpu-ddp/drill-") and snapshot.endswith("/snapshot.pt")
    # Every attempt of the gang keeps the drill's own run id, under which the rendezvous is fresh.
    [run_id] = [e["value"] for e in container["env"] if e["name"] == RUN_ID_ENV]
    assert run_id.startswith(f"{SMOKE_RUN}-drill-")
    deletes = [r.path.rsplit("/", 1)[1] for r in requests if r.method == "DELETE" and "/pods/" in r.path]
    assert deletes == [f"{SMOKE_RUN}-node-0-0-a0x0"]
    assert rows(out)[preemption_drill.RESUMED_ROW][1] == (
        f"the replacement {SMOKE_RUN}-node-0-0-a1x0 started at epoch 2, at or after the snapshot's 2 "
        f"('Resuming from snapshot {snapshot} at epoch 2')")
    assert rows(out)[preemption_drill.SUCCEEDED][1] == f"TrainJob {SMOKE_RUN} Complete"


def test_under_v2_a_trainjob_complete_before_the_final_epoch_fails_naming_it(drill):
    status, out, _ = drill("ends-early", api="v2")
    assert status == 1, out
    assert rows(out)[preemption_drill.NOT_EARLY] == ("FAIL", (
        f"TrainJob {SMOKE_RUN} Complete after the deletion, but no worker had logged its final epoch "
        f"{preemption_drill.DRILL_EPOCHS - 1} (last logged: 1): a preempted run reported as finished"))
    assert rows(out)[preemption_drill.RESUMED_ROW] == (
        "FAIL", f"no replacement for the deleted pod {SMOKE_RUN}-node-0-0-a0x0 appeared")


def test_under_v2_a_restarted_gang_that_starts_over_fails_naming_the_new_pod(drill):
    status, out, _ = drill("starts-over", api="v2")
    assert status == 1, out
    assert rows(out)[preemption_drill.RESUMED_ROW] == ("FAIL", (
        f"the replacement {SMOKE_RUN}-node-0-0-a1x0 started over at epoch 0, but the snapshot held 2 epoch(s): "
        "work was lost"))
