"""`ops validate --drill preemption` judges what the cluster does when a worker of a run goes away.

The drill runs with the real kubectl against a recording API server on loopback (kube_http.py)
that plays the Training Operator one poll of the job's status at a time: it makes the run's two
worker pods, and after the drill deletes one it replaces it (or not) and sets the job's status as
the scenario says. The workers' logs are what trainer/ddp.py printed here for a run of the drill's
length: its first two epochs and a snapshot, its resume from that snapshot to the end, or a fresh
start from epoch 0.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from config.kubernetes import NODEGROUP_LABEL, OPERATOR_JOB_NAME_LABEL, TRAINING_NAMESPACE
from k8s.pods.validation import SMOKE_RUN
from kube_http import RecordingApiServer, Request
from ops import envconfig, preemption_drill
from ops.commands import validate as command
from ops.errors import OpsError
from tests.conftest import REPO_ROOT

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="needs a kubectl binary on PATH (the runner installs one)")
JOB_KEY = ("kubeflow.org/v1", "pytorchjobs", TRAINING_NAMESPACE, SMOKE_RUN)
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
    never-saves  (before any deletion) the workers never log a snapshot."""

    def __init__(self, logs: dict[str, str], after_delete: str, saves_at_once: bool = False):
        self.trainer, self.after_delete, self.saves_at_once = logs, after_delete, saves_at_once
        self.polls, self.deleted, self.replaced_at = 0, None, None
        self.log_of: dict[str, str] = {}  # pod uid -> its log now
        self.server = RecordingApiServer(status_for=lambda kind, name: {"conditions": [
            {"type": "Created", "status": "True"}]}, logs=self.pod_log, before=self.step)
        for index in range(2):
            self.server.add("v1", "nodes", "", {"metadata": {"name": f"cpu-{index}", "labels": {NODEGROUP_LABEL: "cpu"}},
                                                "status": {"conditions": [{"type": "Ready", "status": "True"}]}})

    def pod_log(self, pod: dict) -> str:
        job = self.server.objects.get(JOB_KEY)
        snapshot = preemption_drill.flag_value(preemption_drill.worker_container(job)["command"], "--snapshot-path") \
            if job else ""
        return self.log_of.get(pod["metadata"].get("uid", ""), "").replace(TRAINER_SNAPSHOT, snapshot)

    def pod(self, index: int) -> dict:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{SMOKE_RUN}-worker-{index}", "labels": {
            OPERATOR_JOB_NAME_LABEL: SMOKE_RUN, "training.kubeflow.org/replica-index": str(index)}},
            "spec": {"containers": [{"name": "pytorch", "image": "i"}]}}

    def uid(self, index: int) -> str:
        return self.server.objects[("v1", "pods", TRAINING_NAMESPACE, f"{SMOKE_RUN}-worker-{index}")]["metadata"]["uid"]

    def status(self, condition: str) -> None:
        self.server.objects[JOB_KEY]["status"] = {"conditions": [{"type": condition, "status": "True",
                                                                  "message": f"PyTorchJob {SMOKE_RUN} is {condition}"}]}

    def step(self, request: Request) -> None:
        if request.method == "DELETE" and "/pods/" in request.path:
            self.deleted = request.path.rsplit("/", 1)[1]
            return
        if request.method != "GET" or not request.path.endswith(f"/pytorchjobs/{SMOKE_RUN}") or JOB_KEY not in \
                self.server.objects:
            return
        self.polls += 1
        if self.polls == 1:
            for index in range(2):
                self.server.add("v1", "pods", TRAINING_NAMESPACE, self.pod(index))
            self.status("Running")
        first = self.trainer["first"]
        saved = self.after_delete != "never-saves" and (self.polls >= 2 or self.saves_at_once)
        if self.deleted is None:
            epoch0 = first.splitlines()[0] + "\n"
            self.log_of[self.uid(0)] = first if saved else epoch0
            self.log_of[self.uid(1)] = other_rank(first if saved else epoch0)
        elif self.replaced_at is None:
            self.replaced_at = self.polls
            if self.after_delete == "ends-early":
                self.status("Succeeded")
                return
            self.server.add("v1", "pods", TRAINING_NAMESPACE, self.pod(int(self.deleted.rsplit("-", 1)[1])))
            self.status("Restarting")
        elif self.after_delete in ("resumes", "starts-over"):
            log = self.trainer["resumed" if self.after_delete == "resumes" else "fresh"]
            victim = int(self.deleted.rsplit("-", 1)[1])
            self.log_of[self.uid(victim)] = log
            self.log_of[self.uid(1 - victim)] = other_rank(log)
            self.status("Succeeded")


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    from k8s.pods.validation import validation_objects

    folder = tmp_path_factory.mktemp("dist")
    (folder / "validation").mkdir()
    (folder / "validation" / "cluster-validation.yaml").write_text(
        yaml.safe_dump_all(validation_objects(envconfig.load("dev"))))
    return folder


@pytest.fixture
def drill(tmp_path, monkeypatch, dist, trainer_logs, capsys):
    """drill(after_delete, timeout=60): the drill's exit status, its output and the cluster it ran on."""
    monkeypatch.setattr(preemption_drill, "POLL_SECONDS", 0.05)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TRAINER_IMAGE_CPU", "registry/trainer:cpu-1")
    started = []

    def run(after_delete: str, timeout: float = 60):
        operator = Operator(trainer_logs, after_delete)
        started.append(operator)
        monkeypatch.setenv("KUBECONFIG", str(operator.server.kubeconfig(tmp_path / "kubeconfig")))
        status = command.run(command.Options(dist=dist, timeout=timeout, drill="preemption"))
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
