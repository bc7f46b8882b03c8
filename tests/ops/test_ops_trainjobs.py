"""Runs under trainingApi v2 (ops/trainjobs.py through ops/runs.py and the run verbs): TrainJobs with
their own TrainingRuntime and peers NetworkPolicy, with and without Kueue, through the real kubernetes
client against the recording fake API server (kube_fakes.py), which here keeps the objects it is sent.

Upstream facts: Trainer v2.3.0's TrainJob condition types (Suspended, Complete, Failed) and its
mutable `spec.suspend` (../shared/contracts/kubeflow-trainer-v2.3.0/
source-pkg-apis-trainer-v1alpha1-trainjob_types.go); Kueue v0.19.2's Workload `spec.active` (its
CRD in ../shared/contracts/kueue-v0.19.2) and its visibility API's pending workloads
(kubernetes-sigs/kueue v0.19.2 apis/visibility/v1beta2/types.go: positions count from 0).
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import yaml

from ops import cli, envconfig, kube
from kube_fakes import POLICIES_PATH as POLICIES
from kube_fakes import Call, FakeApiServer, Reset, api_client_on, training_client_on, worker_status

TRAINER = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/training"
TRAINJOBS, RUNTIMES = f"{TRAINER}/trainjobs", f"{TRAINER}/trainingruntimes"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/training/jobsets"
WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/namespaces/training/workloads"
PODS = "/api/v1/namespaces/training/pods"
PENDING = "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/training/localqueues/default/pendingworkloads"
COLLECTIONS = (TRAINJOBS, RUNTIMES, JOBSETS, WORKLOADS, POLICIES, PODS)
IMAGE = "registry/trainer:2"


def merge(into: dict, patch: dict) -> dict:
    """RFC 7386 merge patch."""
    for key, value in patch.items():
        if value is None:
            into.pop(key, None)
        elif isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)
    return into


class Cluster:
    """What the fake API server holds: objects per collection path, created, read, merge-patched and
    deleted as the API server would; `fail[(method, path)] = status` makes one call fail."""

    def __init__(self, server: FakeApiServer):
        self.server, self.objects = server, {c: {} for c in COLLECTIONS}
        self.fail: dict[tuple[str, str], int] = {}
        server.answer(self.answer)

    def put(self, collection: str, obj: dict) -> dict:
        obj = copy.deepcopy(obj)
        obj["metadata"].setdefault("uid", f"uid-{obj['metadata']['name']}")
        self.objects[collection][obj["metadata"]["name"]] = obj
        return obj

    def answer(self, call: Call):
        if (call.method, call.path) in self.fail:
            status = self.fail[(call.method, call.path)]
            return status, {"kind": "Status", "code": status, "message": f"{call.method} refused"}
        collection, _, name = call.path.rpartition("/")
        if call.path in self.objects:
            collection, name = call.path, ""
        if collection not in self.objects:
            return None
        store = self.objects[collection]
        if call.method == "POST" and not name:
            if call.body["metadata"]["name"] in store:
                return 409, {"kind": "Status", "code": 409, "reason": "AlreadyExists", "message": "already exists"}
            return 201, self.put(collection, call.body)
        if call.method == "GET" and not name:
            selector = call.query.get("labelSelector")
            items = list(store.values())
            if selector:  # key=value, or key alone: the label is there
                key, equals, value = selector.partition("=")
                labels = [i["metadata"].get("labels") or {} for i in items]
                items = [i for i, ls in zip(items, labels) if (ls.get(key) == value if equals else key in ls)]
            return 200, {"kind": "List", "items": items}
        if name not in store:
            return 404, {"kind": "Status", "code": 404, "reason": "NotFound", "message": f"{name} not found"}
        if call.method == "GET":
            return 200, store[name]
        if call.method == "PATCH":
            return 200, merge(store[name], call.body)
        if call.method == "DELETE":
            return 200, store.pop(name)
        return None

    def writes(self) -> list[tuple[str, str]]:
        return [(c.method, c.path) for c in self.server.calls if c.method in ("POST", "PATCH", "DELETE")]


@pytest.fixture(scope="module")
def dev():
    return dataclasses.replace(envconfig.load("dev"), training_api="v2")


@pytest.fixture
def cluster(monkeypatch, dev):
    """The fake cluster; `python -m ops` in this process reaches it, and `--env dev` is dev under
    trainingApi v2 (cluster.queue_with_kueue() makes it queue with Kueue)."""
    server = FakeApiServer()
    state = Cluster(server)
    monkeypatch.setattr(kube, "training_client", lambda *args, **kwargs: training_client_on(server))
    monkeypatch.setattr(kube, "api_client", lambda *args, **kwargs: api_client_on(server))
    env = {"current": dev}
    monkeypatch.setattr(envconfig, "load", lambda *args, **kwargs: env["current"])
    state.queue_with_kueue = lambda: env.update(current=dataclasses.replace(dev, queueing="kueue"))
    return state


def ops(*args: str) -> int:
    return cli.main([*args, "--env", "dev"])


def submit(*args: str) -> int:
    return ops("submit", "--preset", "cpu-ddp", "--image", IMAGE, *args)


def trainjob(name: str, *conditions: str, suspend: bool | None = False, preset: str = "cpu-ddp",
             active: int = 0, queue: bool = False) -> dict:
    labels = {"eks-distributed-training.io/preset": preset, **({"kueue.x-k8s.io/queue-name": "default"} if queue else {})}
    spec = {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": name},
            "trainer": {"numNodes": 2, "numProcPerNode": 2}, **({} if suspend is None else {"suspend": suspend})}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": "training", "labels": labels,
                         "creationTimestamp": "2026-11-26T10:00:00Z"},
            "spec": spec,
            "status": {"conditions": [{"type": t, "status": "True", "reason": t, "message": f"{name} is {t.lower()}"}
                                      for t in conditions],
                       "jobsStatus": [{"name": "node", "active": active, "ready": 0, "succeeded": 0, "failed": 0,
                                       "suspended": 0}]}}


def workload(run: str, *, active: bool = True, admitted: bool = False) -> dict:
    conditions = [{"type": "Admitted", "status": "True", "reason": "Admitted", "message": "admitted"}] if admitted else []
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": f"trainjob-{run}-1a2b3", "namespace": "training",
                         "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                                              "name": run, "uid": f"uid-{run}", "controller": True}]},
            "spec": {"active": active, "queueName": "default"}, "status": {"conditions": conditions}}


def the_run(cluster: Cluster) -> str:
    [name] = cluster.objects[TRAINJOBS]
    return name


# --- submit / start: create order, Kueue, half failures ---------------------------------------------

def test_dry_run_prints_the_peers_policy_then_the_runtime_then_the_trainjob(tmp_path):
    """As a user runs it: a context file with trainingApi v2, in a process of its own."""
    from ops_fakes import isolated_aws_env, run_ops, write_context

    context = write_context(tmp_path, "dev", trainingApi="v2")
    result = run_ops(["submit", "--env", "dev", "--context-file", str(context), "--image", IMAGE, "--dry-run",
                      "--preset", "cpu-ddp"], isolated_aws_env(tmp_path))
    assert result.returncode == 0, result.stderr
    policy, runtime, job = yaml.safe_load_all(result.stdout)
    assert [policy["kind"], runtime["kind"], job["kind"]] == ["NetworkPolicy", "TrainingRuntime", "TrainJob"]
    name = job["metadata"]["name"]
    assert runtime["metadata"]["name"] == name and policy["metadata"]["name"] == f"{name}-peers"
    assert policy["spec"]["podSelector"] == {"matchLabels": {"jobset.sigs.k8s.io/jobset-name": name}}


def test_submit_creates_the_policy_then_the_runtime_then_the_trainjob_which_then_owns_both(cluster, capsys):
    assert submit() == 0
    name = the_run(cluster)
    assert cluster.writes() == [("POST", POLICIES), ("POST", RUNTIMES), ("POST", TRAINJOBS),
                                ("PATCH", f"{RUNTIMES}/{name}"), ("PATCH", f"{POLICIES}/{name}-peers")]
    owner = [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": name, "uid": f"uid-{name}"}]
    assert cluster.objects[RUNTIMES][name]["metadata"]["ownerReferences"] == owner
    assert cluster.objects[POLICIES][f"{name}-peers"]["metadata"]["ownerReferences"] == owner
    created = cluster.objects[TRAINJOBS][name]
    assert created["spec"]["suspend"] is False and "kueue.x-k8s.io/queue-name" not in created["metadata"]["labels"]
    assert capsys.readouterr().out == (f"created TrainJob training/{name} (image {IMAGE}); "
                                       "it checkpoints to /fsx/checkpoints/cpu-ddp\n")


def test_under_kueue_the_trainjob_names_the_local_queue_and_leaves_suspend_to_kueue(cluster):
    cluster.queue_with_kueue()
    assert submit() == 0
    created = cluster.objects[TRAINJOBS][the_run(cluster)]
    assert created["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    assert "suspend" not in created["spec"]


def test_a_create_that_fails_halfway_deletes_what_it_created_and_says_so_in_one_line(cluster, capsys):
    cluster.fail[("POST", TRAINJOBS)] = 422
    assert submit() == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "creating TrainJob training/cpu-ddp-" in line and "HTTP 422 POST refused" in line
    assert line.endswith("deleted what this call had created")
    assert [w[0] for w in cluster.writes()] == ["POST", "POST", "POST", "DELETE", "DELETE"]
    assert cluster.writes()[3][1].startswith(RUNTIMES + "/") and cluster.writes()[4][1].startswith(POLICIES + "/")
    assert not cluster.objects[RUNTIMES] and not cluster.objects[POLICIES]


def test_what_a_failed_create_cannot_delete_is_named_with_the_command_that_removes_it(cluster, capsys, dev):
    from ops import runs

    name = runs.run_manifest(dev, "cpu-ddp", name=None, image=IMAGE, overrides=None).name
    cluster.fail[("POST", TRAINJOBS)] = 500
    cluster.fail[("DELETE", f"{RUNTIMES}/{name}")] = 500
    assert submit() == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.endswith(f"left behind: TrainingRuntime training/{name}: remove with "
                         f"`kubectl delete trainingruntime {name} -n training`")
    assert list(cluster.objects[RUNTIMES]) == [name] and not cluster.objects[POLICIES]


def test_a_run_whose_owner_cannot_be_set_stays_and_the_line_says_how_to_remove_it(cluster, capsys, dev):
    from ops import runs

    name = runs.run_manifest(dev, "cpu-ddp", name=None, image=IMAGE, overrides=None).name
    cluster.fail[("PATCH", f"{RUNTIMES}/{name}")] = 500
    assert submit() == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: created TrainJob training/{name}, but could not make it the owner")
    assert line.endswith(f"the run goes on; `python -m ops delete {name} --env ENV` removes all three")
    assert [list(cluster.objects[c]) for c in (TRAINJOBS, RUNTIMES)] == [[name], [name]]


def test_submitting_a_run_that_exists_deletes_nothing_it_did_not_create(cluster, capsys):
    assert submit() == 0
    before = copy.deepcopy(cluster.objects)
    cluster.server.calls.clear()
    assert submit() == 2
    assert "a run of this name (this spec) exists" in capsys.readouterr().err
    assert cluster.writes() == [("POST", POLICIES), ("POST", RUNTIMES)]  # the policy was there: not ours
    assert cluster.objects == before


def test_start_refuses_while_another_run_of_the_preset_is_active(cluster, capsys):
    cluster.put(TRAINJOBS, trainjob("cpu-ddp-0ld0ld00", active=2))
    cluster.put(RUNTIMES, {"metadata": {"name": "cpu-ddp-0ld0ld00"}, "spec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [
            {"name": "node", "image": "registry/trainer:1"}]}}}}}]}}}})
    assert ops("start", "cpu-ddp", "--image", IMAGE) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "already runs as TrainJob training/cpu-ddp-0ld0ld00 (Running, image registry/trainer:1)" in line
    assert "`python -m ops stop cpu-ddp-0ld0ld00 --env ENV`" in line
    assert not cluster.writes()


def test_start_refuses_to_resume_a_suspended_run_while_another_run_of_the_preset_is_active(cluster, capsys):
    assert submit() == 0
    name = the_run(cluster)
    assert ops("stop", name) == 0
    cluster.put(TRAINJOBS, trainjob("cpu-ddp-n3wn3w00", active=2))
    capsys.readouterr()
    cluster.server.calls.clear()
    assert ops("start", "cpu-ddp", "--image", IMAGE) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "already runs as TrainJob training/cpu-ddp-n3wn3w00 (Running" in line
    assert "`python -m ops stop cpu-ddp-n3wn3w00 --env ENV`" in line
    assert not cluster.writes() and cluster.objects[TRAINJOBS][name]["spec"]["suspend"] is True


# --- stop and start ---------------------------------------------------------------------------------

def test_stop_suspends_the_trainjob_and_start_resumes_it_by_merge_patches_of_spec_suspend(cluster, capsys, dev):
    assert submit() == 0
    name = the_run(cluster)
    cluster.server.calls.clear()
    assert ops("stop", name) == 0
    [patch] = [c for c in cluster.server.calls if c.method == "PATCH"]
    assert (patch.path, patch.body) == (f"{TRAINJOBS}/{name}", {"spec": {"suspend": True}})
    assert patch.headers["Content-Type"] == "application/merge-patch+json"
    assert ops("start", "cpu-ddp", "--image", IMAGE) == 0
    assert cluster.objects[TRAINJOBS][name]["spec"]["suspend"] is False
    assert capsys.readouterr().out.splitlines()[-2:] == [f"TrainJob training/{name} suspended: its pods stop",
                                                         f"TrainJob training/{name} resumed: its pods start"]


def test_stop_of_a_preset_a_second_time_succeeds_so_stop_then_start_can_be_scripted(cluster, capsys):
    assert submit() == 0
    name = the_run(cluster)
    assert ops("stop", "cpu-ddp") == 0 and ops("stop", "cpu-ddp") == 0 and ops("start", "cpu-ddp", "--image", IMAGE) == 0
    assert capsys.readouterr().out.splitlines()[-3:] == [
        f"TrainJob training/{name} suspended: its pods stop", "nothing of preset cpu-ddp is running in training: "
        "nothing to stop", f"TrainJob training/{name} resumed: its pods start"]


def test_start_refuses_while_the_pods_of_a_stopped_run_still_save_and_names_them(cluster, capsys):
    """The old pods save on SIGTERM and renew the checkpoint folder's lease meanwhile, longer than the
    new run's rank 0 waits for it (trainer/lease.py WAIT_S)."""
    cluster.put(TRAINJOBS, trainjob("cpu-ddp-0ld0ld00", suspend=True))
    cluster.put(PODS, {"metadata": {"name": "cpu-ddp-0ld0ld00-node-0-0-abcde", "deletionTimestamp": "2026-11-26T10:05:00Z",
                                    "labels": {"eks-distributed-training.io/job": "cpu-ddp-0ld0ld00",
                                               "eks-distributed-training.io/preset": "cpu-ddp"}},
                       "status": {"phase": "Running"}})
    assert ops("start", "cpu-ddp", "--image", IMAGE) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert ("the pods of a stopped run of preset cpu-ddp are still stopping (cpu-ddp-0ld0ld00-node-0-0-abcde)"
            in line), line
    assert not cluster.writes()
    del cluster.objects[PODS]["cpu-ddp-0ld0ld00-node-0-0-abcde"]
    assert ops("start", "cpu-ddp", "--image", IMAGE) == 0
    assert len(cluster.objects[TRAINJOBS]) == 2


