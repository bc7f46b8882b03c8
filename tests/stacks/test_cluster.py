"""Cluster stack: EKS with node-group capacity, access entries, logging, encryption, add-ons, node groups."""

import json

import pytest
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Match

from config.addons import MANAGED_ADDONS
from config.kubernetes import EFA_LABEL, GPU_LABEL, GPU_TAINT_KEY, GPU_TAINT_VALUE, NODEGROUP_LABEL, ROLE_LABEL
from synth_helpers import DEPLOYER, only, raw_environment, synth, synthesize


@pytest.fixture(scope="module")
def dev():
    return synth("dev")


@pytest.fixture(scope="module")
def cluster(dev):
    return dev.templates["cluster"]


@pytest.fixture(scope="module")
def control_plane(cluster):
    return only(cluster.find_resources("AWS::EKS::Cluster"))["Properties"]


def nodegroup_props(dev, name):
    stack = dev.stage.cluster
    logical = stack.get_logical_id(stack.nodegroups[name].node.default_child)
    return dev.template_json("cluster")["Resources"][logical]["Properties"]


def launch_template_data(dev, nodegroup):
    logical = nodegroup["LaunchTemplate"]["Id"]["Ref"]
    return dev.template_json("cluster")["Resources"][logical]["Properties"]["LaunchTemplateData"]


def test_cluster_runs_the_configured_kubernetes_version(dev, control_plane):
    assert control_plane["Version"] == dev.config.kubernetes_version


def test_node_groups_not_auto_mode(control_plane, cluster):
    assert control_plane["ComputeConfig"] == {"Enabled": False}
    assert "StorageConfig" not in control_plane or control_plane["StorageConfig"]["BlockStorage"]["Enabled"] is False


def test_api_authentication_without_a_hidden_creator_admin(control_plane):
    assert control_plane["AccessConfig"] == {"AuthenticationMode": "API", "BootstrapClusterCreatorAdminPermissions": False}


def test_every_admin_role_gets_a_cluster_admin_access_entry(dev, cluster):
    for arn in dev.config.admin_role_arns:
        cluster.has_resource_properties("AWS::EKS::AccessEntry", {
            "PrincipalArn": arn,
            "AccessPolicies": [{"AccessScope": {"Type": "cluster"},
                                "PolicyArn": Match.object_like({})}],
        })


def test_all_control_plane_log_types_are_on(control_plane):
    types = {t["Type"] for t in control_plane["Logging"]["ClusterLogging"]["EnabledTypes"]}
    assert types == {"api", "audit", "authenticator", "controllerManager", "scheduler"}


def test_secrets_are_envelope_encrypted_with_a_rotating_customer_key(dev, cluster, control_plane):
    [config] = control_plane["EncryptionConfig"]
    assert config["Resources"] == ["secrets"]
    key_id = config["Provider"]["KeyArn"]["Fn::GetAtt"][0]
    key = dev.template_json("cluster")["Resources"][key_id]
    assert key["Type"] == "AWS::KMS::Key" and key["Properties"]["EnableKeyRotation"] is True


def test_public_endpoint_is_public_and_private_from_the_allow_list_only(dev, control_plane):
    vpc_config = control_plane["ResourcesVpcConfig"]
    assert vpc_config["EndpointPrivateAccess"] is True and vpc_config["EndpointPublicAccess"] is True
    assert vpc_config["PublicAccessCidrs"] == list(dev.config.endpoint_access.public_cidrs)


def test_private_endpoint_has_no_public_access():
    # the "blocks" variant sets endpointAccess private
    control = only(synth("blocks").templates["cluster"].find_resources("AWS::EKS::Cluster"))["Properties"]
    assert control["ResourcesVpcConfig"]["EndpointPublicAccess"] is False
    assert control["ResourcesVpcConfig"]["EndpointPrivateAccess"] is True


