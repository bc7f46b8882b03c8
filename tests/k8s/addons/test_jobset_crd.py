"""The project-written JobSet v0.12.0 CRD (k8s/addons/jobset_crd.py) against upstream's
(../shared/contracts/jobset-v0.12.0/components-crd-bases-jobset.x-k8s.io_jobsets.yaml): small enough
to deliver, every declared field upstream's own, and the JobSet Trainer builds from our runtime
accepted and kept whole (a structural schema prunes what it does not declare)."""

from __future__ import annotations

import copy
import dataclasses
import json

import jsonschema
import pytest

from conformance import contract, yaml_docs
from crd_schema import narrower_than_upstream, pruned
from k8s.addons.jobset import jobset_controller
from k8s.addons.jobset_crd import ADDON, GROUP, VERSION, jobset_crd

# The kubectl Lambda's event limit (aws-cdk issues 19165, 17362): every object must fit in one.
EVENT_LIMIT = 256 * 1024
def upstream_schema() -> dict:
    [crd] = yaml_docs(contract("jobset-v0.12.0", "components-crd-bases-jobset.x-k8s.io_jobsets.yaml"))
    [version] = crd["spec"]["versions"]
    assert version["name"] == VERSION
    return version["schema"]["openAPIV3Schema"]


def our_schema() -> dict:
    [version] = jobset_crd()["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


@pytest.fixture(scope="module")
def jobset(dev) -> dict:
    """The JobSet Trainer v2.3.0 builds for a run: the runtime's JobSet template under the TrainJob's
    name (pkg/runtime/framework/plugins/jobset/builder.go)."""
    from k8s.pods.trainjob import render_trainjob_run

    runtime, trainjob = render_trainjob_run(dataclasses.replace(dev, training_api="v2"), "cpu-ddp",
                                            image="registry.example/trainer:1")
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "JobSet",
            "metadata": {"name": trainjob["metadata"]["name"], "namespace": trainjob["metadata"]["namespace"]},
            "spec": copy.deepcopy(runtime["spec"]["template"]["spec"])}


def test_every_jobset_object_fits_the_kubectl_lambdas_event():
    for obj in [jobset_crd(), *jobset_controller()]:
        assert len(json.dumps(obj).encode()) < EVENT_LIMIT, obj["metadata"]["name"]


def test_the_crd_is_only_for_trainer_v2_environments(dev):
    assert not ADDON.applies_to(dev)
    assert ADDON.applies_to(dataclasses.replace(dev, training_api="v2"))


def test_every_declared_field_is_upstreams_with_upstreams_types_defaults_and_rules():
    problems = narrower_than_upstream(our_schema(), upstream_schema())
    assert not problems, "\n".join(problems)


def test_the_gate_catches_a_narrowed_enum_and_a_field_upstream_lacks():
    ours = copy.deepcopy(our_schema())
    spec = ours["properties"]["spec"]["properties"]
    spec["successPolicy"]["properties"]["operator"]["enum"] = ["All"]
    spec["shardCount"] = {"type": "integer"}
    problems = narrower_than_upstream(ours, upstream_schema())
    assert any("/spec/successPolicy/operator: enum" in p for p in problems), problems
    assert any("/spec/shardCount: not an upstream field" in p for p in problems), problems


def test_the_jobset_our_runtime_produces_is_accepted_and_kept_whole_by_both_schemas(jobset):
    for schema in (our_schema(), upstream_schema()):
        jsonschema.validate(jobset, schema)
    assert pruned(our_schema(), jobset) == jobset


def test_a_mistyped_jobset_field_is_rejected(jobset):
    broken = copy.deepcopy(jobset)
    broken["spec"]["failurePolicy"]["restartStrategy"] = "RecreateAll"
    with pytest.raises(jsonschema.ValidationError, match="RecreateAll"):
        jsonschema.validate(broken, our_schema())
