"""The training drain's Lambda (cdk_constructs/teardown_handlers/training_drain.py) against a
stateful fake Kubernetes API server on loopback, replying to a real HTTP endpoint standing in for
CloudFormation's pre-signed response URL (fixtures: conftest.py)."""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

import training_drain
from cfn_events import Context, event

NAMESPACE, CLAIM = "training", "fsx-pvc"


V1_KINDS = frozenset({"pytorchjobs", "mpijobs", "jobs"})
# Under trainingApi v2 the operator stays for the NCCL validation's MPIJob only (no PyTorchJob CRD).
V2_KINDS = frozenset({"trainjobs", "jobsets", "mpijobs", "jobs"})


class FakeKubernetes:
    """The part of the API server the drain uses, with state and the controllers that matter.

    Runs own what they create, as ownerReferences do: a TrainJob its JobSet, a JobSet its Job, a
    run its pods. Before each request the fake acts as the cluster between two requests: the
    garbage collector removes objects whose owner is gone and starts terminating such pods; then
    Trainer re-applies the JobSet of every TrainJob, JobSet creates the missing Job of every
    JobSet, and the Job controller starts a pod for each missing one of a JobSet Job's `nodes`. A
    terminating pod goes after it was listed `grace_lists` more times (its grace period, in polls);
    a pod with a finalizer never goes. A kind outside `served` answers 404, as a kind without its
    CRD does. Records every request with its bearer token."""

    def __init__(self, *, served=V1_KINDS, grace_lists: int = 1):
        self.served, self.grace_lists = set(served), grace_lists
        self.objects: dict[tuple[str, str], tuple[str, str] | None] = {}  # (resource, name) -> owner
        self.nodes: dict[str, int] = {}  # JobSet Job -> pods it keeps running
        self.pods: dict[str, dict] = {}  # name -> {"owner": (resource, name)|None, "claim", "stuck", "left"}
        self.elsewhere: set[tuple[str, str, str]] = set()  # (resource, namespace, name) outside NAMESPACE
        self.created = 0  # pods the Job controller started
        self.requests: list[tuple[str, str, str]] = []

    def add_run(self, resource: str, name: str, pods: int) -> None:
        self.objects[(resource, name)] = None
        for i in range(pods):
            self.add_pod(f"{name}-worker-{i}", owner=(resource, name))

    def add_trainjob(self, name: str, nodes: int) -> None:
        """A TrainJob whose JobSet of one Job of `nodes` pods the controllers create."""
        self.objects[("trainjobs", name)] = None
        self.nodes[f"{name}-node-0"] = nodes
        self._reconcile()

    def add_jobset(self, name: str, nodes: int) -> None:
        """A JobSet nobody owns (made by hand)."""
        self.objects[("jobsets", name)] = None
        self.nodes[f"{name}-node-0"] = nodes
        self._reconcile()

    def add_pod(self, name: str, *, owner: tuple[str, str] | None = None, claim: bool = True,
                stuck: bool = False) -> None:
        self.pods[name] = {"owner": owner, "claim": claim, "stuck": stuck, "left": None}

    def kinds_left(self) -> set[str]:
        return {resource for resource, _ in self.objects}

    def _terminate(self, name: str) -> None:
        if self.pods[name]["left"] is None:
            self.pods[name]["left"] = self.grace_lists

    def _reconcile(self) -> None:
        while orphans := [key for key, owner in self.objects.items() if owner and owner not in self.objects]:
            for key in orphans:
                del self.objects[key]
        for name, pod in self.pods.items():
            if pod["owner"] and pod["owner"] not in self.objects:
                self._terminate(name)
        for resource, name in list(self.objects):
            if resource == "trainjobs":
                self.objects.setdefault(("jobsets", name), ("trainjobs", name))
        for resource, name in list(self.objects):
            if resource == "jobsets":
                self.objects.setdefault(("jobs", f"{name}-node-0"), ("jobsets", name))
        for resource, name in list(self.objects):
            if resource == "jobs" and name in self.nodes:
                running = [p for p in self.pods.values() if p["owner"] == ("jobs", name) and p["left"] is None]
                for _ in range(self.nodes[name] - len(running)):
                    self.created += 1
                    self.add_pod(f"{name}-{self.created}", owner=("jobs", name))

    def answer(self, method: str, target: str, token: str) -> tuple[int, dict]:
        path, query = urlsplit(target).path, parse_qs(urlsplit(target).query)
        self.requests.append((method, path, token))
        self._reconcile()
        parts = path.strip("/").split("/")
        if method == "GET" and parts[-1] in self.served and path == f"{PREFIXES[parts[-1]]}/{parts[-1]}":
            names = sorted([(NAMESPACE, n) for r, n in self.objects if r == parts[-1]]
                           + [(ns, n) for r, ns, n in self.elsewhere if r == parts[-1]])
            limit = int(query["limit"][0])
            return 200, {"kind": "List", "metadata": {"continue": "next"} if len(names) > limit else {},
                         "items": [{"metadata": {"namespace": ns, "name": n}} for ns, n in names[:limit]]}
        if method == "GET" and path == f"/api/v1/namespaces/{NAMESPACE}/pods":
            for name, pod in list(self.pods.items()):
                if pod["left"] is not None and not pod["stuck"]:
                    if pod["left"] == 0:
                        del self.pods[name]
                    else:
                        pod["left"] -= 1
            volumes = [{"name": "fsx", "persistentVolumeClaim": {"claimName": CLAIM}}]
            return 200, {"kind": "PodList", "items": [
                {"metadata": {"name": n, **({"deletionTimestamp": "2026-11-25T22:00:00Z"} if p["left"] is not None else {})},
                 "spec": {"volumes": volumes if p["claim"] else [{"name": "tmp", "emptyDir": {}}]}}
                for n, p in self.pods.items()]}
        if method == "DELETE" and parts[-2:-1] == ["pods"]:
            if parts[-1] not in self.pods:
                return 404, {"kind": "Status", "message": "not found"}
            self._terminate(parts[-1])
            return 200, {"kind": "Pod"}
        if method == "DELETE" and parts[-1] in self.served and f"/{'/'.join(parts[:-3])}" == PREFIXES[parts[-1]]:
            for key in [k for k in self.objects if k[0] == parts[-1]]:
                del self.objects[key]  # background propagation: owners now, what they own at the next request
            return 200, {"kind": "Status", "status": "Success"}
        return 404, {"kind": "Status", "message": "the server could not find the requested resource"}