def test_under_kueue_stop_deactivates_the_workload_and_never_touches_spec_suspend(cluster, capsys):
    """Kueue unsuspends a suspended job whose Workload is admitted: stop goes through the Workload."""
    cluster.queue_with_kueue()
    cluster.put(TRAINJOBS, trainjob("cpu-ddp-a", suspend=False, active=2, queue=True))
    cluster.put(WORKLOADS, workload("cpu-ddp-a", admitted=True))
    assert ops("stop", "cpu-ddp") == 0  # by preset: every active run
    patches = [c for c in cluster.server.calls if c.method == "PATCH"]
    assert [(p.path, p.body) for p in patches] == [(f"{WORKLOADS}/trainjob-cpu-ddp-a-1a2b3",
                                                    {"spec": {"active": False}})]
    assert cluster.objects[TRAINJOBS]["cpu-ddp-a"]["spec"]["suspend"] is False
    assert capsys.readouterr().out == ("TrainJob training/cpu-ddp-a stopped: Kueue evicts its Workload "
                                       "trainjob-cpu-ddp-a-1a2b3, and its pods stop\n")


def test_stop_of_a_preset_says_which_runs_it_stopped_when_another_cannot_be(cluster, capsys):
    """A run already stopped is never silent: the error line names it beside the one that failed."""
    cluster.queue_with_kueue()
    cluster.put(TRAINJOBS, trainjob("cpu-ddp-a", suspend=False, active=2, queue=True))
    cluster.put(WORKLOADS, workload("cpu-ddp-a", admitted=True))
    late = trainjob("cpu-ddp-b", suspend=False, queue=True)
    late["metadata"]["creationTimestamp"] = "2026-11-26T11:00:00Z"
    cluster.put(TRAINJOBS, late)  # Kueue has not made its Workload yet
    assert ops("stop", "cpu-ddp") == 2
    out = capsys.readouterr()
    assert cluster.objects[WORKLOADS]["trainjob-cpu-ddp-a-1a2b3"]["spec"]["active"] is False
    [line] = (out.out + out.err).splitlines()
    assert "TrainJob training/cpu-ddp-a stopped" in line and "cpu-ddp-b has no Kueue Workload yet" in line


