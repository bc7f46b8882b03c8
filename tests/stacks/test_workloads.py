"""Workloads stack: the k8s charts reach CloudFormation as one manifest each, in dependency order,
carrying the same objects the dist sink writes, far below the kubectl provider's limits."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Template

from synth_helpers import synth

MANIFEST_TYPE = "Custom::AWSCDK-EKS-KubernetesResource"
PRUNE_PREFIX = "aws.cdk.eks/prune-"
TOKEN = "<token>"
LAMBDA_EVENT_LIMIT = 256 * 1024
MANIFEST_BUDGET = 32 * 1024  # per chart: an eighth of the event limit


@pytest.fixture(scope="module")
def dev():
    return synth("dev")


@pytest.fixture(scope="module")
def template(dev):
    return Template.from_stack(dev.stage.workloads).to_json()


def chart_manifests(synthesized, template) -> dict[str, list[dict]]:
    """chart name -> CloudFormation resources of its KubernetesManifests, in object order."""
    stack = synthesized.stage.workloads
    return {name: [template["Resources"][stack.get_logical_id(m.node.default_child)] for m in ms]
            for name, ms in stack.manifests.items()}


@pytest.fixture(scope="module")
def manifests(dev, template):
    return chart_manifests(dev, template)


def objects(resources: list[dict]) -> list[dict]:
    return [o for r in resources for o in decode(r["Properties"]["Manifest"])]


def depends_on(resources: list[dict]) -> set[str]:
    """What every one of a chart's manifests waits for."""
    return set.intersection(*(set(r.get("DependsOn", [])) for r in resources))


def decode(manifest_property) -> list[dict]:
    """The Manifest property as objects; CloudFormation intrinsics inside strings become TOKEN."""
    if isinstance(manifest_property, str):
        return json.loads(manifest_property)
    parts = manifest_property["Fn::Join"][1]
    return json.loads("".join(p if isinstance(p, str) else TOKEN for p in parts))


def without_prune_labels(obj: dict) -> dict:
    obj = json.loads(json.dumps(obj))
    labels = obj["metadata"].get("labels", {})
    for label in [k for k in labels if k.startswith(PRUNE_PREFIX)]:
        del labels[label]
    return obj


def test_one_manifest_per_chart_all_in_the_workloads_stack(dev, template, manifests):
    assert list(manifests) == [e.name for e in dev.stage.workloads.charts.entries]
    stack = dev.stage.workloads
    drain_rbac = stack.get_logical_id(stack.training_drain.rbac.node.default_child)  # the drain's own RBAC
    ours = [r for k, r in template["Resources"].items() if r["Type"] == MANIFEST_TYPE and k != drain_rbac]
    # Each chart, and the stand-ins for earlier releases' job manifests (tests/stacks/test_second_deploy.py).
    assert len(ours) == len(manifests) + len(stack.retired)
    assert all(len(rs) == 1 for rs in manifests.values())
    cluster_template = dev.template_json("cluster")
    for resource in cluster_template["Resources"].values():
        if resource["Type"] == MANIFEST_TYPE:
            kinds = {o.get("kind") for o in decode(resource["Properties"]["Manifest"])}
            assert not kinds & {"PyTorchJob", "CustomResourceDefinition", "DaemonSet"}, \
                "k8s charts belong to the Workloads stack"


def test_manifests_depend_on_what_they_use(dev, manifests):
    stack = dev.stage.workloads
    logical = {name: {stack.get_logical_id(m.node.default_child) for m in ms} for name, ms in stack.manifests.items()}
    for entry in stack.charts.entries:
        depends = depends_on(manifests[entry.name])
        assert set().union(*(logical[d] for d in entry.depends_on)) <= depends, entry.name
    assert logical["namespaces"] | logical["priority-classes"] <= depends_on(manifests["training-operator"])
    assert logical["priority-classes"] <= depends_on(manifests["etcd"])


def test_manifests_carry_the_same_objects_the_dist_sink_writes(dev, manifests):
    for entry in dev.stage.workloads.charts.entries:
        applied = [without_prune_labels(o) for o in objects(manifests[entry.name])]
        written = entry.chart.to_json()
        assert [(o["kind"], o["metadata"]["name"]) for o in applied] == \
               [(o["kind"], o["metadata"]["name"]) for o in written], entry.name
        for a, w in zip(applied, written):
            if TOKEN not in json.dumps(a):
                assert a == w, f"{entry.name}: {a['kind']}/{a['metadata']['name']}"


def test_fsx_values_come_from_the_storage_stack(dev, manifests):
    pv = next(o for o in objects(manifests["fsx-storage"]) if o["kind"] == "PersistentVolume")
    assert pv["spec"]["csi"]["volumeHandle"] == TOKEN
    [storage] = manifests["fsx-storage"]
    parts = storage["Properties"]["Manifest"]["Fn::Join"][1]
    refs = {dev.imported_ref(p) for p in parts if isinstance(p, dict)}
    assert dev.logical_id("storage", dev.stage.storage.file_system) in refs