# Where each kind is served: its group and version (k8s/pods/trainjob.py, the contracts' CRDs).
PREFIXES = {"trainjobs": "/apis/trainer.kubeflow.org/v1alpha1", "jobsets": "/apis/jobset.x-k8s.io/v1alpha2",
            "pytorchjobs": "/apis/kubeflow.org/v1", "mpijobs": "/apis/kubeflow.org/v1", "jobs": "/apis/batch/v1"}


@pytest.fixture
def kubernetes():
    """(url, FakeKubernetes) on a loopback HTTP server."""
    cluster = FakeKubernetes()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self):
            token = self.headers.get("Authorization", "").removeprefix("Bearer ")
            if self.headers.get("Content-Length"):
                self.rfile.read(int(self.headers["Content-Length"]))
            status, body = cluster.answer(self.command, self.path, token)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_DELETE = _serve  # noqa: N815 - http.server's naming

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", cluster
    server.shutdown()


def test_an_eks_token_is_a_presigned_get_caller_identity_that_names_the_cluster(endpoint):
    token = training_drain.eks_token("dev-training", "us-west-2")
    assert token.startswith("k8s-aws-v1.")
    encoded = token.removeprefix("k8s-aws-v1.")
    url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    assert parts.netloc == "sts.us-west-2.amazonaws.com"
    assert query["Action"] == ["GetCallerIdentity"] and query["X-Amz-Expires"] == ["60"]
    assert "x-k8s-aws-id" in query["X-Amz-SignedHeaders"][0].split(";")