def test_under_kueue_start_of_a_stopped_run_activates_its_workload_again(cluster, capsys, dev):
    from ops import runs

    cluster.queue_with_kueue()
    name = runs.run_manifest(dataclasses.replace(dev, queueing="kueue"), "cpu-ddp", name=None, image=IMAGE,
                             overrides=None).name
    cluster.put(TRAINJOBS, trainjob(name, "Suspended", suspend=True, queue=True))
    cluster.put(WORKLOADS, workload(name, active=False))
    assert ops("status") == 0
    assert f"{name}  Stopped" in capsys.readouterr().out
    assert ops("start", "cpu-ddp", "--image", IMAGE) == 0
    assert [(c.path, c.body) for c in cluster.server.calls if c.method in ("PATCH", "POST")] == [
        (f"{WORKLOADS}/trainjob-{name}-1a2b3", {"spec": {"active": True}})]
    assert capsys.readouterr().out.startswith(f"TrainJob training/{name} resumed: its Workload")


def test_under_kueue_a_trainjob_without_its_workload_yet_is_not_stopped_through_spec_suspend(cluster, capsys):
    cluster.queue_with_kueue()
    cluster.put(TRAINJOBS, trainjob("cpu-ddp-a", suspend=None, queue=True))
    assert ops("stop", "cpu-ddp-a") == 2
    assert "has no Kueue Workload yet" in capsys.readouterr().err
    assert not cluster.writes()


