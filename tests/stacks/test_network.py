"""Network stack: the VPC over the configured zones, subnets sized for EFA, NAT, S3 endpoint, flow logs."""

import ipaddress
import json

import pytest
from aws_cdk.assertions import Match

from synth_helpers import only, synth


@pytest.fixture(scope="module")
def dev():
    return synth("dev")


@pytest.fixture(scope="module")
def network(dev):
    return dev.templates["network"]


def test_vpc_uses_the_configured_cidr(dev, network):
    network.has_resource_properties("AWS::EC2::VPC", {
        "CidrBlock": dev.config.vpc_cidr, "EnableDnsHostnames": True, "EnableDnsSupport": True})


def subnets(network, kind):
    """Subnets CDK tagged with aws-cdk:subnet-type = kind (Private or Public)."""
    return [s["Properties"] for s in network.find_resources("AWS::EC2::Subnet").values()
            if {"Key": "aws-cdk:subnet-type", "Value": kind} in s["Properties"]["Tags"]]


def test_one_private_subnet_per_configured_zone_with_the_planned_mask(dev, network):
    private = subnets(network, "Private")
    assert sorted(s["AvailabilityZone"] for s in private) == sorted(dev.config.availability_zones)
    for subnet in private:
        assert ipaddress.ip_network(subnet["CidrBlock"]).prefixlen == dev.config.private_subnet_mask


def test_public_subnets_are_slash_24_and_assign_no_public_ips(dev, network):
    public = subnets(network, "Public")
    assert len(public) == len(dev.config.availability_zones)
    assert all(ipaddress.ip_network(s["CidrBlock"]).prefixlen == 24 for s in public)
    assert all(s["MapPublicIpOnLaunch"] is False for s in public)


def test_subnets_do_not_overlap_and_fit_the_vpc(dev, network):
    vpc = ipaddress.ip_network(dev.config.vpc_cidr)
    nets = [ipaddress.ip_network(s["Properties"]["CidrBlock"])
            for s in network.find_resources("AWS::EC2::Subnet").values()]
    assert all(n.subnet_of(vpc) for n in nets)
    assert not any(a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1:])


def test_training_subnet_is_the_private_subnet_in_the_training_zone(dev):
    subnet = dev.stage.network.training_subnet
    assert subnet.availability_zone == dev.config.training_availability_zone
    assert subnet.node.path in [s.node.path for s in dev.stage.network.vpc.private_subnets]


def test_training_subnet_has_the_block_config_plans_for_it(dev, network):
    """Preflight (ops/redeploy.py) finds a moved training subnet, and so a replaced file system, by
    comparing the deployed subnet with this block."""
    [training] = [s for s in subnets(network, "Private")
                  if s["AvailabilityZone"] == dev.config.training_availability_zone]
    assert training["CidrBlock"] == dev.config.training_subnet_cidr


def test_training_subnet_has_room_for_every_node_group_at_max(dev):
    assert dev.config.training_subnet_ips_at_max() <= dev.config.private_subnet_capacity


def test_one_nat_gateway_per_zone(dev, network):
    network.resource_count_is("AWS::EC2::NatGateway", len(dev.config.availability_zones))


def test_s3_gateway_endpoint_serves_the_private_route_tables(dev, network):
    endpoint = only(network.find_resources("AWS::EC2::VPCEndpoint"))["Properties"]
    assert endpoint["VpcEndpointType"] == "Gateway"
    assert "s3" in str(endpoint["ServiceName"])
    assert len(endpoint["RouteTableIds"]) == len(dev.config.availability_zones)


def test_flow_logs_capture_all_traffic_to_cloudwatch(network):
    network.has_resource_properties("AWS::EC2::FlowLog", {
        "ResourceType": "VPC", "TrafficType": "ALL", "LogDestinationType": "cloud-watch-logs"})


def test_flow_log_group_is_deleted_with_a_destroy_environment(network):
    network.has_resource("AWS::Logs::LogGroup", {"DeletionPolicy": "Delete", "UpdateReplacePolicy": "Delete"})


def test_flow_log_group_is_kept_by_a_retain_environment():
    prod = synth("prod").templates["network"]
    prod.has_resource("AWS::Logs::LogGroup", {
        "DeletionPolicy": "Retain", "Properties": Match.object_like({"RetentionInDays": 365})})


def test_outputs_name_the_vpc_and_training_subnet(network):
    outputs = network.find_outputs("*")
    assert {"VpcId", "TrainingSubnetId"} <= set(outputs)


def test_synthesis_needs_no_aws_lookups(dev):
    # A missing-context entry would make the CLI call AWS (and fail offline, without credentials).
    import json
    manifest = json.loads((dev.outdir / "manifest.json").read_text())
    assert not manifest.get("missing")


def test_flow_log_group_is_encrypted_with_a_rotating_key_cloudwatch_logs_may_use(dev, network):
    """Amazon CloudWatch Logs User Guide, "Encrypt log data in CloudWatch Logs using AWS Key
    Management Service" (https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/encrypt-log-data-kms.html):
    the key policy must let logs.<region>.amazonaws.com use the key, scoped by the
    kms:EncryptionContext:aws:logs:arn condition, or associating the key with the group fails."""
    resources = dev.template_json("network")["Resources"]
    flow_log = only(network.find_resources("AWS::EC2::FlowLog"))["Properties"]
    group = resources[flow_log["LogGroupName"]["Ref"]]
    key = resources[group["Properties"]["KmsKeyId"]["Fn::GetAtt"][0]]
    assert key["Type"] == "AWS::KMS::Key" and key["Properties"]["EnableKeyRotation"] is True
    [logs] = [s for s in key["Properties"]["KeyPolicy"]["Statement"]
              if s.get("Principal", {}).get("Service") == f"logs.{dev.config.region}.amazonaws.com"]
    assert {"kms:Encrypt*", "kms:Decrypt*", "kms:GenerateDataKey*"} <= set(logs["Action"])
    scope = json.dumps(logs["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"])
    assert f":logs:{dev.config.region}:{dev.config.account}:log-group:" in scope
    network.has_resource("AWS::KMS::Key", {"DeletionPolicy": "Delete"})
