"""IAM of the Cluster stack: every EKS Pod Identity role trusts one service account of one
namespace of this cluster, in this account; the node role carries what the EKS User Guide lists
for it and nothing more; the VPC CNI has its own role."""

from __future__ import annotations

import json

import pytest

from config.kubernetes import KUBE_SYSTEM_NAMESPACE
from stacks.cluster import CLOUDWATCH_NAMESPACE
from synth_helpers import only, synth

POD_IDENTITY = "pods.eks.amazonaws.com"


@pytest.fixture(scope="module")
def dev():
    return synth("dev")


def _resources(dev) -> dict[str, dict]:
    return dev.template_json("cluster")["Resources"]


def _pod_identity_roles(dev) -> dict[str, dict]:
    return {k: r for k, r in _resources(dev).items() if r["Type"] == "AWS::IAM::Role"
            and any(s.get("Principal", {}).get("Service") == POD_IDENTITY
                    for s in r["Properties"]["AssumeRolePolicyDocument"]["Statement"])}


def _bindings(dev) -> dict[str, tuple[str, str]]:
    """Role logical id -> (namespace, service account) of its Pod Identity association, whether the
    association is its own resource or belongs to an add-on."""
    bound = {}
    for resource in _resources(dev).values():
        props = resource["Properties"]
        if resource["Type"] == "AWS::EKS::PodIdentityAssociation":
            bound[props["RoleArn"]["Fn::GetAtt"][0]] = (props["Namespace"], props["ServiceAccount"])
        elif resource["Type"] == "AWS::EKS::Addon":
            namespace = {"amazon-cloudwatch-observability": CLOUDWATCH_NAMESPACE}.get(props["AddonName"], KUBE_SYSTEM_NAMESPACE)
            for association in props.get("PodIdentityAssociations", []):
                bound[association["RoleArn"]["Fn::GetAtt"][0]] = (namespace, association["ServiceAccount"])
    return bound


def _managed_policy_names(role: dict) -> set[str]:
    names = set()
    for arn in role["Properties"].get("ManagedPolicyArns", []):
        parts = arn["Fn::Join"][1]
        names.add(parts[-1].rsplit("/", 1)[-1])
    return names


def test_every_pod_identity_role_trusts_only_its_service_account_on_this_cluster_in_this_account(dev):
    """The trust policy of "Create IAM role with trust policy required by EKS Pod Identity"
    (https://docs.aws.amazon.com/eks/latest/userguide/pod-id-role.html): sts:AssumeRole and
    sts:TagSession for pods.eks.amazonaws.com, restricted by the session tags Pod Identity adds
    (eks-cluster-arn, kubernetes-namespace, kubernetes-service-account: "List of session tags added
    by EKS Pod Identity", https://docs.aws.amazon.com/eks/latest/userguide/pod-id-abac.html), and
    aws:SourceAccount ("Cross-service confused deputy prevention in Amazon EKS",
    https://docs.aws.amazon.com/eks/latest/userguide/cross-service-confused-deputy-prevention.html)."""
    roles, bindings = _pod_identity_roles(dev), _bindings(dev)
    # The VPC CNI, the FSx CSI driver, the CloudWatch agent and dev's two copying data sources.
    assert len(roles) == 5 and set(roles) == set(bindings)
    cluster_arn = "arn:aws:eks:us-west-2:111111111111:cluster/dev-training"
    for logical_id, role in roles.items():
        namespace, service_account = bindings[logical_id]
        [statement] = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert statement == {
            "Effect": "Allow", "Principal": {"Service": POD_IDENTITY},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
            "Condition": {"StringEquals": {
                "aws:SourceAccount": "111111111111",
                "aws:RequestTag/eks-cluster-arn": cluster_arn,
                "aws:RequestTag/kubernetes-namespace": namespace,
                "aws:RequestTag/kubernetes-service-account": service_account,
            }},
        }, logical_id


def test_addon_roles_name_the_addons_own_namespace_and_service_account(dev):
    assert sorted(_bindings(dev).values()) == sorted([
        ("kube-system", "aws-node"), ("kube-system", "fsx-csi-controller-sa"),
        ("amazon-cloudwatch", "cloudwatch-agent"), ("training", "data-c4"), ("training", "data-imagenet")])