def test_kubectl_provider_uses_the_kubectl_layer(dev, cluster):
    assert dev.stage.cluster.cluster.kubectl_provider is not None
    layers = cluster.find_resources("AWS::Lambda::LayerVersion", {"Properties": {"Description": Match.string_like_regexp("kubectl")}})
    assert layers, "no kubectl layer in the template"


def test_kubectl_handler_runs_in_the_private_subnets(dev, cluster):
    handler = cluster.find_resources("AWS::Lambda::Function", {
        "Properties": {"Description": Match.string_like_regexp("kubectl")}})
    vpc_config = only(handler)["Properties"]["VpcConfig"]
    assert len(vpc_config["SubnetIds"]) == len(dev.config.availability_zones)


# Why the cluster runs each EKS add-on. An add-on config/addons.py gains must be named here too.
ADDON_PURPOSES = {
    "vpc-cni": "pod networking, and the enforcement of our NetworkPolicies",
    "kube-proxy": "Service routing",
    "coredns": "cluster DNS",
    "eks-pod-identity-agent": "AWS credentials for the add-ons' and the data Jobs' ServiceAccounts",
    "aws-fsx-csi-driver": "the FSx for Lustre volume",
    "amazon-cloudwatch-observability": "Container Insights with GPU and EFA metrics, and container logs",
    "eks-node-monitoring-agent": "the node health conditions EKS node auto repair acts on (node-health.html)",
}


def test_the_cluster_installs_each_addon_of_config_addons_once_and_no_other(cluster):
    installed = [r["Properties"]["AddonName"] for r in cluster.find_resources("AWS::EKS::Addon").values()]
    assert sorted(installed) == sorted(MANAGED_ADDONS)
    assert set(MANAGED_ADDONS) == set(ADDON_PURPOSES)


def test_vpc_cni_enforces_network_policy(cluster):
    """Amazon EKS User Guide, "Restrict Pod network traffic with Kubernetes network policies"
    (https://docs.aws.amazon.com/eks/latest/userguide/cni-network-policy-configure.html): the vpc-cni
    add-on enforces NetworkPolicy only with enableNetworkPolicy "true"; without it the policies of
    k8s/pods/network_policy.py would be accepted and ignored."""
    addon = only(cluster.find_resources("AWS::EKS::Addon", {"Properties": {"AddonName": "vpc-cni"}}))
    assert json.loads(addon["Properties"]["ConfigurationValues"])["enableNetworkPolicy"] == "true"


def test_cloudwatch_observability_collects_gpu_and_efa_metrics(cluster):
    addon = only(cluster.find_resources("AWS::EKS::Addon", {"Properties": {"AddonName": "amazon-cloudwatch-observability"}}))
    kubernetes = json.loads(addon["Properties"]["ConfigurationValues"])["agent"]["config"]["logs"]["metrics_collected"]["kubernetes"]
    assert kubernetes["enhanced_container_insights"] is True and kubernetes["accelerated_compute_metrics"] is True


