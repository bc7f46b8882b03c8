"""Our PyTorchJob and MPIJob: they satisfy the upstream v1.9.4 CRDs (the release we deploy) with
unknown fields rejected, and our small structural CRDs accept them, reject what the API server
would, and fit the limits."""

from __future__ import annotations

import copy
import functools

import jsonschema
import pytest
import yaml

from k8s.addons.training_operator_crds import ADDON, mpijob_crd, pytorchjob_crd
from k8s_walk import ENV_NAMES, closed, embedded_size, ops_objects

from tests.conftest import CONTRACTS_DIR

CONTRACTS = CONTRACTS_DIR / "kubeflow-training-v1.9.4" / "crds"
UPSTREAM_FILES = {"PyTorchJob": "kubeflow.org_pytorchjobs.yaml", "MPIJob": "kubeflow.org_mpijobs.yaml"}
# The kubectl provider's Lambda receives the manifest in its event: 256 KB at most. Stay far below.
LAMBDA_EVENT_LIMIT = 256 * 1024
CRD_BUDGET = 16 * 1024


def _schema(crd: dict) -> dict:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


@functools.lru_cache(maxsize=None)
def upstream(kind: str) -> dict:
    path = CONTRACTS / UPSTREAM_FILES[kind]
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(path.read_text(), Loader=loader)


def upstream_or_skip(kind: str) -> dict:
    if not (CONTRACTS / UPSTREAM_FILES[kind]).exists():
        pytest.skip(f"upstream Kubeflow v1.9.4 CRDs not found at {CONTRACTS}: cannot check {kind}")
    return upstream(kind)


@pytest.fixture(scope="module")
def jobs(environments):
    """(env, object) for every PyTorchJob and MPIJob ops creates in every environment (runs and
    validation; no chart carries one)."""
    out = []
    for name in ENV_NAMES:
        out += [(name, o) for o in ops_objects(environments[name]) if o["kind"] in UPSTREAM_FILES]
    assert {o["kind"] for _, o in out} == set(UPSTREAM_FILES)
    return out


OURS = {"PyTorchJob": pytorchjob_crd(), "MPIJob": mpijob_crd()}


@pytest.mark.parametrize("kind", sorted(UPSTREAM_FILES))
def test_jobs_validate_against_the_upstream_v1_9_4_crd_with_unknown_fields_rejected(jobs, kind):
    validator = jsonschema.Draft7Validator(closed(_schema(upstream_or_skip(kind))))
    checked = 0
    for env, obj in jobs:
        if obj["kind"] == kind:
            errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.path))
            assert not errors, f"{env} {obj['metadata']['name']}: {errors[0].message} at {list(errors[0].path)}"
            checked += 1
    assert checked


@pytest.mark.parametrize("kind", sorted(UPSTREAM_FILES))
def test_jobs_validate_against_our_structural_crd(jobs, kind):
    validator = jsonschema.Draft7Validator(closed(_schema(OURS[kind])))
    for env, obj in jobs:
        if obj["kind"] == kind:
            errors = list(validator.iter_errors(obj))
            assert not errors, f"{env} {obj['metadata']['name']}: {errors[0].message} at {list(errors[0].path)}"


def _pytorchjob(jobs) -> dict:
    return copy.deepcopy(next(o for _, o in jobs if o["kind"] == "PyTorchJob"))


@pytest.mark.parametrize("mutate,reason", [
    (lambda j: j["spec"]["elasticPolicy"].update(rdzvHosts="etcd"), "misspelt field"),
    (lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"].update(restartPolicy="Sometimes"), "bad enum"),
    (lambda j: j["spec"]["elasticPolicy"].update(minReplicas=0), "below minimum"),
    (lambda j: j["spec"]["elasticPolicy"].update(rdzvPort="2379"), "wrong type"),
    (lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].update(containers=[]), "no container"),
    (lambda j: j["spec"].pop("pytorchReplicaSpecs"), "missing replica specs"),
])
def test_our_crd_rejects_malformed_jobs(jobs, mutate, reason):
    job = _pytorchjob(jobs)
    mutate(job)
    assert list(jsonschema.Draft7Validator(closed(_schema(OURS["PyTorchJob"]))).iter_errors(job)), reason


def _structural_problems(schema: dict, path: str = "") -> list[str]:
    """The API server's structural-schema rules that matter here: every node has a type (or is
    int-or-string / preserves unknown fields), and no node both lists properties and maps values."""
    problems = []
    if not (schema.get("type") or schema.get("x-kubernetes-int-or-string")
            or schema.get("x-kubernetes-preserve-unknown-fields")):
        problems.append(f"{path or '/'}: no type")
    if "properties" in schema and isinstance(schema.get("additionalProperties"), dict):
        problems.append(f"{path}: properties and additionalProperties together")
    for name, child in schema.get("properties", {}).items():
        problems += _structural_problems(child, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        problems += _structural_problems(schema["additionalProperties"], f"{path}.*")
    if "items" in schema:
        problems += _structural_problems(schema["items"], f"{path}[]")
    for branch in schema.get("anyOf", []):
        if "properties" in branch or "type" in branch and not schema.get("x-kubernetes-int-or-string"):
            problems.append(f"{path}: anyOf may not declare types except for int-or-string")
    return problems


@pytest.mark.parametrize("kind", sorted(OURS))
def test_our_crds_are_structural(kind):
    assert _structural_problems(_schema(OURS[kind])) == []


@pytest.mark.parametrize("kind", sorted(OURS))
def test_our_crds_fit_far_below_the_inline_limits(kind):
    assert embedded_size(OURS[kind]) <= CRD_BUDGET < LAMBDA_EVENT_LIMIT


@pytest.mark.parametrize("kind", sorted(UPSTREAM_FILES))
def test_upstream_crds_would_not_fit_which_is_why_ours_exist(kind):
    assert embedded_size(upstream_or_skip(kind)) > LAMBDA_EVENT_LIMIT


@pytest.mark.parametrize("kind", sorted(OURS))
def test_our_crd_spec_fields_exist_upstream(kind):
    """No invented fields: everything our schema types at the job level upstream types too."""
    theirs = _schema(upstream_or_skip(kind))["properties"]["spec"]["properties"]
    ours = _schema(OURS[kind])["properties"]["spec"]["properties"]
    assert set(ours) == set(theirs)
    for block in ("elasticPolicy", "runPolicy"):
        if block in ours:
            assert set(ours[block]["properties"]) == set(theirs[block]["properties"]), block


@pytest.mark.parametrize("kind", sorted(OURS))
def test_our_crd_names_and_subresources_match_upstream(kind):
    theirs, ours = upstream_or_skip(kind), OURS[kind]
    assert ours["metadata"]["name"] == theirs["metadata"]["name"]
    assert ours["spec"]["names"] == theirs["spec"]["names"]
    assert ours["spec"]["scope"] == theirs["spec"]["scope"]
    assert (ours["spec"]["versions"][0]["subresources"].keys()
            == theirs["spec"]["versions"][0]["subresources"].keys())


def test_the_crd_add_on_holds_exactly_the_two_job_kinds(dev):
    docs = ADDON.objects(dev, None)
    assert [d["metadata"]["name"] for d in docs] == ["pytorchjobs.kubeflow.org", "mpijobs.kubeflow.org"]
    assert all(d["spec"]["versions"][0]["storage"] for d in docs)