def test_node_role_has_exactly_the_policies_the_eks_guide_lists():
    """"Amazon EKS node IAM role" (https://docs.aws.amazon.com/eks/latest/userguide/create-node-role.html):
    AmazonEKSWorkerNodePolicy and AmazonEC2ContainerRegistryPullOnly; the CNI policy goes on a
    separate role for the aws-node service account rather than on the node role. Nothing else: no
    inline policy and no grant (an AWS::IAM::Policy naming the role, as `bucket.grant_read(role)`
    makes), since a hostNetwork pod on any node holds these credentials."""
    dev = synth("dev")
    node_id = dev.logical_id("cluster", dev.stage.cluster.node_role)
    node_role = _resources(dev)[node_id]
    assert node_role["Properties"]["AssumeRolePolicyDocument"]["Statement"] == [
        {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}}]
    assert _managed_policy_names(node_role) == {"AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryPullOnly"}
    assert "Policies" not in node_role["Properties"]
    grants = [f"{stack}/{logical_id}" for stack in dev.templates
              for logical_id, r in dev.template_json(stack)["Resources"].items()
              if r["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy") and node_id in json.dumps(r["Properties"])]
    assert grants == []


def test_the_vpc_cni_addon_gets_the_cni_policy_through_its_own_pod_identity_role(dev):
    """"Configure Amazon VPC CNI plugin to use IRSA" (https://docs.aws.amazon.com/eks/latest/userguide/cni-iam-role.html)
    recommends a separate role for the aws-node service account; the vpc-cni add-on supports Pod
    Identity since v1.15.5-eksbuild.1 ("IAM roles for Amazon EKS add-ons",
    https://docs.aws.amazon.com/eks/latest/userguide/add-ons-iam.html)."""
    resources = _resources(dev)
    addon = only({k: r for k, r in resources.items() if r["Type"] == "AWS::EKS::Addon"
                  and r["Properties"]["AddonName"] == "vpc-cni"})
    [association] = addon["Properties"]["PodIdentityAssociations"]
    assert association["ServiceAccount"] == "aws-node"
    role = resources[association["RoleArn"]["Fn::GetAtt"][0]]
    assert _managed_policy_names(role) == {"AmazonEKS_CNI_Policy"}
    agent = dev.stage.cluster.get_logical_id(dev.stage.cluster.addons["eks-pod-identity-agent"].node.default_child)
    assert agent in addon["DependsOn"]


def test_only_the_custom_resource_framework_may_invoke_the_cluster_admin_kubectl_handler():
    """The README's security section says who can act as the kubectl handler, which is cluster
    admin: the stacks grant lambda:InvokeFunction on it to the provider framework's role alone, and
    no resource policy (AWS::Lambda::Permission) opens it to anyone else."""
    for variant in ("dev", "prod"):
        s = synth(variant)
        provider = s.stage.cluster.cluster.node.find_child("KubectlProvider")
        handler = s.stage.cluster.get_logical_id(provider.node.find_child("Handler").node.default_child)
        handler_role = s.stage.cluster.get_logical_id(
            provider.node.find_child("Handler").node.find_child("ServiceRole").node.default_child)
        invokers, permissions, admins = [], [], []
        for name in s.templates:
            for logical_id, r in s.template_json(name)["Resources"].items():
                props = r.get("Properties", {})
                if r["Type"] == "AWS::Lambda::Permission":
                    permissions.append(f"{name}/{logical_id}")
                if r["Type"] == "AWS::IAM::Policy":
                    for statement in props["PolicyDocument"]["Statement"]:
                        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                        if any(a.startswith("lambda:Invoke") or a == "lambda:*" for a in actions):
                            invokers.append((name, [role["Ref"] for role in props["Roles"]], json.dumps(statement["Resource"])))
                if r["Type"] == "AWS::EKS::AccessEntry" and "AmazonEKSClusterAdminPolicy" in json.dumps(props):
                    admins.append(props["PrincipalArn"])
        [(stack, [role], resources)] = invokers
        assert stack == "cluster" and "frameworkonEventServiceRole" in role and handler in resources
        assert permissions == []
        assert {"Fn::GetAtt": [handler_role, "Arn"]} in admins, variant