# --- status ------------------------------------------------------------------------------------------

def test_status_reads_the_trainjob_conditions_and_the_jobset_restarts(cluster, capsys):
    cluster.put(TRAINJOBS, trainjob("a-done", "Complete"))
    cluster.put(TRAINJOBS, trainjob("b-failed", "Failed"))
    cluster.put(TRAINJOBS, trainjob("c-suspended", "Suspended", suspend=True))
    cluster.put(TRAINJOBS, trainjob("d-running", active=2))
    cluster.put(TRAINJOBS, trainjob("e-pending"))
    cluster.put(JOBSETS, {"metadata": {"name": "d-running"}, "status": {"restarts": 3, "restartsCountTowardsMax": 1}})
    assert ops("status") == 0
    rows = [line.split()[:3] for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows == [["a-done", "Succeeded", "0"], ["b-failed", "Failed", "0"], ["c-suspended", "Suspended", "0"],
                    ["d-running", "Running", "3"], ["e-pending", "Pending", "0"]]
    assert not [c for c in cluster.server.calls if "kueue" in c.path]


def test_status_under_kueue_shows_a_queued_runs_position_in_the_cluster_queue(cluster, capsys):
    cluster.queue_with_kueue()
    cluster.put(TRAINJOBS, trainjob("cpu-ddp-a", suspend=True, queue=True))
    cluster.put(WORKLOADS, workload("cpu-ddp-a"))
    cluster.server.on("GET", PENDING, {"kind": "PendingWorkloadsSummary", "items": [
        {"metadata": {"name": "trainjob-other", "ownerReferences": [{"kind": "TrainJob", "name": "other"}]},
         "positionInClusterQueue": 1, "positionInLocalQueue": 0, "priority": 0, "localQueueName": "default"},
        {"metadata": {"name": "trainjob-cpu-ddp-a-1a2b3", "ownerReferences": [
            {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "cpu-ddp-a"}]},
         "positionInClusterQueue": 2, "positionInLocalQueue": 1, "priority": 0, "localQueueName": "default"}]})
    assert ops("status") == 0
    [row] = capsys.readouterr().out.splitlines()[1:]
    assert row.split()[:2] == ["cpu-ddp-a", "Queued"] and row.endswith("queued, position 3 in training")


def test_status_under_kueue_says_why_kueue_does_not_admit_a_queued_run(cluster, capsys):
    """A run that asks for more than the ClusterQueue's quota waits forever; Kueue's Workload says so
    in its QuotaReserved condition (the TrainJob's own condition says only 'suspended')."""
    cluster.queue_with_kueue()
    cluster.put(TRAINJOBS, trainjob("cpu-ddp-a", "Suspended", suspend=True, queue=True))
    waits = workload("cpu-ddp-a")
    waits["status"]["conditions"] = [{
        "type": "QuotaReserved", "status": "False", "reason": "Pending",
        "message": "couldn't assign flavors to pod set node: insufficient quota for vpc.amazonaws.com/efa in flavor "
                   "p5, request > maximum capacity (64 > 32)"}]
    cluster.put(WORKLOADS, waits)
    cluster.server.on("GET", PENDING, {"kind": "PendingWorkloadsSummary", "items": [
        {"metadata": {"name": "trainjob-cpu-ddp-a-1a2b3", "ownerReferences": [{"kind": "TrainJob", "name": "cpu-ddp-a"}]},
         "positionInClusterQueue": 0, "positionInLocalQueue": 0, "priority": 0, "localQueueName": "default"}]})
    assert ops("status") == 0
    [row] = capsys.readouterr().out.splitlines()[1:]
    assert row.split()[:2] == ["cpu-ddp-a", "Queued"]
    assert row.endswith("queued, position 1 in training; couldn't assign flavors to pod set node: insufficient "
                        "quota for vpc.amazonaws.com/efa in flavor p5, request > maximum capacity (64 > 32)"), row


def test_status_under_kueue_shows_a_trainjob_kueue_has_not_seen_yet_as_queued(cluster, capsys):
    cluster.queue_with_kueue()
    cluster.put(TRAINJOBS, trainjob("cpu-ddp-a", suspend=True, queue=True))
    cluster.server.on("GET", PENDING, {"kind": "PendingWorkloadsSummary", "items": []})
    assert ops("status") == 0
    [row] = capsys.readouterr().out.splitlines()[1:]
    assert row.split()[:2] == ["cpu-ddp-a", "Queued"]
    assert row.endswith("queued (position unknown); Kueue has not created its Workload yet")


def test_status_without_kueues_visibility_api_prints_the_table_and_one_line(cluster, capsys):
    cluster.queue_with_kueue()
    cluster.put(TRAINJOBS, trainjob("cpu-ddp-a", suspend=True, queue=True))
    cluster.put(WORKLOADS, workload("cpu-ddp-a"))
    assert ops("status") == 2  # as every ops error
    out, err = capsys.readouterr()
    assert out.splitlines()[1].endswith("queued (position unknown)")
    [line] = err.splitlines()
    assert line.startswith("error: Kueue's visibility API (visibility.kueue.x-k8s.io/v1beta2) is not available "
                           "(HTTP 404 ") and "Traceback" not in err


def node_pod(run: str, index: int, **status) -> dict:
    """A TrainJob's node pod as k8s/pods/trainjob.py labels it, with its status (kube_fakes.worker_status)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{run}-node-0-{index}-x", "namespace": "training",
                         "labels": {"eks-distributed-training.io/job": run, "jobset.sigs.k8s.io/jobset-name": run}},
            "status": worker_status("node", **status)}


def test_status_shows_each_node_pods_exit_and_what_it_means_and_when_restarts_cannot_help(cluster, capsys):
    """A permanent exit fails the TrainJob through the podFailurePolicy, whose condition message names
    only the rule; the pods say which status and what it means."""
    cluster.put(TRAINJOBS, trainjob("a-failed", "Failed"))
    cluster.put(TRAINJOBS, trainjob("b-running", active=2))
    cluster.put(TRAINJOBS, trainjob("c-suspended", "Suspended", suspend=True))
    cluster.put(PODS, node_pod("a-failed", 0, exited=2))
    cluster.put(PODS, node_pod("a-failed", 1, exited=1))
    cluster.put(PODS, node_pod("b-running", 0, exited=75))
    cluster.put(PODS, {**node_pod("validation", 0, exited=2), "metadata": {"name": "not-a-run", "labels": {}}})
    assert ops("status") == 0
    failed, running, suspended = capsys.readouterr().out.splitlines()[1:]
    assert failed.endswith("a-failed is failed; a-failed-node-0-0-x exited 2 (bad input or data, or another run's lease on the "
                           "checkpoints); a-failed-node-0-1-x exited 1 (a crash, or a peer stopped first); exit 2 will "
                           "not get better by restarting: `python -m ops logs a-failed --env ENV` says why"), failed
    assert running.split()[:2] == ["b-running", "Running"]
    assert running.endswith("  b-running-node-0-0-x exited 75 (a checkpoint read failed, not by its own fault)"), running
    assert suspended.endswith("c-suspended is suspended")
    [listed] = [c for c in cluster.server.calls if c.path == PODS]  # one list for every run
    assert listed.query["labelSelector"] == "eks-distributed-training.io/job"


def test_status_says_why_a_run_waits_when_its_pods_are_unschedulable_in_one_line(cluster, capsys):
    cluster.put(TRAINJOBS, trainjob("e-pending", active=1))
    cluster.put(PODS, node_pod("e-pending", 0,
                               unschedulable="0/3 nodes are available:\n 3 Insufficient vpc.amazonaws.com/efa."))
    assert ops("status") == 0
    [row] = capsys.readouterr().out.splitlines()[1:]
    assert row.endswith("  1 pod unschedulable: 0/3 nodes are available: 3 Insufficient vpc.amazonaws.com/efa"), row


def test_a_run_whose_pods_all_wait_for_nodes_is_pending_not_running_with_how_many_and_why(cluster, capsys):
    """A child Job counts its Pending pods as active, so the TrainJob's jobsStatus alone read as Running
    while the scheduler found no node for any pod: nothing trains."""
    cluster.put(TRAINJOBS, trainjob("e-pending", active=1))
    for index in (0, 1):
        cluster.put(PODS, node_pod("e-pending", index, unschedulable="0/3 nodes are available: 3 Insufficient "
                                                                     "vpc.amazonaws.com/efa."))
    assert ops("status") == 0
    [row] = capsys.readouterr().out.splitlines()[1:]
    assert row.split()[:2] == ["e-pending", "Pending"], row
    assert row.endswith("  2 pods unschedulable: 0/3 nodes are available: 3 Insufficient vpc.amazonaws.com/efa"), row
    [listed] = [c for c in cluster.server.calls if c.path == PODS]  # the one list the notes read
    assert listed.query["labelSelector"] == "eks-distributed-training.io/job"


PULL_FAILS = ("ImagePullBackOff", 'Back-off pulling image "registry/trainer:3": ErrImagePull: rpc error: code = '
              'NotFound desc = failed to pull and unpack image "registry/trainer:3": not found')


def test_status_says_a_run_whose_pods_cannot_pull_its_image_waits_for_it_naming_the_image(cluster, capsys):
    """A run created with a tag the registry does not have (a second deploy whose push failed) waits
    forever: its pods are scheduled and Pending, and neither the TrainJob nor the JobSet says why."""
    cluster.put(TRAINJOBS, trainjob("p-pull", active=1))
    for index in (0, 1):
        cluster.put(PODS, node_pod("p-pull", index, waiting=PULL_FAILS, image="registry/trainer:3"))
    assert ops("status") == 0
    [row] = capsys.readouterr().out.splitlines()[1:]
    assert row.split()[:2] == ["p-pull", "Pending"], row
    assert row.endswith('  2 pods cannot pull image registry/trainer:3 (ImagePullBackOff: Back-off pulling image '
                        '"registry/trainer:3": ErrImagePull: rpc error: code = NotFound desc = failed to pull and '
                        'unpack image "registry/trainer:3": not found); a run keeps its image: push it, or '
                        '`python -m ops delete p-pull --env ENV` and start again'), row


def test_starting_a_started_run_says_what_its_pods_say_as_status_does(cluster, capsys, dev):
    """A user starts a run again to learn why nothing happens; its child Job counts its pods that wait
    for the image as active, so the TrainJob alone reads as Running."""
    from ops import runs

    name = runs.run_manifest(dev, "cpu-ddp", name=None, image=IMAGE, overrides=None).name
    cluster.put(TRAINJOBS, trainjob(name, active=2))
    for index in (0, 1):
        cluster.put(PODS, node_pod(name, index, waiting=PULL_FAILS, image="registry/trainer:3"))
    assert ops("start", "cpu-ddp", "--image", IMAGE) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert line.startswith(f"TrainJob training/{name} is already started (Pending): 2 pods cannot pull image "
                           "registry/trainer:3 (ImagePullBackOff: "), line
    assert not cluster.writes()


def test_under_kueue_starting_a_queued_run_says_why_kueue_does_not_admit_it(cluster, capsys, dev):
    from ops import runs

    cluster.queue_with_kueue()
    name = runs.run_manifest(dataclasses.replace(dev, queueing="kueue"), "cpu-ddp", name=None, image=IMAGE,
                             overrides=None).name
    cluster.put(TRAINJOBS, trainjob(name, "Suspended", suspend=True, queue=True))
    waits = workload(name)
    waits["status"]["conditions"] = [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                      "message": "couldn't assign flavors to pod set node: request > maximum capacity"}]
    cluster.put(WORKLOADS, waits)
    assert ops("start", "cpu-ddp", "--image", IMAGE) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert line == (f"TrainJob training/{name} is already started (Queued): queued (position unknown); couldn't "
                    "assign flavors to pod set node: request > maximum capacity"), line
    assert not cluster.writes()


def test_status_json_has_the_same_rows(cluster, capsys):
    import json

    cluster.put(TRAINJOBS, trainjob("d-running", active=1))
    assert cli.main(["status", "--env", "dev", "-o", "json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["name"] == "d-running" and row["phase"] == "Running" and row["restarts"] == "0"


# --- logs and delete ---------------------------------------------------------------------------------

def pod(name: str, run: str, index: int, attempt: int, phase: str = "Running") -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "training",
                         "labels": {"jobset.sigs.k8s.io/jobset-name": run,
                                    "jobset.sigs.k8s.io/restart-attempt": str(attempt)},
                         "annotations": {"batch.kubernetes.io/job-completion-index": str(index)}},
            "status": {"phase": phase}}


def test_logs_print_rank_0s_node_container_of_the_newest_attempt_efa_verdict_first(cluster, capsys):
    cluster.put(PODS, pod("r-node-0-1-x", "r", 1, 1))
    cluster.put(PODS, pod("r-node-0-0-y", "r", 0, 1))
    cluster.put(PODS, pod("r-node-0-0-old", "r", 0, 0, phase="Failed"))
    cluster.put(PODS, pod("other-node-0-0-z", "other", 0, 5))
    cluster.server.on("GET", f"{PODS}/r-node-0-0-y/log", b"step 1\nEFA check passed: 32 devices\n")
    assert ops("logs", "r") == 0
    [read] = [c for c in cluster.server.calls if c.path.endswith("/log")]
    assert read.query["container"] == "node"
    [listed] = [c for c in cluster.server.calls if c.path == PODS]
    assert listed.query["labelSelector"] == "jobset.sigs.k8s.io/jobset-name=r"
    assert capsys.readouterr().out.splitlines() == [
        "==> [r-node-0-0-y] EFA check passed: 32 devices", "[r-node-0-0-y] step 1",
        "[r-node-0-0-y] EFA check passed: 32 devices"]


def test_logs_follow_streams_rank_0(cluster, capsys):
    cluster.put(PODS, pod("r-node-0-0-y", "r", 0, 0))
    cluster.server.on("GET", f"{PODS}/r-node-0-0-y/log", b"a\nb")
    assert ops("logs", "r", "-f") == 0
    assert capsys.readouterr().out.splitlines() == ["[r-node-0-0-y] a", "[r-node-0-0-y] b"]


def test_a_followed_log_that_breaks_is_one_line_after_what_came_through(cluster, capsys):
    """A reset mid-log (the API server or kubelet restarting) was a crash report: 'a bug in ops'."""
    cluster.put(PODS, pod("r-node-0-0-y", "r", 0, 0))
    cluster.server.on("GET", f"{PODS}/r-node-0-0-y/log", Reset(b"a\nb\n"))
    assert ops("logs", "r", "-f") == 2
    out = capsys.readouterr()
    assert out.out.splitlines() == ["[r-node-0-0-y] a", "[r-node-0-0-y] b"]
    [line] = out.err.splitlines()
    assert line.startswith("error: the log stream of pod r-node-0-0-y broke (")
    assert "Connection reset by peer" in line and "`python -m ops logs r -f --env ENV` follows it again" in line


def test_logs_of_a_rank_0_pod_the_scheduler_cannot_place_say_why_it_waits(cluster, capsys):
    waits = pod("r-node-0-0-y", "r", 0, 0)
    waits["status"] = worker_status("node", unschedulable="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    cluster.put(PODS, waits)
    assert ops("logs", "r") == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line == ("error: pod r-node-0-0-y is Pending: it is unschedulable: 0/3 nodes are available: 3 Insufficient "
                    "nvidia.com/gpu; its log starts when it runs")


def test_logs_of_a_run_without_pods_is_one_line(cluster, capsys):
    cluster.put(TRAINJOBS, trainjob("r"))
    assert ops("logs", "r") == 2
    assert "has no pod of index 0 (yet)" in capsys.readouterr().err


@pytest.mark.parametrize("condition, phase", [("Complete", "Succeeded"), ("Failed", "Failed")])
def test_logs_of_an_ended_run_whose_rank_0_pod_is_gone_say_where_the_log_is(cluster, capsys, condition, phase):
    """The Job controller deletes the pods still running when another rank fails the Job, and pods on
    nodes scaled away go with them: "no pod (yet)" sent the user waiting for one that never comes."""
    cluster.put(TRAINJOBS, trainjob("r", condition))
    assert ops("logs", "r") == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line == (f"error: TrainJob r has ended ({phase}) and its rank 0 pod is gone; its log stays in CloudWatch "
                    "Logs: group /aws/containerinsights/ENV-training/application, the streams that name r-node-0-0")


def test_logs_of_a_run_that_is_not_there_say_where_the_runs_are_listed(cluster, capsys):
    assert ops("logs", "nope") == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "HTTP 404" in line and line.endswith("`python -m ops status --env ENV` lists the runs in training")


def test_delete_removes_the_trainjob_its_runtime_and_its_peers_policy(cluster, capsys):
    assert submit() == 0
    name = the_run(cluster)
    cluster.server.calls.clear()
    assert ops("delete", name) == 0
    assert cluster.writes() == [("DELETE", f"{TRAINJOBS}/{name}"), ("DELETE", f"{RUNTIMES}/{name}"),
                                ("DELETE", f"{POLICIES}/{name}-peers")]
    assert not any(cluster.objects[c] for c in (TRAINJOBS, RUNTIMES, POLICIES))
    assert capsys.readouterr().out.endswith(
        f"deleted TrainJob training/{name}, its TrainingRuntime and its peers NetworkPolicy\n")


def test_deleting_a_trainjob_that_is_not_there_is_one_line(cluster, capsys):
    assert ops("delete", "nope") == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "HTTP 404" in line and "`python -m ops status --env ENV` lists the runs in training" in line


@pytest.mark.parametrize("verb", [["status"], ["stop", "cpu-ddp"]])
def test_the_pytorchjob_verbs_on_a_cluster_without_that_api_say_to_pass_env(cluster, capsys, verb):
    """Without --env the verbs read PyTorchJobs; a v2 cluster has no such CRD (the list answers 404)."""
    assert cli.main(verb) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "HTTP 404" in line and line.endswith("on a trainingApi v2 environment runs are TrainJobs, which the "
                                                "run verbs find with --env NAME")
