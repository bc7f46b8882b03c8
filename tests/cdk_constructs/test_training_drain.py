"""The training drain's Lambda (cdk_constructs/teardown_handlers/training_drain.py) on Delete:
against a stateful fake Kubernetes API server on loopback (fake_kubernetes.py), replying to a
real HTTP endpoint standing in for CloudFormation's pre-signed response URL (fixtures: conftest.py)."""

from __future__ import annotations

import base64
import time
from urllib.parse import parse_qs, urlsplit

import pytest

import training_drain
from cfn_events import Context, event
from fake_kubernetes import CLAIM, NAMESPACE, PREFIXES, V1_KINDS, V2_KINDS


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
    from tests.conftest import contract

    crds = [yaml.safe_load(contract(path).read_text()) for path in (
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
