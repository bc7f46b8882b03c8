"""The second deploy: what a deploy re-applies on the cluster, proved by synthesizing dev twice.

`first` is dev as shipped. `second` is the deploy after it: a trainer source change (a new image)
and FSx grown from 1200 to 2400 GiB. A KubernetesManifest whose properties change is re-applied
with `kubectl apply` (its custom resource gets an Update); one whose properties do not change is
not touched. The contract (stacks/workloads.py, README "What a deploy does to jobs"): no template
holds a PyTorchJob, MPIJob or Job, so no deploy can suspend, re-template or delete a run, and the
only manifest the second deploy re-applies is the FSx volume's (its capacity; the claim's request
is a constant). `third` changes only the Training Operator's chart: its readiness gate must run
again, which for a custom resource means a new logical id.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from synth_helpers import REPO_ROOT, raw_environment, synth, synthesize

MANIFEST_TYPE = "Custom::AWSCDK-EKS-KubernetesResource"
OBJECT_VALUE_TYPE = "Custom::AWSCDK-EKS-KubernetesObjectValue"
RUN_KINDS = {"PyTorchJob", "MPIJob", "Job", "CronJob", "Pod"}


def _trainer_source_changed(tmp: Path) -> Path:
    """A copy of what the trainer images are built from (stacks/registry.py DOCKER_CONTEXT_EXCLUDE),
    with one trainer file changed, as a commit that touches only the trainer would."""
    for name in ("trainer", "config"):
        shutil.copytree(REPO_ROOT / name, tmp / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    ddp = tmp / "trainer" / "ddp.py"
    ddp.write_text(ddp.read_text() + "\n# a trainer change\n")
    return tmp


@pytest.fixture(scope="module")
def first():
    return synth("dev")


@pytest.fixture(scope="module")
def second(tmp_path_factory):
    import stacks.registry

    raw = raw_environment("dev")
    assert raw["fsx"]["storageCapacityGiB"] == 1200
    raw["fsx"] = {**raw["fsx"], "storageCapacityGiB": 2400}
    patch = pytest.MonkeyPatch()
    patch.setattr(stacks.registry, "REPO_ROOT", _trainer_source_changed(tmp_path_factory.mktemp("source")))
    try:
        return synthesize("dev", raw)
    finally:
        patch.undo()


@pytest.fixture(scope="module")
def third():
    import k8s.pods.training_operator

    patch = pytest.MonkeyPatch()
    patch.setattr(k8s.pods.training_operator, "REPLICAS", 3)
    try:
        return synthesize("dev", raw_environment("dev"))
    finally:
        patch.undo()


STACKS = ("network", "cluster", "storage", "registry", "workloads", "validation")
_TEMPLATES: dict[int, dict[str, dict]] = {}


def templates(synth) -> dict[str, dict]:
    from aws_cdk.assertions import Template

    if id(synth) not in _TEMPLATES:
        _TEMPLATES[id(synth)] = {n: Template.from_stack(getattr(synth.stage, n)).to_json() for n in STACKS}
    return _TEMPLATES[id(synth)]


def resources_of(synth, type_: str) -> dict[str, dict]:
    """"stack/logical id" -> resource, over every stack of the stage."""
    return {f"{stack}/{logical}": resource for stack, template in templates(synth).items()
            for logical, resource in template["Resources"].items() if resource["Type"] == type_}


def kinds(properties: dict) -> set[str]:
    manifest = properties["Manifest"]
    text = manifest if isinstance(manifest, str) else "".join(
        p if isinstance(p, str) else "<token>" for p in manifest["Fn::Join"][1])
    return {o.get("kind") for o in json.loads(text)}


def test_the_second_synth_really_carries_new_trainer_code_and_a_bigger_file_system(first, second):
    """Otherwise the comparison below would prove nothing."""
    for variant in ("cpu", "gpu"):
        assert (first.stage.registry.trainer_images[variant].asset_hash
                != second.stage.registry.trainer_images[variant].asset_hash)
    assert (first.config.fsx.storage_capacity_gib, second.config.fsx.storage_capacity_gib) == (1200, 2400)


def test_no_deploy_applies_a_run_a_validation_job_or_any_job(first, second):
    for synth in (first, second):
        manifests = resources_of(synth, MANIFEST_TYPE)
        assert manifests
        for logical, resource in manifests.items():
            assert not kinds(resource["Properties"]) & RUN_KINDS, logical


def test_a_trainer_change_and_fsx_growth_re_apply_only_the_fsx_volume(first, second):
    before, after = resources_of(first, MANIFEST_TYPE), resources_of(second, MANIFEST_TYPE)
    assert set(before) == set(after), "no manifest added or removed (removing one deletes its objects)"
    changed = sorted(k for k in before if json.dumps(before[k], sort_keys=True) != json.dumps(after[k], sort_keys=True))
    fsx = first.stage.workloads.get_logical_id(first.stage.workloads.manifests["fsx-storage"][0].node.default_child)
    assert changed == [f"workloads/{fsx}"]
    text = json.dumps(after[f"workloads/{fsx}"])
    assert '\\"storage\\":\\"2400Gi\\"' in text and '\\"storage\\":\\"1200Gi\\"' in text, \
        "the volume grows; the bound claim's request stays"
    assert kinds(after[f"workloads/{fsx}"]["Properties"]) == {"PersistentVolume", "PersistentVolumeClaim"}


# The logical ids the release before this one (main at 1b6771f) gave dev's per-preset PyTorchJob
# manifests and its validation manifest, read from that release's synthesized Workloads template.
PREVIOUS_JOB_MANIFESTS = {
    "ClusterValidation77ED40AF", "TrainingJobsCpuDdp8F386C42", "TrainingJobsLlmTiny2E58B95E",
    "TrainingJobsLlmTinyMoe668F9D48", "TrainingJobsLlama38bFsdp00268563", "TrainingJobsLlama321bFsdp5608969A",
    "TrainingJobsLlama323bFsdpE153C3EC", "TrainingJobsLlama27bFsdp85244FC1", "TrainingJobsLlama213bFsdpA007012F",
    "TrainingJobsMixtral8x7bFsdp58610721", "TrainingJobsMathstral7bFsdpBD12600A",
    "TrainingJobsLlama27bFinetuneBAEA9EE0", "TrainingJobsVisionTinyEAF4ADC6", "TrainingJobsResnet50Imagenet8719AF8E",
    "TrainingJobsEfficientnetb7Imagenet5469FEA8",
}


def test_earlier_releases_job_manifests_stay_as_stand_ins_that_delete_nothing(first):
    """Removing a manifest from the template makes its handler delete the objects it last applied
    (a running PyTorchJob among them): each id the previous release used stays, now applying a
    ConfigMap without pruning, so the upgrade deploy deletes no job either."""
    workloads = templates(first)["workloads"]["Resources"]
    retired = {first.stage.workloads.get_logical_id(m.node.default_child) for m in first.stage.workloads.retired}
    assert retired == PREVIOUS_JOB_MANIFESTS
    for logical in retired:
        props = workloads[logical]["Properties"]
        assert kinds(props) == {"ConfigMap"} and "PruneLabel" not in props
        assert workloads[logical].get("DeletionPolicy", "Delete") == "Delete", "a later release may drop them"


def test_the_operator_readiness_gate_runs_again_exactly_when_the_operator_changes(first, second, third):
    """A custom resource whose properties are unchanged is not invoked again; a new logical id is a
    Create, which polls. The id carries a digest of the operator's chart."""
    def waiters(synth):
        return resources_of(synth, OBJECT_VALUE_TYPE)

    [a], [b], [c] = (list(waiters(s)) for s in (first, second, third))
    assert a == b, "a trainer change and FSx growth do not re-run the operator's gate"
    assert c != a, "a changed operator chart is waited for again"
    assert waiters(third)[c]["Properties"]["ObjectName"] == "training-operator"
