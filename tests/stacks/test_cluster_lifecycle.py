"""Cluster stack, the control plane's lifetime: its Kubernetes version and upgrade policy, its name,
and the log groups EKS and Container Insights would otherwise create without expiry or key."""

import pytest
from aws_cdk.assertions import Match

from synth_helpers import only, synth

CONTAINER_INSIGHTS_GROUPS = ("application", "dataplane", "host", "performance")


@pytest.fixture(scope="module")
def dev():
    return synth("dev")


@pytest.fixture(scope="module")
def prod():
    return synth("prod")


def control_plane(s):
    return only(s.templates["cluster"].find_resources("AWS::EKS::Cluster"))


def log_group_named(s, name: str) -> tuple[str, dict]:
    groups = {k: r for k, r in s.template_json("cluster")["Resources"].items()
              if r["Type"] == "AWS::Logs::LogGroup" and r["Properties"].get("LogGroupName") == name}
    assert len(groups) == 1, f"expected one log group named {name}, got {sorted(groups)}"
    return next(iter(groups.items()))


def test_committed_environments_run_kubernetes_1_35_with_the_matching_kubectl_layer(dev, prod):
    """Amazon EKS User Guide, "Understand the Kubernetes version lifecycle on EKS", release
    calendar (https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html): 1.33 left
    standard support on 2026-07-29; 1.35 is in standard support until 2027-03-27. kubectl supports
    one minor version of skew (https://kubernetes.io/releases/version-skew-policy/#kubectl)."""
    for s in (dev, prod):
        assert control_plane(s)["Properties"]["Version"] == "1.35"
        layer = only(s.templates["cluster"].find_resources("AWS::Lambda::LayerVersion", {
            "Properties": {"Description": Match.string_like_regexp("/opt/kubectl/kubectl")}}))
        assert layer["Properties"]["Description"].startswith("/opt/kubectl/kubectl 1.35.")


def test_upgrade_policy_is_standard_unless_the_environment_opts_into_extended_support(dev, prod):
    """AWS::EKS::Cluster UpgradePolicy (https://docs.aws.amazon.com/AWSCloudFormation/latest/
    TemplateReference/aws-properties-eks-cluster-upgradepolicy.html): "The default value is EXTENDED.
    Use STANDARD to disable extended support." Left unset, a cluster silently pays extended-support
    rates once its version leaves standard support."""
    assert control_plane(dev)["Properties"]["UpgradePolicy"] == {"SupportType": "STANDARD"}
    assert control_plane(prod)["Properties"]["UpgradePolicy"] == {"SupportType": "STANDARD"}
    assert control_plane(synth("split"))["Properties"]["UpgradePolicy"] == {"SupportType": "EXTENDED"}


def test_cluster_has_the_name_its_log_groups_are_named_after(dev):
    """Amazon EKS User Guide, "Send control plane logs to CloudWatch Logs"
    (https://docs.aws.amazon.com/eks/latest/userguide/control-plane-logs.html): the logs go to
    /aws/eks/<cluster-name>/cluster, so the name must be known before the cluster exists."""
    assert control_plane(dev)["Properties"]["Name"] == dev.config.cluster_name == "dev-training"
    assert dev.stage.cluster.cluster_name == "dev-training"


def _key_of(s, group: dict) -> dict:
    key_id = group["Properties"]["KmsKeyId"]["Fn::GetAtt"][0]
    key = s.template_json("cluster")["Resources"][key_id]
    assert key["Type"] == "AWS::KMS::Key" and key["Properties"]["EnableKeyRotation"] is True
    return key


def _logs_may_use(key: dict, region: str) -> bool:
    """The key policy lets the regional CloudWatch Logs principal use the key for log groups of
    this account and region (Amazon CloudWatch Logs User Guide, "Encrypt log data in CloudWatch
    Logs using AWS Key Management Service", step 2)."""
    for statement in key["Properties"]["KeyPolicy"]["Statement"]:
        principal = statement.get("Principal", {}).get("Service")
        if principal == f"logs.{region}.amazonaws.com":
            condition = statement["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"]
            return "kms:GenerateDataKey*" in statement["Action"] and ":log-group:" in str(condition)
    return False


def test_control_plane_log_group_is_created_first_expiring_and_kms_encrypted(dev):
    """Amazon EKS User Guide, "Send control plane logs to CloudWatch Logs"
    (https://docs.aws.amazon.com/eks/latest/userguide/control-plane-logs.html): EKS creates
    /aws/eks/<cluster>/cluster with logs that never expire unless the group exists already; a
    group created after the cluster collides with the one EKS made (CloudFormation: AlreadyExists)."""
    logical, group = log_group_named(dev, f"/aws/eks/{dev.config.cluster_name}/cluster")
    assert group["Properties"]["RetentionInDays"] == 30
    assert _logs_may_use(_key_of(dev, group), dev.config.region)
    cluster_logical = dev.stage.cluster.get_logical_id(dev.stage.cluster.cluster.node.default_child)
    assert logical in dev.template_json("cluster")["Resources"][cluster_logical].get("DependsOn", [])


def test_container_insights_log_groups_exist_before_the_observability_addon(dev):
    """Amazon CloudWatch User Guide, "Set up Fluent Bit as a DaemonSet to send logs to CloudWatch
    Logs" (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Container-Insights-setup-logs-FluentBit.html):
    Fluent Bit creates /aws/containerinsights/<cluster>/application, /host and /dataplane if absent;
    "Container Insights performance log reference" (https://docs.aws.amazon.com/AmazonCloudWatch/latest/
    monitoring/Container-Insights-reference.html): Container Insights creates .../performance."""
    addon = only(dev.templates["cluster"].find_resources("AWS::EKS::Addon", {
        "Properties": {"AddonName": "amazon-cloudwatch-observability"}}))
    for suffix in CONTAINER_INSIGHTS_GROUPS:
        logical, group = log_group_named(dev, f"/aws/containerinsights/{dev.config.cluster_name}/{suffix}")
        assert group["Properties"]["RetentionInDays"] == 30, suffix
        assert _logs_may_use(_key_of(dev, group), dev.config.region), suffix
        assert logical in addon["DependsOn"], suffix


def test_the_clusters_log_groups_go_with_it_in_every_environment(dev, prod):
    """What the README's "What destroy keeps" table promises: named for the cluster, these groups
    are deleted with it in dev and prod alike (kept, prod's next deploy could not create them);
    events expire after the environment's retention meanwhile."""
    for s, policy, days in ((dev, "Delete", 30), (prod, "Delete", 365)):
        names = [f"/aws/eks/{s.config.cluster_name}/cluster",
                 *(f"/aws/containerinsights/{s.config.cluster_name}/{x}" for x in CONTAINER_INSIGHTS_GROUPS)]
        for name in names:
            _, group = log_group_named(s, name)
            assert group["DeletionPolicy"] == policy and group["UpdateReplacePolicy"] == policy, name
            assert group["Properties"]["RetentionInDays"] == days, name
