"""A `trainingApi: v2` environment (the synth variant trainerv2: dev with v2) synthesizes: the
JobSet and Trainer add-ons reach the Workloads stack as one manifest each, after their CRDs and
under the kubectl provider's limits, each deploy waits for their rollouts, their CRDs outlive the
stack where data is retained, and the Training Operator is there for MPIJob alone."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Template

from synth_helpers import environment, synth
from test_workloads import MANIFEST_BUDGET, OBJECT_VALUE_TYPE, chart_manifests, objects

V2_CHARTS = ("jobset-crd", "jobset", "trainer-v2-crds", "trainer-v2")


@pytest.fixture(scope="module")
def v2():
    return synth("trainerv2")


@pytest.fixture(scope="module")
def template(v2):
    return Template.from_stack(v2.stage.workloads).to_json()


@pytest.fixture(scope="module")
def manifests(v2, template):
    return chart_manifests(v2, template)


def test_the_v2_charts_are_one_manifest_each_within_the_budget(manifests):
    for name in V2_CHARTS:
        [resource] = manifests[name]
        assert len(json.dumps(resource["Properties"]["Manifest"])) <= MANIFEST_BUDGET, name
    kinds = {o["kind"] for o in objects(manifests["trainer-v2-crds"])}
    assert kinds == {"CustomResourceDefinition"}


def test_the_operator_serves_mpijob_only_and_no_pytorchjob_crd_is_applied(manifests):
    crds = [o["spec"]["names"]["kind"] for o in objects(manifests["training-operator-crds"])]
    assert crds == ["MPIJob"]
    deployment = next(o for o in objects(manifests["training-operator"]) if o["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--enable-scheme=")] == ["--enable-scheme=mpijob"]


def test_each_deploy_waits_for_the_jobset_and_trainer_rollouts_and_trainer_waits_for_jobset(v2, template, manifests):
    stack = v2.stage.workloads
    waiters = {r["Properties"]["ObjectName"]: (k, r) for k, r in template["Resources"].items()
               if r["Type"] == OBJECT_VALUE_TYPE}
    assert {"training-operator", "jobset-controller-manager", "kubeflow-trainer-controller-manager"} <= set(waiters)
    for name in ("jobset-controller-manager", "kubeflow-trainer-controller-manager"):
        assert waiters[name][1]["Properties"]["ObjectNamespace"] == "kubeflow-system"
    jobset_waiter = waiters["jobset-controller-manager"][0]
    [trainer] = manifests["trainer-v2"]
    assert jobset_waiter in trainer["DependsOn"]
    for chart, crds in (("jobset", "jobset-crd"), ("trainer-v2", "trainer-v2-crds")):
        [resource] = manifests[chart]
        assert {stack.get_logical_id(m.node.default_child) for m in stack.manifests[crds]} <= set(resource["DependsOn"])


def test_the_v2_crds_are_kept_where_data_is_retained():
    import aws_cdk as cdk

    from stacks.workloads import removal_policy_for

    prod = environment("prod")
    for name in ("jobset-crd", "trainer-v2-crds"):
        assert removal_policy_for(prod, name) == cdk.RemovalPolicy.RETAIN


def test_a_v2_environment_gets_kubeflow_system(manifests):
    names = {o["metadata"]["name"] for o in objects(manifests["namespaces"])}
    assert "kubeflow-system" in names
