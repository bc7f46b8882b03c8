"""Kueue's queue objects (k8s/pods/kueue_queues.py): valid against the Kueue v0.19.2 CRDs with unknown
fields rejected (../shared/contracts/kueue-v0.19.2/), one flavor per training group carrying its
nodes' labels and taints, and a quota of maxSize x what each node holds."""

from __future__ import annotations

import copy

import jsonschema
import pytest
import yaml

from config import load_environment
from config.kubernetes import TRAINING_ROLE, nodegroup_labels
from k8s.pods.kueue_queues import COVERED, queue_objects
from k8s_walk import raw_environments
from tests.k8s.addons.test_kubeflow_crds import closed

from tests.conftest import CONTRACTS_DIR

KUEUE = CONTRACTS_DIR / "kueue-v0.19.2"
CRDS = {"ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues"}


def kueue_schema(kind: str) -> dict:
    path = KUEUE / f"components-crd-bases-kueue.x-k8s.io_{CRDS[kind]}.yaml"
    if not path.exists():
        pytest.skip(f"upstream contract {path} not found (../shared/contracts/ is absent): Kueue CRDs not checked")
    crd = yaml.safe_load(path.read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta2"]
    return closed(version["schema"]["openAPIV3Schema"])


@pytest.fixture(scope="module")
def env():
    """dev queued, with p5 on the EFA DRA driver (the quota is the same on both EFA paths)."""
    from dataclasses import replace

    raw = copy.deepcopy(raw_environments()["dev"])
    raw["gpuNodegroups"][1]["efaAllocation"] = "dra"
    return replace(load_environment({"dev": raw}, "dev"), queueing="kueue")


def test_every_queue_object_validates_against_the_kueue_v0_19_2_crd(env):
    objects = queue_objects(env)
    assert [o["kind"] for o in objects] == ["ResourceFlavor"] * 3 + ["ClusterQueue", "LocalQueue"]
    for obj in objects:
        jsonschema.validate(obj, kueue_schema(obj["kind"]))


def test_a_misspelt_field_is_rejected_so_the_check_can_fail(env):
    flavor = queue_objects(env)[0]
    flavor["spec"]["nodeLabel"] = flavor["spec"].pop("nodeLabels")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(flavor, kueue_schema("ResourceFlavor"))


def test_each_flavor_is_its_groups_node_labels_and_taints(env):
    flavors = {o["metadata"]["name"]: o["spec"] for o in queue_objects(env) if o["kind"] == "ResourceFlavor"}
    assert sorted(flavors) == sorted(g.name for g in env.training_nodegroups)
    for group in env.training_nodegroups:
        labels = nodegroup_labels(group.name, TRAINING_ROLE, gpu=group.instance_type.is_gpu,
                                  efa=group.instance_type.supports_efa, efa_allocation=group.efa_allocation)
        assert flavors[group.name]["nodeLabels"].items() <= labels.items()
        taints = flavors[group.name].get("nodeTaints", [])
        assert taints == ([{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
                          if group.instance_type.is_gpu else [])


def test_the_quota_is_max_size_times_what_each_node_holds(env):
    [queue] = [o for o in queue_objects(env) if o["kind"] == "ClusterQueue"]
    [group_of_resources] = queue["spec"]["resourceGroups"]
    assert group_of_resources["coveredResources"] == list(COVERED)
    quota = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]} for f in group_of_resources["flavors"]}
    # dev: p4d and p5 at maxSize 2, cpu (m5.2xlarge) at maxSize 4.
    assert quota["p5"] == {"cpu": "326", "memory": "3276Gi", "nvidia.com/gpu": "16", "vpc.amazonaws.com/efa": "64",
                           "hugepages-2Mi": "10240Mi"}
    assert quota["p4d"]["nvidia.com/gpu"] == "16" and quota["p4d"]["vpc.amazonaws.com/efa"] == "8"
    assert quota["cpu"]["nvidia.com/gpu"] == "0" and quota["cpu"]["hugepages-2Mi"] == "0Mi"
    # Resources in coveredResources order in every flavor (Kueue's validation).
    for flavor in group_of_resources["flavors"]:
        assert [r["name"] for r in flavor["resources"]] == list(COVERED)