def test_inline_manifests_stay_far_below_the_kubectl_provider_limits(template, manifests):
    for name, resources in manifests.items():
        for resource in resources:
            assert len(json.dumps(resource["Properties"]["Manifest"])) <= MANIFEST_BUDGET < LAMBDA_EVENT_LIMIT, name
    assert len(json.dumps(template)) < 1024 * 1024 // 4, "a quarter of CloudFormation's template limit"


def test_dist_placeholder_hints_name_the_real_stacks_and_outputs(dev):
    from stacks.workloads import workload_values

    values = workload_values(dev.stage.storage, dev.stage.registry)
    assert dev.stage.storage.stack_name in values.fills["FSX_FILE_SYSTEM_ID"]
    assert "OutputKey=='FileSystemId'" in values.fills["FSX_FILE_SYSTEM_ID"]
    for variant in dev.stage.registry.trainer_images:
        fill = values.fills[f"TRAINER_IMAGE_{variant.upper()}"]
        assert dev.stage.registry.stack_name in fill and f"OutputKey=='TrainerImageUri{variant.capitalize()}'" in fill
    # Every token the charts carry has a named placeholder, so the dist sink never fails.
    assert {p.name for p in values.dist_substitutions().values()} == {
        "FSX_FILE_SYSTEM_ID", "FSX_DNS_NAME", "FSX_MOUNT_NAME", "TRAINER_IMAGE_CPU", "TRAINER_IMAGE_GPU"}
    kubectl = dev.stage.workloads.values
    assert {p.name for p in kubectl.dist_substitutions().values()} >= {"KUBECTL_DELIVERY_IMAGE"}
    assert kubectl.fills["KUBECTL_DELIVERY_IMAGE"].endswith(f":{dev.stage.workloads.kubectl_delivery_image.image_tag}")


def test_the_mpi_launcher_gets_a_kubectl_within_one_minor_of_the_cluster(dev, manifests):
    """Kubernetes version skew policy (https://kubernetes.io/releases/version-skew-policy/#kubectl).
    The operator names the kubectl-delivery image this stack builds; its build arguments are the
    kubectl config/eks_versions.py picks for the environment's Kubernetes version."""
    from config.eks_versions import KUBECTL_BUILDS

    asset = dev.stage.workloads.kubectl_delivery_image
    [manifest] = list(dev.outdir.glob("**/*Workloads*.assets.json"))
    [image] = [i for k, i in json.loads(manifest.read_text())["dockerImages"].items() if k == asset.asset_hash]
    args = image["source"]["dockerBuildArgs"]
    cluster_minor = int(dev.config.kubernetes_version.split(".")[1])
    assert abs(int(args["KUBECTL_VERSION"].split(".")[1]) - cluster_minor) <= 1
    assert KUBECTL_BUILDS[args["KUBECTL_VERSION"]] == args["KUBECTL_SHA256"]
    assert image["source"]["platform"] == "linux/amd64"
    [operator] = manifests["training-operator"]
    parts = operator["Properties"]["Manifest"]["Fn::Join"][1]
    text = "".join(p if isinstance(p, str) else json.dumps(p) for p in parts)
    assert "--mpi-kubectl-delivery-image=" in text and f":{asset.image_tag}" in text


def test_crds_namespaces_and_storage_outlive_the_stack_only_where_data_is_retained(dev, template, manifests):
    import aws_cdk as cdk
    from synth_helpers import environment

    from stacks.workloads import KEPT_WHEN_RETAINED, removal_policy_for

    assert all(r.get("DeletionPolicy", "Delete") == "Delete" for rs in manifests.values() for r in rs), "dev destroys"
    prod = environment("prod")
    assert prod.retain
    for name in manifests:
        expected = cdk.RemovalPolicy.RETAIN if name in KEPT_WHEN_RETAINED else cdk.RemovalPolicy.DESTROY
        assert removal_policy_for(prod, name) == expected


OBJECT_VALUE_TYPE = "Custom::AWSCDK-EKS-KubernetesObjectValue"


def test_a_deploy_that_changes_the_operator_waits_for_its_rollout(dev, template, manifests):
    """The webhook fails closed (failurePolicy Fail) and `ops` creates jobs right after a deploy:
    the deploy waits on a KubernetesObjectValue that yields output only once the operator's rollout
    is complete (the Deployment's Progressing reason NewReplicaSetAvailable)."""
    stack = dev.stage.workloads
    [(logical, waiter)] = [(k, r) for k, r in template["Resources"].items() if r["Type"] == OBJECT_VALUE_TYPE]
    props = waiter["Properties"]
    assert (props["ObjectType"], props["ObjectName"], props["ObjectNamespace"]) == (
        "deployment", "training-operator", "kubeflow")
    assert props["JsonPath"] == '.status.conditions[?(@.reason=="NewReplicaSetAvailable")].status'
    # Below the kubectl provider's 15-minute Lambda timeout.
    assert 60 <= int(props["TimeoutSeconds"]) < 15 * 60
    [operator] = [stack.get_logical_id(m.node.default_child) for m in stack.manifests["training-operator"]]
    assert operator in waiter["DependsOn"]
    for name in ("namespaces", "training-operator-crds", "etcd", "fsx-storage", "training-operator"):
        assert all(logical not in r.get("DependsOn", []) for r in manifests[name]), name