def test_fsx_csi_driver_has_a_pod_identity_role_that_can_only_describe_file_systems(dev, cluster):
    addon = only(cluster.find_resources("AWS::EKS::Addon", {"Properties": {"AddonName": "aws-fsx-csi-driver"}}))
    [association] = addon["Properties"]["PodIdentityAssociations"]
    assert association["ServiceAccount"] == "fsx-csi-controller-sa"
    role_id = association["RoleArn"]["Fn::GetAtt"][0]
    resources = dev.template_json("cluster")["Resources"]
    trust = resources[role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert {s["Principal"]["Service"] for s in trust} == {"pods.eks.amazonaws.com"}
    assert "ManagedPolicyArns" not in resources[role_id]["Properties"]
    policies = [r for r in resources.values() if r["Type"] == "AWS::IAM::Policy"
                and {"Ref": role_id} in r["Properties"]["Roles"]]
    actions = {a for p in policies for s in p["Properties"]["PolicyDocument"]["Statement"]
               for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert actions == {"fsx:DescribeFileSystems"}


def test_addons_that_run_deployments_wait_for_the_system_nodes(dev, cluster):
    system = dev.stage.cluster.get_logical_id(dev.stage.cluster.nodegroups["system"].node.default_child)
    for name in ("coredns", "aws-fsx-csi-driver", "amazon-cloudwatch-observability"):
        addon = only(cluster.find_resources("AWS::EKS::Addon", {"Properties": {"AddonName": name}}))
        assert system in addon["DependsOn"], name


def test_nodegroups_are_keyed_by_config_name_with_the_system_group(dev):
    expected = {"system", *(g.name for g in dev.config.training_nodegroups)}
    assert set(dev.stage.cluster.nodegroups) == expected
    assert all(isinstance(n, eks.Nodegroup) for n in dev.stage.cluster.nodegroups.values())


def test_system_nodegroup_spans_every_zone(dev):
    props = nodegroup_props(dev, "system")
    assert len(props["Subnets"]) == len(dev.config.availability_zones)
    assert props["Labels"] == {NODEGROUP_LABEL: "system", ROLE_LABEL: "system"}
    assert props["ScalingConfig"]["MinSize"] == dev.config.system_nodegroup.min_size
    assert "Taints" not in props


def test_training_nodegroups_live_only_in_the_training_subnet(dev):
    training_subnet = dev.logical_id("network", dev.stage.network.training_subnet)
    for group in dev.config.training_nodegroups:
        props = nodegroup_props(dev, group.name)
        assert [dev.imported_ref(s) for s in props["Subnets"]] == [training_subnet], group.name


def test_cpu_nodegroup_labels_and_sizes(dev):
    for group in dev.config.cpu_nodegroups:
        props = nodegroup_props(dev, group.name)
        assert props["Labels"] == {NODEGROUP_LABEL: group.name, ROLE_LABEL: "training"}
        assert launch_template_data(dev, props)["InstanceType"] == group.instance_type_name
        assert props["AmiType"] == "AL2023_x86_64_STANDARD"
        assert props["ScalingConfig"] == {"MinSize": group.min_size, "MaxSize": group.max_size,
                                          "DesiredSize": group.desired_size}


def test_gpu_nodegroups_are_labelled_and_tainted(dev):
    for group in dev.config.gpu_nodegroups:
        props = nodegroup_props(dev, group.name)
        assert props["Labels"] == {NODEGROUP_LABEL: group.name, ROLE_LABEL: "training", GPU_LABEL: "true",
                                   EFA_LABEL: "true"}
        assert props["Taints"] == [{"Key": GPU_TAINT_KEY, "Value": GPU_TAINT_VALUE, "Effect": "NO_SCHEDULE"}]
        assert props["AmiType"] == "AL2023_x86_64_NVIDIA"
        assert launch_template_data(dev, props)["InstanceType"] == group.instance_type_name


def test_every_nodegroup_requires_imdsv2_and_encrypts_its_gp3_root_volume(dev):
    for name in dev.stage.cluster.nodegroups:
        data = launch_template_data(dev, nodegroup_props(dev, name))
        assert data["MetadataOptions"]["HttpTokens"] == "required", name
        [root] = data["BlockDeviceMappings"]
        assert root["DeviceName"] == "/dev/xvda"
        assert root["Ebs"]["Encrypted"] is True and root["Ebs"]["VolumeType"] == "gp3", name


def test_gpu_root_volumes_hold_at_least_the_nvidia_ami(dev):
    # Sizing per instance storage: tests/stacks/test_nodegroups.py.
    for group in dev.config.gpu_nodegroups:
        data = launch_template_data(dev, nodegroup_props(dev, group.name))
        assert data["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] >= 100


def test_efa_security_group_allows_all_traffic_only_to_and_from_itself(dev, cluster):
    sg = dev.logical_id("cluster", dev.stage.cluster.efa_security_group)
    props = dev.template_json("cluster")["Resources"][sg]["Properties"]
    # allow_all_outbound=False renders one placeholder egress to 255.255.255.255/32 (blocks all).
    assert all(rule.get("CidrIp") == "255.255.255.255/32" for rule in props.get("SecurityGroupEgress", []))
    assert "SecurityGroupIngress" not in props
    for kind, peer in (("AWS::EC2::SecurityGroupIngress", "SourceSecurityGroupId"),
                       ("AWS::EC2::SecurityGroupEgress", "DestinationSecurityGroupId")):
        rule = only(cluster.find_resources(kind, {"Properties": {"GroupId": {"Fn::GetAtt": [sg, "GroupId"]}}}))
        assert rule["Properties"]["IpProtocol"] == "-1"
        assert rule["Properties"][peer] == {"Fn::GetAtt": [sg, "GroupId"]}


def test_destroy_environment_deletes_the_secrets_key(cluster):
    cluster.has_resource("AWS::KMS::Key", {"DeletionPolicy": "Delete"})


def test_retain_environment_deletes_the_cluster_with_its_secrets_key():
    """A kept cluster would keep billing; what a retain environment keeps is its data. The secrets
    key encrypts only the deleted cluster's Secrets, so keeping it would bill for nothing."""
    prod = synth("prod")
    template = prod.templates["cluster"]
    template.has_resource("AWS::EKS::Cluster", {"DeletionPolicy": "Delete"})
    key = prod.logical_id("cluster", prod.stage.cluster.secrets_key)
    assert template.to_json()["Resources"][key]["DeletionPolicy"] == "Delete"


def test_outputs_for_humans(cluster):
    assert {"ClusterName", "ClusterSecurityGroupId", "EfaSecurityGroupId"} <= set(cluster.find_outputs("*"))


def test_the_stack_outputs_the_exact_update_kubeconfig_command_through_the_first_admin_role(cluster):
    outputs = cluster.find_outputs("KubeconfigCommand")
    assert only(outputs)["Value"] == ("aws eks update-kubeconfig --name dev-training --region us-west-2 "
                                      "--role-arn arn:aws:iam::111111111111:role/PlatformAdmin")
    assert not cluster.find_outputs("KubeconfigCommandDeployer")


def test_a_configured_deployer_gets_a_cluster_admin_access_entry_and_its_own_command():
    """EKS access entries take the IAM role ARN, path included, never an STS session ARN (Amazon EKS
    User Guide, creating-access-entries.html; Amazon EKS API Reference, CreateAccessEntry)."""
    split = synth("split").templates["cluster"]
    entries = split.find_resources("AWS::EKS::AccessEntry")
    admins = [e["Properties"] for e in entries.values()
              if any(p["PolicyArn"] and "AmazonEKSClusterAdminPolicy" in json.dumps(p["PolicyArn"])
                     for p in e["Properties"].get("AccessPolicies", []))]
    # The other cluster admin is the kubectl handler's own role (a GetAtt), which the construct adds.
    assert [a["PrincipalArn"] for a in admins if isinstance(a["PrincipalArn"], str)] == [DEPLOYER]
    assert only(split.find_outputs("KubeconfigCommandDeployer"))["Value"] == (
        "aws eks update-kubeconfig --name split-training --region us-west-2")
    assert not split.find_outputs("KubeconfigCommand")


def test_preflight_reads_each_admin_access_entry_by_the_logical_id_synth_gives_it():
    """ops/redeploy.py finds which principal each deployed entry holds by its logical id in the
    deployed template (the construct ids are positions: Admin0, Admin1, ..., Deployer), to fail an
    adminRoleArns edit that moves a principal to another entry before CloudFormation does."""
    from ops.redeploy import deployed_access_entries

    raw = raw_environment("dev")
    raw["adminRoleArns"] = [f"arn:aws:iam::111111111111:role/Admin{n}" for n in "ABC"]
    raw["deployerPrincipalArn"] = DEPLOYER
    admins = synthesize("admins", raw)
    assert deployed_access_entries(admins.template_json("cluster")) == dict(admins.config.admin_access_entries)
    assert len(admins.config.admin_access_entries) == 4
