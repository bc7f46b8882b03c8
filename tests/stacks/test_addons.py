"""Cluster stack, the EKS add-ons: what creating them over EKS's own copies needs, version pins,
node health monitoring, and what each add-on is told so that none has to ask IMDS."""

import json

import pytest

from config.kubernetes import GPU_TAINT_KEY
from synth_helpers import ADDON_PINS, only, synth

# EKS installs self-managed copies of these into every new cluster.
SELF_MANAGED_AT_CREATION = ("vpc-cni", "kube-proxy", "coredns")


@pytest.fixture(scope="module")
def dev():
    return synth("dev")


def addon(s, name: str) -> dict:
    return only(s.templates["cluster"].find_resources("AWS::EKS::Addon", {"Properties": {"AddonName": name}}))


def configuration(s, name: str) -> dict:
    return json.loads(addon(s, name)["Properties"]["ConfigurationValues"])


@pytest.mark.parametrize("name", SELF_MANAGED_AT_CREATION)
def test_core_addons_take_over_the_self_managed_copies_eks_installed(dev, name):
    """Amazon EKS User Guide, "Create an Amazon EKS add-on"
    (https://docs.aws.amazon.com/eks/latest/userguide/creating-an-add-on.html): if the add-on's
    settings conflict with the self-managed copy already running, creation fails unless conflicts
    are resolved with OVERWRITE; AWS::EKS::Addon ResolveConflicts (NONE | OVERWRITE | PRESERVE)."""
    assert addon(dev, name)["Properties"]["ResolveConflicts"] == "OVERWRITE"


def test_pinned_addon_versions_are_installed_and_the_rest_left_to_eks():
    """AWS::EKS::Addon AddonVersion (https://docs.aws.amazon.com/AWSCloudFormation/latest/
    TemplateReference/aws-resource-eks-addon.html): omitted, EKS installs the default version for
    the cluster's Kubernetes version; preflight checks a pin against DescribeAddonVersions."""
    split = synth("split")
    for name, version in ADDON_PINS.items():
        assert addon(split, name)["Properties"]["AddonVersion"] == version, name
    for name in ("kube-proxy", "coredns", "aws-fsx-csi-driver", "amazon-cloudwatch-observability"):
        assert "AddonVersion" not in addon(split, name)["Properties"], name
    assert all("AddonVersion" not in r["Properties"]
               for r in synth("dev").templates["cluster"].find_resources("AWS::EKS::Addon").values())


def test_node_monitoring_agent_watches_gpu_nodes_despite_their_taint(dev):
    """Amazon EKS User Guide, "Detect node health issues and enable automatic node repair"
    (https://docs.aws.amazon.com/eks/latest/userguide/node-health.html) and "Configure the Amazon
    EKS node monitoring agent" (https://docs.aws.amazon.com/eks/latest/userguide/node-monitoring-agent-configure.html):
    the add-on accepts its chart values. Chart eks-node-monitoring-agent 1.7.0: the agent tolerates
    every taint, but the dcgm-server DaemonSet it reads GPU health from has `tolerations: []`, so
    on nodes tainted nvidia.com/gpu it would never run and GPU faults would go unseen."""
    values = configuration(dev, "eks-node-monitoring-agent")
    assert {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} in values["dcgmAgent"]["tolerations"]
    assert set(values) <= {"nodeAgent", "dcgmAgent"}, "keys outside the add-on's configuration schema"


def test_pods_cannot_reach_the_node_roles_credentials_through_imds(dev):
    """Amazon EKS Best Practices Guide, Identity and Access Management, "Restrict access to the
    instance profile assigned to the worker node" (https://docs.aws.amazon.com/eks/latest/best-practices/
    identity-and-access-management.html): require IMDSv2 with a hop limit of 1, so a reply to a pod
    (one hop further than the host) is dropped; EC2 User Guide, "Configure the Instance Metadata
    Service options" (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-instance-metadata-options.html)."""
    resources = dev.template_json("cluster")["Resources"]
    templates = [r["Properties"]["LaunchTemplateData"] for r in resources.values() if r["Type"] == "AWS::EC2::LaunchTemplate"]
    assert len(templates) >= len(dev.stage.cluster.nodegroups)
    for data in templates:
        assert data["MetadataOptions"] == {"HttpEndpoint": "enabled", "HttpTokens": "required",
                                           "HttpPutResponseHopLimit": 1}


def test_fsx_csi_driver_is_told_its_region_instead_of_asking_imds(dev):
    """aws-fsx-csi-driver v1.9.0 (pkg/driver/controller.go, node.go): without AWS_REGION the
    controller and the node plugin ask IMDS for the region. Neither runs on the host network in
    chart 1.17.0, so with hop limit 1 that call times out; the chart's controller.region and
    node.region values set AWS_REGION instead."""
    values = configuration(dev, "aws-fsx-csi-driver")
    assert values["controller"]["region"] == dev.config.region
    assert values["node"]["region"] == dev.config.region