def test_drain_deletes_every_run_then_waits_until_no_pod_mounts_the_claim(kubernetes):
    url, cluster = kubernetes
    cluster.add_run("pytorchjobs", "llama3-8b-fsdp-abc123", pods=2)
    cluster.add_run("mpijobs", "nccl-tests", pods=1)
    cluster.add_run("jobs", "data-c4", pods=1)
    cluster.add_pod("model-download", claim=True)         # a bare pod on the claim
    cluster.add_pod("etcd-5f7c", claim=False)             # the rendezvous keeps running
    sleeps = []
    summary = training_drain.drain(training_drain.Api(url, "k8s-aws-v1.t"), NAMESPACE, CLAIM, time.monotonic() + 60,
                                   poll_seconds=10, sleep=sleeps.append)
    assert summary == f"deleted pytorchjobs, mpijobs, jobs in {NAMESPACE}; no pod mounts {CLAIM} (1 pod(s) deleted by name)"
    # The runs' pods go within one poll; the bare pod, deleted by name after the first list, one later.
    assert sleeps == [10, 10]
    assert list(cluster.pods) == ["etcd-5f7c"]
    deletes = [p for m, p, _ in cluster.requests if m == "DELETE"]
    # The v2 kinds are asked for too; this v1 cluster answers 404 for them.
    assert deletes[:5] == [f"{PREFIXES[kind]}/namespaces/{NAMESPACE}/{kind}"
                           for kind in ("trainjobs", "jobsets", "pytorchjobs", "mpijobs", "jobs")]
    assert {t for _, _, t in cluster.requests} == {"k8s-aws-v1.t"}


def _clock():
    """(sleep, clock): a clock that moves only when the drain sleeps."""
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds

    return sleep, lambda: now[0]


def test_under_trainer_v2_the_drain_deletes_trainjobs_and_jobsets_so_nothing_recreates_their_pods(kubernetes):
    url, cluster = kubernetes
    cluster.served = set(V2_KINDS)
    cluster.add_trainjob("llama3-8b-fsdp-abc123", nodes=2)
    cluster.add_jobset("by-hand", nodes=1)                  # a JobSet without a TrainJob
    cluster.add_run("mpijobs", "nccl-p5-0", pods=1)         # the NCCL validation stays on the v1 operator
    cluster.add_pod("model-download", claim=True)
    assert len(cluster.pods) == 5
    sleep, clock = _clock()
    summary = training_drain.drain(training_drain.Api(url, "t"), NAMESPACE, CLAIM, 600.0, poll_seconds=10,
                                   sleep=sleep, clock=clock)
    assert summary == f"deleted trainjobs, jobsets, mpijobs, jobs in {NAMESPACE}; no pod mounts {CLAIM} (1 pod(s) deleted by name)"
    assert cluster.pods == {} and cluster.kinds_left() == set()
    assert cluster.created == 3  # the pods the controllers started for the two JobSets; none after the drain began
    assert clock() == 20.0


def test_under_trainer_v2_deleting_jobs_alone_never_frees_the_claim(kubernetes, monkeypatch):
    """What the drain did before it knew TrainJobs: JobSet recreates each deleted Job and the Job
    its pods, so the claim stays held until the deadline (and the volume's delete after it)."""
    url, cluster = kubernetes
    cluster.served = set(V2_KINDS)
    cluster.add_trainjob("llama3-8b-fsdp-abc123", nodes=2)
    monkeypatch.setattr(training_drain, "RUNS", tuple(r for r in training_drain.RUNS if r[1] in V1_KINDS))
    sleep, clock = _clock()
    with pytest.raises(training_drain.Incomplete, match="llama3-8b-fsdp-abc123-node-0-"):
        training_drain.drain(training_drain.Api(url, "t"), NAMESPACE, CLAIM, 100.0, poll_seconds=10,
                             sleep=sleep, clock=clock)
    assert cluster.created > 2 and ("trainjobs", "llama3-8b-fsdp-abc123") in cluster.objects


def test_the_drain_asks_for_each_kind_at_the_version_its_pinned_crd_serves():
    """The CRDs are the contracts' (Kubeflow Trainer v2.3.0, JobSet v0.12.0) and ours for the v1 kinds."""
    import yaml

    from k8s.addons.training_operator_crds import mpijob_crd, pytorchjob_crd
    from k8s.pods import trainjob
    from tests.conftest import CONTRACTS_DIR

    crds = [yaml.safe_load((CONTRACTS_DIR / path).read_text()) for path in (
        "kubeflow-trainer-v2.3.0/base-crds-trainer.kubeflow.org_trainjobs.yaml",
        "jobset-v0.12.0/components-crd-bases-jobset.x-k8s.io_jobsets.yaml")] + [pytorchjob_crd(), mpijob_crd()]
    served = {crd["spec"]["names"]["plural"]: {f"/apis/{crd['spec']['group']}/{v['name']}"
                                               for v in crd["spec"]["versions"] if v["served"]} for crd in crds}
    served["jobs"] = {"/apis/batch/v1"}
    assert {resource: {prefix} for prefix, resource in training_drain.RUNS} == served
    assert f"/apis/{trainjob.API_VERSION}" in served["trainjobs"]


