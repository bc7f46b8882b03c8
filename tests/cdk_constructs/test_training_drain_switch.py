"""The training drain's Lambda (cdk_constructs/teardown_handlers/training_drain.py) on Update: it
refuses a switch of the environment's trainingApi while runs of the old API exist, against the
fake Kubernetes API server (fake_kubernetes.py) and the CloudFormation reply endpoint (conftest.py).
Where the templates put that Update: tests/stacks/test_training_api_switch.py."""

from __future__ import annotations

import pytest

import training_drain
from cfn_events import Context, event
from fake_kubernetes import CLAIM, NAMESPACE, V1_KINDS, V2_KINDS


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
