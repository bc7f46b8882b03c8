"""The second deploy: what a deploy re-applies on the cluster, proved by synthesizing dev twice.

`first` is dev as shipped. `second` is the deploy after it: a trainer source change (a new image)
and FSx grown from 1200 to 2400 GiB. A KubernetesManifest whose properties change is re-applied
with `kubectl apply` (its custom resource gets an Update); one whose properties do not change is
not touched. The contract (stacks/workloads.py, README "What a deploy does to jobs"): no template
holds a PyTorchJob, MPIJob or Job, so no deploy can suspend, re-template or delete a run, and the
only manifest the second deploy re-applies is the FSx volume's (its capacity; the claim's request
is a constant). `third` changes only the Training Operator's chart: its readiness gate must run
again, which for a custom resource means a new logical id.

`day_two` and `moved` are the edits a user makes to cdk.json while runs go on; the deploy of each
over `first` is judged by what CloudFormation would replace: a resource is replaced when a property
its type creates once changes, or points at a replaced resource (the createOnlyProperties of each
type's registry schema, as cfn-lint ships them; the "Update requires: Replacement" lines of the
CloudFormation resource reference, e.g. AWS::FSx::FileSystem SubnetIds,
https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-fsx-filesystem.html,
and AWS::EKS::Nodegroup Subnets and InstanceTypes,
https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-eks-nodegroup.html).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from synth_helpers import ADDON_PINS, FINAL_BACKUP, REPO_ROOT, raw_environment, synth, synthesize

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


def _day_two_raw() -> dict:
    """dev after the edits of a working week: a faster file system (FSx changes PERSISTENT_2
    throughput in place: managing-throughput-capacity.html), the p5 group moved to p5en, a new GPU
    group, bigger CPU sizes, the next Kubernetes version, a pinned add-on, one more data source."""
    raw = raw_environment("dev")
    raw["fsx"] = {**raw["fsx"], "throughputPerTiB": 500}
    [p5] = [g for g in raw["gpuNodegroups"] if g["name"] == "p5"]
    p5["instanceType"] = "p5en.48xlarge"
    raw["gpuNodegroups"].append({"name": "p5-more", "instanceType": "p5.48xlarge", "minSize": 0, "maxSize": 2,
                                 "desiredSize": 0})
    raw["cpuNodegroups"][0].update(maxSize=6, desiredSize=3)
    raw["kubernetesVersion"] = "1.36"
    raw["addonVersions"] = {"vpc-cni": ADDON_PINS["vpc-cni"]}
    raw["dataSources"] = {**raw["dataSources"], "more": {"s3Uri": "s3://example-datasets-111111111111/more/"}}
    return raw


@pytest.fixture(scope="module")
def day_two():
    return synthesize("dev", _day_two_raw())


@pytest.fixture(scope="module")
def moved():
    """dev with its training moved to another zone (where a reservation or capacity block is)."""
    raw = raw_environment("dev")
    assert raw["trainingAvailabilityZone"] != "us-west-2c"
    raw["trainingAvailabilityZone"] = "us-west-2c"
    return synthesize("dev", raw)


@pytest.fixture(scope="module")
def restored():
    """dev with its file system created from a backup."""
    raw = raw_environment("dev")
    raw["fsx"] = {**raw["fsx"], "backupId": FINAL_BACKUP}
    return synthesize("dev", raw)


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


def _create_only(type_: str) -> list[list[str]]:
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    if type_.startswith("Custom::"):
        return []  # a custom resource's handler updates in place; the manifest tests above judge those
    schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-west-2", type_).schema
    return [p.split("/")[2:] for p in schema.get("createOnlyProperties", [])]


def _at(properties: dict, path: list[str]):
    for key in path:
        properties = properties.get(key) if isinstance(properties, dict) else None
    return properties


def _targets(value) -> set[str]:
    """The logical ids, and the export names, a property value refers to."""
    if isinstance(value, list):
        return set().union(*map(_targets, value)) if value else set()
    if not isinstance(value, dict):
        return set()
    found = set().union(*map(_targets, value.values())) if value else set()
    if isinstance(value.get("Ref"), str):
        found.add(value["Ref"])
    if "Fn::GetAtt" in value:
        found.add(value["Fn::GetAtt"][0])
    if isinstance(value.get("Fn::ImportValue"), str):
        found.add("export:" + value["Fn::ImportValue"])
    return found


def replaced(before, after) -> dict[str, str]:
    """"stack/logical id" -> why, for each resource a deploy of `after` over `before` replaces or
    deletes (a logical id that goes is a delete; CloudFormation creates a replacement first)."""
    old, new = templates(before), templates(after)
    exported = {f"export:{o['Export']['Name']}": (stack, next(iter(_targets(o["Value"])), None))
                for stack, t in new.items() for o in t.get("Outputs", {}).values() if "Export" in o}
    found: dict[str, str] = {}
    for stack in STACKS:
        was, now = old[stack]["Resources"], new[stack]["Resources"]
        found.update({f"{stack}/{lid}": "deleted" for lid in set(was) - set(now)})
        for lid in set(was) & set(now):
            for path in _create_only(now[lid]["Type"]):
                if _at(was[lid].get("Properties", {}), path) != _at(now[lid].get("Properties", {}), path):
                    found[f"{stack}/{lid}"] = "/".join(path)
    grew = True
    while grew:  # a new physical id reaches every create-only property that refers to it
        grew = False
        for stack in STACKS:
            was, now = old[stack]["Resources"], new[stack]["Resources"]
            for lid in set(was) & set(now):
                if f"{stack}/{lid}" in found:
                    continue
                for path in _create_only(now[lid]["Type"]):
                    refs = {"/".join(exported.get(t, (stack, t))) for t in _targets(_at(now[lid].get("Properties", {}), path))}
                    if refs & {k for k, why in found.items() if why != "deleted"}:
                        found[f"{stack}/{lid}"] = "/".join(path)
                        grew = True
                        break
    return found


def test_a_working_weeks_edits_replace_and_delete_nothing(first, day_two):
    """A new instance type goes into the group's launch template (a rolling update, README "What
    replaces GPU nodes"); sizes, throughput, versions, add-ons and data sources update in place or
    add resources. No file system, repository, cluster or node group is replaced."""
    assert day_two.config.fsx.throughput_per_tib == 500 and day_two.config.kubernetes_version == "1.36"
    assert replaced(first, day_two) == {}


def test_moving_the_training_zone_replaces_the_file_system_and_no_environment_deletes_the_old_one(first, moved):
    """FSx SubnetIds and a node group's Subnets are create-only: the move gives a new, empty file
    system and new training groups. CloudFormation deletes the replaced resource unless its
    UpdateReplacePolicy is Retain, so the old file system, every checkpoint and dataset on it,
    would go with a dev (`removalPolicy: destroy`) deploy; it must stay in every environment."""
    gone = replaced(first, moved)
    stage = first.stage
    fsx = f"storage/{stage.storage.get_logical_id(stage.storage.file_system.node.default_child)}"
    assert gone.pop(fsx) == "SubnetIds"
    groups = {f"cluster/{stage.cluster.get_logical_id(g.node.default_child)}"
              for name, g in stage.cluster.nodegroups.items() if name != "system"}
    assert gone == {g: "Subnets" for g in groups}
    for env in (moved, synth("prod")):
        [fs] = [r for r in templates(env)["storage"]["Resources"].values() if r["Type"] == "AWS::FSx::FileSystem"]
        assert fs["UpdateReplacePolicy"] == "Retain", env.config.name


def test_adding_or_removing_fsx_backup_id_replaces_the_file_system(first, restored):
    """BackupId is create-only (cfn-lint's schema of AWS::FSx::FileSystem; "Update requires:
    Replacement", aws-resource-fsx-filesystem.html): once an environment is deployed, adding
    fsx.backupId, changing it or removing it gives a new file system, the old one kept outside the
    stack. Nothing in the template can refuse that; preflight's FSx replacement row does."""
    stage = first.stage
    fsx = f"storage/{stage.storage.get_logical_id(stage.storage.file_system.node.default_child)}"
    assert replaced(first, restored) == {fsx: "BackupId"}
    assert replaced(restored, first) == {fsx: "BackupId"}