def test_drain_without_the_kubeflow_crds_still_deletes_jobs_and_pods(kubernetes):
    url, cluster = kubernetes
    cluster.served = {"jobs"}
    cluster.add_run("jobs", "data-c4", pods=1)
    summary = training_drain.drain(training_drain.Api(url, "t"), NAMESPACE, CLAIM, time.monotonic() + 60,
                                   poll_seconds=10, sleep=lambda s: None)
    assert summary.startswith(f"deleted jobs in {NAMESPACE}; no pod mounts {CLAIM}")
    assert cluster.pods == {}


def test_drain_fails_at_its_deadline_naming_the_pods_still_on_the_claim(kubernetes):
    url, cluster = kubernetes
    cluster.add_pod("stuck-0", claim=True, stuck=True)
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds

    with pytest.raises(training_drain.Incomplete, match=f"pods in {NAMESPACE} still mount {CLAIM}: stuck-0"):
        training_drain.drain(training_drain.Api(url, "t"), NAMESPACE, CLAIM, 25.0, poll_seconds=10, sleep=sleep,
                             clock=lambda: now[0])
    assert now[0] == 20.0
    assert [p for m, p, _ in cluster.requests if m == "DELETE" and "/pods/" in p] == \
        [f"/api/v1/namespaces/{NAMESPACE}/pods/stuck-0"]  # asked once, not on every poll


def test_drain_handler_replies_failed_with_the_pods_left(endpoint, kubernetes, cloudformation):
    url, cluster = kubernetes
    cluster.add_pod("stuck-0", claim=True, stuck=True)
    reply_url, replies = cloudformation
    training_drain.handler(event(reply_url, "Delete", ClusterName="dev-training", Endpoint=url,
                                 Namespace=NAMESPACE, ClaimName=CLAIM), Context())
    [reply] = replies
    assert reply["Status"] == "FAILED" and "stuck-0" in reply["Reason"]
    tokens = {token for _, _, token in cluster.requests}
    assert len(tokens) == 1 and tokens.pop().startswith("k8s-aws-v1.")  # an EKS token on every call


def test_drain_handler_replies_success_once_the_claim_is_free(endpoint, kubernetes, cloudformation):
    url, cluster = kubernetes
    cluster.add_run("pytorchjobs", "cpu-ddp-x", pods=1)
    cluster.grace_lists = 0
    reply_url, replies = cloudformation
    training_drain.handler(event(reply_url, "Delete", ClusterName="dev-training", Endpoint=url,
                                 Namespace=NAMESPACE, ClaimName=CLAIM), Context())
    [reply] = replies
    assert reply["Status"] == "SUCCESS" and reply["Reason"].startswith("deleted pytorchjobs")
    assert cluster.pods == {}


