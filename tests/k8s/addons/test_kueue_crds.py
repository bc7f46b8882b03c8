"""The project-written Kueue v0.19.2 CRDs (k8s/addons/kueue_crds.py) against upstream's
(../shared/contracts/kueue-v0.19.2/components-crd-bases-*.yaml): every kind upstream installs, named
and scoped as upstream names them, small enough to deliver, every declared field upstream's with its
types, enums, defaults and rules, no default of upstream's lost where it matters, and the queue
objects we render accepted and kept whole (a structural schema prunes what it does not declare).
Intended differences: DEVIATIONS."""

from __future__ import annotations

import copy
import dataclasses
import json

import jsonschema
import pytest

from conformance import contract, yaml_docs
from crd_schema import PRESERVE, narrower_than_upstream, pruned
from k8s.addons.kueue_crds import ADDON, VERSION, kueue_crds
from k8s_walk import closed

KUEUE = "kueue-v0.19.2"
EVENT_LIMIT = 256 * 1024  # the kubectl Lambda's event (aws-cdk issues 19165, 17362)
CHART_BUDGET = 32 * 1024  # tests/stacks/test_workloads.py MANIFEST_BUDGET: one manifest per chart
KINDS = ("admissionchecks", "clusterqueues", "cohorts", "localqueues", "multikueueclusters", "multikueueconfigs",
         "provisioningrequestconfigs", "resourceflavors", "topologies", "workloadpriorityclasses", "workloads")

# Upstream defaults below a subtree we keep open (the API server does not apply them), by the path
# they are under, each with why nothing of ours or Kueue's needs the server to.
LOST_DEFAULTS = {
    ("workloads", "/spec/podSets[]/count"):
        "Kueue builds every Workload itself from the job's replicas and always sets count (jobframework)",
    ("workloads", "/spec/podSets[]/template/"):
        "a pod set's template is the job's pod template, defaulted by the Pod API when the pods are created",
    ("multikueueclusters", "/spec/clusterSource/kubeConfig/locationType"):
        "MultiKueue is not configured: we create no MultiKueueCluster",
    ("provisioningrequestconfigs", "/spec/retryStrategy/"):
        "no ProvisioningRequest admission check: we create no ProvisioningRequestConfig (retryStrategy itself "
        "keeps its default)",
}
# What ours leaves out of the whole CRD, each with why.
DEVIATIONS = {
    "served versions": ("only v1beta2 (storage)", "upstream serves v1beta1 too, through its conversion webhook; "
                        "nothing of ours speaks v1beta1 and Kueue v0.20 stops serving it"),
    "additionalPrinterColumns": ("none", "kubectl get prints name and age only; the columns are convenience"),
    "Workload root CEL rules": ("not restated", "they reference the status tree we keep open; Kueue's own "
                                "Workload webhook (vworkload.kb.io, ValidateWorkloadUpdate) checks admission "
                                "and pod-set immutability on every update"),
}


def upstream_crd(plural: str) -> dict:
    [crd] = yaml_docs(contract(KUEUE, f"components-crd-bases-kueue.x-k8s.io_{plural}.yaml"))
    return crd


def version_of(crd: dict, name: str = VERSION) -> dict:
    return next(v for v in crd["spec"]["versions"] if v["name"] == name)


def ours(plural: str) -> dict:
    return next(c for c in kueue_crds() if c["spec"]["names"]["plural"] == plural)


def schema(crd: dict) -> dict:
    return version_of(crd)["schema"]["openAPIV3Schema"]


@pytest.fixture(scope="module")
def queued(dev):
    return dataclasses.replace(dev, queueing="kueue", training_api="v2")


def test_every_kind_upstream_installs_is_installed_named_and_scoped_as_upstream():
    assert sorted(c["spec"]["names"]["plural"] for c in kueue_crds()) == list(KINDS)
    for plural in KINDS:
        mine, theirs = ours(plural), upstream_crd(plural)
        assert mine["metadata"]["name"] == theirs["metadata"]["name"]
        assert (mine["spec"]["group"], mine["spec"]["scope"]) == (theirs["spec"]["group"], theirs["spec"]["scope"])
        assert mine["spec"]["names"] == theirs["spec"]["names"], plural
        upstream_version = version_of(theirs)
        assert upstream_version["storage"] is True
        [version] = mine["spec"]["versions"]
        assert (version["name"], version["served"], version["storage"]) == (VERSION, True, True)
        assert bool(version.get("subresources", {}).get("status") is not None) == \
            bool(upstream_version.get("subresources", {}).get("status") is not None), plural


