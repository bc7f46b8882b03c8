"""A switch of trainingApi through CloudFormation (the pipeline's path, where no preflight runs):
the training drain's Update refuses it while runs of the old API exist
(cdk_constructs/teardown_handlers/training_drain.py), and the templates make that refusal come
before the old API's CRDs can go.

Read off the synthesized Workloads templates of dev (v1) and trainerv2 (dev under v2), each
synthesized once per session (synth_helpers). A switch is a stack update from one to the other:
- CloudFormation updates a resource after the resources it depends on, and the drain depends on
  every manifest, so it is updated after every manifest the two templates share.
- It deletes the resources the new template no longer has only after the update succeeded, in
  UPDATE_COMPLETE_CLEANUP_IN_PROGRESS ("CloudFormation is still removing old resources":
  https://repost.aws/knowledge-center/cloudformation-stack-cleanup-stuck; the events of an update:
  https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-updating-stacks-monitor-stack.html).
  A failed update rolls back instead, and they are never deleted.
- A manifest both templates share is applied by the kubectl handler with `kubectl apply --prune
  -l <its label>` and no allow-list (aws-cdk-lib aws-eks-v2 kubectl-handler/apply), which prunes
  only kubectl's default kinds (kubernetes/kubectl pkg/util/prune/prune.go
  defaultNamespacedPruneResources, defaultNonNamespacedPruneResources): no
  CustomResourceDefinition, so dropping a CRD from such a manifest does not delete it.
"""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Template

from synth_helpers import synth

DRAIN_TYPE = "Custom::TrainingDrain"
MANIFEST_TYPE = "Custom::AWSCDK-EKS-KubernetesResource"
# CRDs whose deletion deletes runs with their pods: PyTorchJob under v1; TrainJob, and JobSet
# (every TrainJob runs as one), under v2.
RUN_CRDS = {"v1": {"pytorchjobs.kubeflow.org"}, "v2": {"trainjobs.trainer.kubeflow.org", "jobsets.jobset.x-k8s.io"}}
# kubectl's default prune allow-list (prune.go, cited above): the kinds an apply with --prune deletes.
KUBECTL_DEFAULT_PRUNE_KINDS = {"ConfigMap", "Endpoints", "PersistentVolumeClaim", "Pod", "ReplicationController",
                               "Secret", "Service", "Job", "CronJob", "Ingress", "DaemonSet", "Deployment",
                               "ReplicaSet", "StatefulSet", "Namespace", "PersistentVolume"}


class Workloads:
    """One environment's Workloads template, with each chart's logical id and objects."""

    def __init__(self, variant: str):
        s = synth(variant)
        self.api = s.config.training_api
        stack = s.stage.workloads
        self.resources = Template.from_stack(stack).to_json()["Resources"]
        self.charts = {stack.get_logical_id(m.node.default_child): stack.charts.entry(name).chart.to_json()
                       for name, (m,) in stack.manifests.items()}
        [(self.drain_id, self.drain)] = [(k, r) for k, r in self.resources.items() if r["Type"] == DRAIN_TYPE]


@pytest.fixture(scope="module")
def v1():
    return Workloads("dev")


@pytest.fixture(scope="module")
def v2():
    return Workloads("trainerv2")


def crds(objects: list[dict]) -> set[str]:
    return {o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition"}


def test_only_a_v2_environments_drain_carries_its_training_api(v1, v2):
    """A v1 environment's drain is as it was before the property existed (so no v1 deploy updates
    it); the handler reads the absence as v1."""
    assert (v1.api, v2.api) == ("v1", "v2")
    assert set(v1.drain["Properties"]) == {"ServiceToken", "ClusterName", "Endpoint", "CertificateAuthority",
                                           "Namespace", "ClaimName"}
    assert v2.drain["Properties"]["TrainingApi"] == "v2"
    # The stage's name is in the imports' names; a switch keeps it.
    others = json.dumps({k: v for k, v in v2.drain["Properties"].items() if k != "TrainingApi"})
    assert json.loads(others.replace("trainerv2-", "dev-")) == v1.drain["Properties"]


def test_a_switch_updates_the_drain_in_place(v1, v2):
    """The same logical id in both templates: a switch is an Update of the drain (the check). A new
    id would create a second drain and delete the old one at cleanup, which drains every run."""
    assert v1.drain_id == v2.drain_id


@pytest.mark.parametrize("direction", ["v1->v2", "v2->v1"])
def test_the_old_apis_run_crds_go_only_after_the_drains_update_succeeded(v1, v2, direction):
    old, new = (v1, v2) if direction == "v1->v2" else (v2, v1)
    gone_at_cleanup, kept = set(), set()
    for logical_id, objects in old.charts.items():
        held = crds(objects) & RUN_CRDS[old.api]
        if not held:
            continue
        if logical_id not in new.charts:
            gone_at_cleanup |= held  # deleted after the update, i.e. after the drain's check
            continue
        # Shared: updated before the drain. It must not delete the CRD: still in it, or not prunable.
        assert logical_id in old.drain["DependsOn"] and logical_id in new.drain["DependsOn"]
        assert "CustomResourceDefinition" not in KUBECTL_DEFAULT_PRUNE_KINDS
        kept |= held
    assert gone_at_cleanup | kept == RUN_CRDS[old.api], "every run CRD of the old API is accounted for"
    if direction == "v2->v1":
        # The CRDs' manifests (trainer-v2-crds, jobset-crd) are not in a v1 template: deleted at cleanup.
        assert gone_at_cleanup == RUN_CRDS["v2"]
    else:
        # training-operator-crds stays for the MPIJob; the PyTorchJob CRD leaves its manifest unpruned.
        assert kept == RUN_CRDS["v1"]


def test_the_drains_cluster_role_is_in_its_rbac_manifest_in_both_templates(v1, v2):
    """The Update runs with the new template's RBAC (the drain depends on it), and must list the
    old API's runs: each template's RBAC allows listing both APIs' runs."""
    from cdk_constructs.training_drain import CLUSTER_RULES

    for env in (v1, v2):
        [rbac] = [r for k, r in env.resources.items() if r["Type"] == MANIFEST_TYPE and k.startswith("TrainingDrainRbac")]
        objects = json.loads(rbac["Properties"]["Manifest"])
        [cluster_role] = [o for o in objects if o["kind"] == "ClusterRole"]
        assert cluster_role["rules"] == list(CLUSTER_RULES)
        assert {r for rule in cluster_role["rules"] for r in rule["resources"]} == {"pytorchjobs", "trainjobs"}


def test_the_drain_may_read_the_status_of_its_own_stack_only(v1):
    """How its Update tells the rollback of a refused switch from a switch."""
    statements = [st for r in v1.resources.values() if r["Type"] == "AWS::IAM::Policy"
                  and any("TrainingDrainHandlerRole" in ref.get("Ref", "") for ref in r["Properties"]["Roles"])
                  for st in r["Properties"]["PolicyDocument"]["Statement"]]
    [describe] = [st for st in statements if "cloudformation" in json.dumps(st["Action"])]
    assert describe["Action"] == "cloudformation:DescribeStacks" and describe["Resource"] == {"Ref": "AWS::StackId"}
