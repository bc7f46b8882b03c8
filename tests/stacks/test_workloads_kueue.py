"""A queued environment (the synth variant kueue: trainerv2 with `"queueing": "kueue"` and p5 on DRA)
synthesizes: Kueue's CRDs, controller and queues reach the Workloads stack as one manifest each under
the kubectl provider's limits, in order (CRDs, then the controller, whose rollout every deploy waits
for, then the queues, which Kueue's webhooks admit), and the run kinds' CRDs exist before Kueue
starts, so it sets up the TrainJob integration at once."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Template

from synth_helpers import synth
from test_workloads import MANIFEST_BUDGET, OBJECT_VALUE_TYPE, chart_manifests, objects

KUEUE_CHARTS = ("kueue-crds", "kueue", "kueue-queues")


@pytest.fixture(scope="module")
def stack():
    """(the synthesized stage, the Workloads stack's template, chart name -> its manifests)."""
    queued = synth("kueue")
    template = Template.from_stack(queued.stage.workloads).to_json()
    return queued, template, chart_manifests(queued, template)


def test_the_kueue_charts_are_one_manifest_each_within_the_budget(stack):
    _, template, manifests = stack
    for name in KUEUE_CHARTS:
        [resource] = manifests[name]
        assert len(json.dumps(resource["Properties"]["Manifest"])) <= MANIFEST_BUDGET, name
    assert {o["kind"] for o in objects(manifests["kueue-crds"])} == {"CustomResourceDefinition"}
    assert len(json.dumps(template)) < 1024 * 1024 // 4, "a quarter of CloudFormation's template limit"


def _ids(stack, queued, chart):
    return {stack.get_logical_id(m.node.default_child) for m in queued.stage.workloads.manifests[chart]}


def test_crds_then_controller_then_queues_and_every_deploy_waits_for_the_rollout(stack):
    queued, template, manifests = stack
    stack = queued.stage.workloads
    waiters = {r["Properties"]["ObjectName"]: (k, r) for k, r in template["Resources"].items()
               if r["Type"] == OBJECT_VALUE_TYPE}
    waiter, resource = waiters["kueue-controller-manager"]
    assert resource["Properties"]["ObjectNamespace"] == "kueue-system"
    [controller] = manifests["kueue"]
    [queues] = manifests["kueue-queues"]
    assert _ids(stack, queued, "kueue-crds") <= set(controller["DependsOn"])
    assert _ids(stack, queued, "trainer-v2-crds") <= set(controller["DependsOn"])
    assert waiter in queues["DependsOn"] and _ids(stack, queued, "kueue") <= set(queues["DependsOn"])


def test_the_queued_runs_framework_and_the_claim_mappings_reach_the_cluster(stack):
    import yaml

    manifests = stack[2]
    [config_map] = [o for o in objects(manifests["kueue"]) if o["kind"] == "ConfigMap"]
    settings = yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
    assert settings["integrations"]["frameworks"] == ["trainer.kubeflow.org/trainjob"]
    mapped = {m["name"]: m["deviceClassNames"] for m in settings["resources"]["deviceClassMappings"]}
    assert mapped == {"vpc.amazonaws.com/efa": ["efa.networking.k8s.aws"], "nvidia.com/gpu": ["gpu.nvidia.com"]}
    kinds = [o["kind"] for o in objects(manifests["kueue-queues"])]
    assert kinds == ["ResourceFlavor"] * 3 + ["ClusterQueue", "LocalQueue"]


def test_a_dra_groups_nodes_carry_the_labels_its_drivers_select(stack):
    """The synthesized node group, not only the label function: the DRA drivers' DaemonSets select
    these labels, and the device plugins exclude them."""
    from config.kubernetes import EFA_ALLOCATION_LABEL, GPU_ALLOCATION_LABEL

    queued, _, _ = stack
    cluster = queued.stage.cluster
    resources = queued.template_json("cluster")["Resources"]
    labels = {name: resources[cluster.get_logical_id(group.node.default_child)]["Properties"]["Labels"]
              for name, group in cluster.nodegroups.items()}
    assert labels["p5"][EFA_ALLOCATION_LABEL] == "dra" and labels["p5"][GPU_ALLOCATION_LABEL] == "dra"
    others = [name for name in labels if name != "p5"]
    assert others
    for name in others:
        assert GPU_ALLOCATION_LABEL not in labels[name], name
        assert labels[name].get(EFA_ALLOCATION_LABEL, "devicePlugin") == "devicePlugin", name