def test_the_drains_roles_allow_exactly_the_requests_it_makes(kubernetes):
    """The Role and ClusterRole bound to the drain's group (cdk_constructs/training_drain.py RULES,
    CLUSTER_RULES) and the handler's requests on Delete and on an Update in either direction, mapped
    to (API group, resource, verb, scope) as the API server authorizes them."""
    from cdk_constructs.training_drain import CLUSTER_RULES, RULES

    url, cluster = kubernetes
    cluster.add_run("jobs", "data-c4", pods=1)
    cluster.add_pod("model-download", claim=True)
    api = training_drain.Api(url, "t")
    training_drain.drain(api, NAMESPACE, CLAIM, time.monotonic() + 60, poll_seconds=1, sleep=lambda s: None)
    training_drain.check_switch(api, NAMESPACE, "v1", "v2")
    training_drain.check_switch(api, NAMESPACE, "v2", "v1")
    made = set()
    for method, path, _ in cluster.requests:
        parts = path.strip("/").split("/")
        group = "" if parts[0] == "api" else parts[1]
        scope = "namespace" if "namespaces" in parts else "cluster"
        resource, named = (parts[-2], True) if parts[-2] == "pods" else (parts[-1], False)
        verb = {"GET": "list", "DELETE": "delete" if named else "deletecollection"}[method]
        made.add((group, resource, verb, scope))
    allowed = {(g, r, v, scope) for rules, scope in ((RULES, "namespace"), (CLUSTER_RULES, "cluster"))
               for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert made == allowed


# The Update path: a switch of trainingApi while runs of the old API exist.

def update(url: str, reply_url: str, new: str | None, old: str | None) -> dict:
    """An Update event whose TrainingApi goes from `old` to `new` (None: the property is absent)."""
    def props(api):
        return {"ClusterName": "dev-training", "Endpoint": url, "Namespace": NAMESPACE, "ClaimName": CLAIM,
                **({"TrainingApi": api} if api else {})}
    return {**event(reply_url, "Update", **props(new)), "OldResourceProperties": props(old)}


@pytest.mark.parametrize("new, old", [(None, None), ("v2", "v2")])
def test_an_update_that_keeps_the_training_api_succeeds_without_asking_the_cluster(
        endpoint, kubernetes, cloudformation, new, old):
    url, cluster = kubernetes
    cluster.add_run("pytorchjobs", "llama3-8b-fsdp-abc123", pods=2)
    reply_url, replies = cloudformation
    training_drain.handler(update(url, reply_url, new, old), Context())
    [reply] = replies
    assert reply["Status"] == "SUCCESS" and cluster.requests == []


def test_a_first_deploy_succeeds_without_asking_the_cluster(endpoint, kubernetes, cloudformation):
    url, cluster = kubernetes
    reply_url, replies = cloudformation
    training_drain.handler(event(reply_url, "Create", ClusterName="dev-training", Endpoint=url, Namespace=NAMESPACE,
                                 ClaimName=CLAIM, TrainingApi="v2"), Context())
    [reply] = replies
    assert reply["Status"] == "SUCCESS" and cluster.requests == []


def test_a_switch_to_v1_while_trainjobs_exist_fails_naming_them_and_deletes_nothing(endpoint, kubernetes, cloudformation):
    url, cluster = kubernetes
    cluster.served = set(V2_KINDS)
    cluster.add_trainjob("llama3-8b-fsdp-abc123", nodes=2)
    cluster.elsewhere.add(("trainjobs", "research", "sweep-7"))
    pods = dict(cluster.pods)
    reply_url, replies = cloudformation
    training_drain.handler(update(url, reply_url, None, "v2"), Context())  # v1 renders no TrainingApi
    [reply] = replies
    assert reply["Status"] == "FAILED"
    assert reply["Reason"].startswith("SwitchRefused: trainingApi changes from v2 to v1 while 2 TrainJob(s) exist "
                                      "(llama3-8b-fsdp-abc123, research/sweep-7): the deploy deletes the TrainJob CRD")
    assert "`python -m ops stop RUN`" in reply["Reason"] and "keep trainingApi v2" in reply["Reason"]
    assert [m for m, _, _ in cluster.requests] == ["GET"] and cluster.pods == pods


def test_a_switch_to_v2_while_pytorchjobs_exist_fails_naming_them(endpoint, kubernetes, cloudformation):
    url, cluster = kubernetes
    for i in range(7):
        cluster.add_run("pytorchjobs", f"run-{i}", pods=0)
    reply_url, replies = cloudformation
    training_drain.handler(update(url, reply_url, "v2", None), Context())
    [reply] = replies
    assert reply["Status"] == "FAILED"
    assert ("7 PyTorchJob(s) exist (run-0, run-1, run-2, run-3, run-4 and 2 more): the deploy takes PyTorchJob from "
            "the Training Operator") in reply["Reason"]


def test_a_list_cut_at_its_limit_says_there_are_more(kubernetes, monkeypatch):
    url, cluster = kubernetes
    for i in range(3):
        cluster.add_run("pytorchjobs", f"run-{i}", pods=0)
    monkeypatch.setattr(training_drain, "LIST_LIMIT", 2)
    with pytest.raises(training_drain.SwitchRefused, match=r"while 2\+ PyTorchJob\(s\) exist \(run-0, run-1 and more\)"):
        training_drain.check_switch(training_drain.Api(url, "t"), NAMESPACE, "v1", "v2")


@pytest.mark.parametrize("served", [V1_KINDS, V2_KINDS], ids=["no-pytorchjob", "no-pytorchjob-crd"])
def test_a_switch_with_no_run_of_the_old_kind_succeeds(endpoint, kubernetes, cloudformation, served):
    """Other runs (a data Job) do not stop it, and neither does a cluster that never served the old
    kind: a v2 environment deployed before the property existed reads as v1 -> v2 once."""
    url, cluster = kubernetes
    cluster.served = set(served)
    cluster.add_run("jobs", "data-c4", pods=1)
    reply_url, replies = cloudformation
    training_drain.handler(update(url, reply_url, "v2", None), Context())
    [reply] = replies
    assert reply["Status"] == "SUCCESS" and reply["Reason"] == "trainingApi v1 -> v2: no PyTorchJob exists, nothing to lose"
    assert ("jobs", "data-c4") in cluster.objects


def test_a_cluster_that_cannot_be_read_fails_the_switch(endpoint, cloudformation):
    """Unchecked is not safe: the switch may delete runs, so a read that fails fails the update."""
    reply_url, replies = cloudformation
    training_drain.handler(update("http://127.0.0.1:9", reply_url, "v2", None), Context())
    [reply] = replies
    assert reply["Status"] == "FAILED" and reply["Reason"].startswith("URLError")


def test_the_handlers_run_kinds_are_the_ones_preflight_checks():
    from ops.api_switch import RUN_KINDS

    assert {k.api: (f"/apis/{k.group}/{k.version}", k.plural, k.kind) for k in RUN_KINDS} == \
        {api: (k.prefix, k.resource, k.kind) for api, k in training_drain.RUN_KINDS.items()}


def stack_in(status: str | None):
    """A CloudFormation client whose DescribeStacks answers `status` (None: the stack is unknown).
    botocore's Stubber: moto cannot put a stack in UPDATE_ROLLBACK_IN_PROGRESS."""
    import datetime

    import boto3
    from botocore.stub import Stubber

    client = boto3.client("cloudformation", region_name="us-west-2")
    stubber = Stubber(client)
    if status is None:
        stubber.add_client_error("describe_stacks", "ValidationError", "Stack with id arn:stack does not exist")
    else:
        stubber.add_response("describe_stacks", {"Stacks": [{
            "StackName": "dev-Workloads", "CreationTime": datetime.datetime(2026, 11, 1), "StackStatus": status}]},
            {"StackName": "arn:stack"})
    stubber.activate()
    return client


@pytest.mark.parametrize("status, rolling", [("UPDATE_ROLLBACK_IN_PROGRESS", True), ("UPDATE_IN_PROGRESS", False),
                                             (None, False)])
def test_only_a_stack_rolling_back_counts_as_a_rollback(endpoint, status, rolling):
    assert training_drain.rolling_back("arn:stack", "us-west-2", stack_in(status)) is rolling


def test_the_update_a_rollback_sends_back_is_not_checked(endpoint, kubernetes, cloudformation, monkeypatch):
    """A refused v1 -> v2 switch rolls back by updating the drain from v2 to v1. The TrainJob CRD
    the failed update created may hold runs by then; refusing would leave the stack
    UPDATE_ROLLBACK_FAILED, so the rollback's Update succeeds without asking the cluster."""
    import functools

    url, cluster = kubernetes
    cluster.served = set(V2_KINDS)
    cluster.add_trainjob("early-bird", nodes=1)
    monkeypatch.setattr(training_drain, "rolling_back", functools.partial(
        training_drain.rolling_back, cloudformation=stack_in("UPDATE_ROLLBACK_IN_PROGRESS")))
    reply_url, replies = cloudformation
    training_drain.handler(update(url, reply_url, None, "v2"), Context())
    [reply] = replies
    assert reply["Status"] == "SUCCESS" and reply["Reason"].startswith("rollback to trainingApi v1")
    assert cluster.requests == []