@pytest.mark.parametrize("plural", KINDS)
def test_every_declared_field_is_upstreams_with_upstreams_types_defaults_and_rules(plural):
    problems = narrower_than_upstream(schema(ours(plural)), schema(upstream_crd(plural)))
    assert not problems, "\n".join(problems)


def _defaults(node: dict, path: str = ""):
    if not isinstance(node, dict):
        return
    if "default" in node and path:
        yield path, node
    for name, child in node.get("properties", {}).items():
        yield from _defaults(child, f"{path}/{name}")
    if "items" in node:
        yield from _defaults(node["items"], f"{path}[]")


def _declared(node: dict, path: str) -> dict | None:
    """Our schema node at `path`, or None where the path falls below an open subtree."""
    for part in [p for p in path.replace("[]", "/[]").split("/") if p]:
        if part == "[]":
            node = node.get("items")
        elif node.get(PRESERVE) and part not in node.get("properties", {}):
            return None
        else:
            node = node.get("properties", {}).get(part)
        if node is None:
            return None
    return node


def lost_defaults() -> dict[tuple[str, str], object]:
    lost = {}
    for plural in KINDS:
        mine = schema(ours(plural))
        for path, node in _defaults(schema(upstream_crd(plural))):
            if path.startswith("/status"):
                continue  # written by Kueue, never defaulted by the server for it
            declared = _declared(mine, path)
            if declared is None or declared.get("default") != node["default"]:
                lost[(plural, path)] = node["default"]
    return lost


def test_no_upstream_default_is_lost_but_the_declared_ones():
    lost = lost_defaults()
    undeclared = [key for key in lost if not any(key[0] == kind and key[1].startswith(prefix)
                                                 for kind, prefix in LOST_DEFAULTS)]
    stale = [row for row in LOST_DEFAULTS if not any(k == row[0] and p.startswith(row[1]) for k, p in lost)]
    assert (undeclared, stale) == ([], [])
    assert all(why.strip() for why in [*LOST_DEFAULTS.values(), *(w for _, w in DEVIATIONS.values())])


def test_the_gate_catches_a_narrowed_enum_a_field_upstream_lacks_and_a_lost_default():
    mine = copy.deepcopy(schema(ours("clusterqueues")))
    spec = mine["properties"]["spec"]["properties"]
    spec["queueingStrategy"]["enum"] = ["StrictFIFO"]
    spec["cohort"] = {"type": "string"}  # the v1beta1 name
    problems = narrower_than_upstream(mine, schema(upstream_crd("clusterqueues")))
    assert any("/spec/queueingStrategy: enum" in p for p in problems), problems
    assert any("/spec/cohort: not an upstream field" in p for p in problems), problems
    del spec["preemption"]["properties"]["withinClusterQueue"]["default"]
    assert _declared(mine, "/spec/preemption/withinClusterQueue").get("default") is None


def test_the_crds_fit_one_chart_manifest_and_the_kubectl_lambdas_event():
    crds = kueue_crds()
    assert len(json.dumps(crds).encode()) < CHART_BUDGET
    for crd in crds:
        assert len(json.dumps(crd).encode()) < EVENT_LIMIT


def test_the_crds_are_only_for_queued_environments(dev, queued):
    assert not ADDON.applies_to(dev)
    assert ADDON.applies_to(queued)


def test_our_queue_objects_are_accepted_and_kept_whole_by_both_schemas(queued):
    from k8s.pods.kueue_queues import queue_objects

    plural = {"ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues"}
    for obj in queue_objects(queued):
        mine, theirs = schema(ours(plural[obj["kind"]])), schema(upstream_crd(plural[obj["kind"]]))
        jsonschema.validate(obj, closed(mine))
        jsonschema.validate(obj, closed(theirs))
        assert pruned(mine, obj) == obj, obj["metadata"]["name"]


