"""The project-written Kubeflow Trainer v2.3.0 CRDs (k8s/addons/trainer_v2_crds.py) against upstream's
(../shared/contracts/kubeflow-trainer-v2.3.0/base-crds-*.yaml): small enough to deliver, every
declared field upstream's, and the TrainingRuntime and TrainJob `ops` creates for a run accepted and
kept whole (a structural schema prunes what it does not declare)."""

from __future__ import annotations

import copy
import dataclasses
import json

import jsonschema
import pytest

from conformance import contract, yaml_docs
from crd_schema import narrower_than_upstream, pruned
from k8s.addons.trainer_v2_crds import ADDON, VERSION, trainer_crds

EVENT_LIMIT = 256 * 1024  # the kubectl Lambda's event (aws-cdk issues 19165, 17362)
TRAINER = "kubeflow-trainer-v2.3.0"


def upstream_crd(plural: str) -> dict:
    [crd] = yaml_docs(contract(TRAINER, f"base-crds-trainer.kubeflow.org_{plural}.yaml"))
    return crd


def schema(crd: dict) -> dict:
    [version] = crd["spec"]["versions"]
    assert version["name"] == VERSION
    return version["schema"]["openAPIV3Schema"]


def ours(plural: str) -> dict:
    return next(c for c in trainer_crds() if c["spec"]["names"]["plural"] == plural)


@pytest.fixture(scope="module")
def run(dev) -> tuple[dict, dict]:
    from k8s.pods.trainjob import render_trainjob_run

    return render_trainjob_run(dataclasses.replace(dev, training_api="v2"), "cpu-ddp", image="registry.example/t:1")


def test_each_crd_fits_the_kubectl_lambdas_event():
    for crd in trainer_crds():
        assert len(json.dumps(crd).encode()) < EVENT_LIMIT, crd["metadata"]["name"]


def test_the_crds_are_only_for_trainer_v2_environments(dev):
    assert not ADDON.applies_to(dev)
    assert ADDON.applies_to(dataclasses.replace(dev, training_api="v2"))


@pytest.mark.parametrize("plural", ["clustertrainingruntimes", "trainingruntimes", "trainjobs"])
def test_names_scope_and_subresources_are_upstreams(plural):
    mine, upstream = ours(plural), upstream_crd(plural)
    assert mine["metadata"]["name"] == upstream["metadata"]["name"]
    for key in ("group", "names", "scope"):
        assert mine["spec"][key] == upstream["spec"][key], key
    [a], [b] = mine["spec"]["versions"], upstream["spec"]["versions"]
    assert (a["served"], a["storage"], a.get("subresources")) == (b["served"], b["storage"], b.get("subresources"))


@pytest.mark.parametrize("plural", ["clustertrainingruntimes", "trainingruntimes", "trainjobs"])
def test_every_declared_field_is_upstreams_with_upstreams_types_defaults_and_rules(plural):
    problems = narrower_than_upstream(schema(ours(plural)), schema(upstream_crd(plural)))
    assert not problems, "\n".join(problems)


def test_the_runtime_and_trainjob_of_a_run_are_accepted_and_kept_whole_by_both_schemas(run):
    runtime, trainjob = run
    for obj, plural in ((runtime, "trainingruntimes"), (trainjob, "trainjobs")):
        for candidate in (schema(ours(plural)), schema(upstream_crd(plural))):
            jsonschema.validate(obj, candidate)
        assert pruned(schema(ours(plural)), obj) == obj, plural


def test_a_mistyped_field_is_refused_and_a_misspelt_one_is_dropped(run):
    runtime, trainjob = copy.deepcopy(run[0]), copy.deepcopy(run[1])
    # CEL rules are not evaluated here; the one-policy rule is upstream's, compared above.
    trainjob["spec"]["trainer"]["numNodes"] = "two"
    with pytest.raises(jsonschema.ValidationError, match="two"):
        jsonschema.validate(trainjob, schema(ours("trainjobs")))
    runtime["spec"]["template"]["spec"]["successPolicy"]["operator"] = "Most"
    with pytest.raises(jsonschema.ValidationError, match="Most"):
        jsonschema.validate(runtime, schema(ours("trainingruntimes")))
    trainjob = copy.deepcopy(run[1])
    trainjob["spec"]["trainer"]["numNode"] = 2
    assert "numNode" not in pruned(schema(ours("trainjobs")), trainjob)["spec"]["trainer"]