def test_a_mistyped_queue_field_is_rejected_by_ours(queued):
    from k8s.pods.kueue_queues import cluster_queue

    broken = cluster_queue(queued)
    broken["spec"]["queueingStrategy"] = "FIFO"
    with pytest.raises(jsonschema.ValidationError, match="FIFO"):
        jsonschema.validate(broken, closed(schema(ours("clusterqueues"))))


def _map_key_problems(schema: dict, path: str = "") -> list[str]:
    """A list of type map needs each key field required or defaulted in its items, or the API server
    refuses the CRD; walked wherever our schema declares fields."""
    problems = []
    if schema.get("x-kubernetes-list-type") == "map":
        items = schema["items"]
        for key in schema["x-kubernetes-list-map-keys"]:
            field = items.get("properties", {}).get(key, {})
            if key not in items.get("required", []) and "default" not in field:
                problems.append(f"{path}: map key {key} neither required nor defaulted")
    for name, child in schema.get("properties", {}).items():
        problems += _map_key_problems(child, f"{path}.{name}")
    if "items" in schema:
        problems += _map_key_problems(schema["items"], f"{path}[]")
    return problems


@pytest.mark.parametrize("plural", KINDS)
def test_our_crds_are_structural_and_their_map_lists_have_keys(plural):
    from tests.k8s.addons.test_kubeflow_crds import _structural_problems

    assert _structural_problems(schema(ours(plural))) == []
    assert _map_key_problems(schema(ours(plural))) == []


def test_the_map_key_check_can_fail():
    broken = copy.deepcopy(schema(ours("workloads")))
    del broken["properties"]["spec"]["properties"]["podSets"]["items"]["properties"]["name"]["default"]
    assert _map_key_problems(broken) == [".spec.podSets: map key name neither required nor defaulted"]


def _keyed_lists(node: dict, path: str = ""):
    if not isinstance(node, dict):
        return
    if node.get("x-kubernetes-list-type") == "map":
        yield path, node
    for name, child in node.get("properties", {}).items():
        yield from _keyed_lists(child, f"{path}/{name}")
    if "items" in node:
        yield from _keyed_lists(node["items"], f"{path}[]")


@pytest.mark.parametrize("plural", KINDS)
def test_every_keyed_list_merges_as_upstreams_so_server_side_applies_keep_each_others_entries(plural):
    """Kueue writes status with server-side apply from several field managers; a list our schema
    left open would merge as one atomic value. Spec lists we declare are held to upstream's list type
    by the field-by-field check; those below an open spec field belong to objects we never create."""
    mine = schema(ours(plural))
    checked = 0
    for path, node in _keyed_lists(schema(upstream_crd(plural))):
        if not path.startswith("/status"):
            continue
        declared = _declared(mine, path)
        assert declared is not None, f"{path}: left open, so merged atomically"
        assert (declared.get("x-kubernetes-list-type"), declared.get("x-kubernetes-list-map-keys")) == \
            ("map", node["x-kubernetes-list-map-keys"]), path
        key_defaults = {k: node["items"]["properties"][k].get("default") for k in node["x-kubernetes-list-map-keys"]}
        assert {k: declared["items"]["properties"][k].get("default") for k in key_defaults} == key_defaults, path
        checked += 1
    assert checked or plural not in ("clusterqueues", "localqueues", "workloads", "admissionchecks")


def test_every_kueue_kind_the_managers_role_watches_has_a_crd():
    """A controller-runtime manager whose informer finds no CRD never becomes ready: every
    kueue.x-k8s.io kind the release's manager role may list and watch is installed."""
    [role] = [d for d in yaml_docs(contract(KUEUE, "components-rbac-role.yaml")) if d["kind"] == "ClusterRole"]
    watched = {resource for rule in role["rules"] if "kueue.x-k8s.io" in rule["apiGroups"] and "watch" in rule["verbs"]
               for resource in rule["resources"] if "/" not in resource}
    assert watched == set(KINDS) == {c["spec"]["names"]["plural"] for c in kueue_crds()}
