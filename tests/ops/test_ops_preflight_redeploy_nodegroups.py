"""preflight names each GPU node group the deploy would roll or replace (ops/redeploy_nodegroups.py),
judged by whether the live group has nodes. On a moto server: prod deployed as a deploy leaves it
(test_ops_preflight_redeploy.deploy), its Cluster stack's template reduced to the GPU node groups and
their launch templates as tests/stacks/test_nodegroup_rolls.py holds a synth to, and the live node
groups with their labels and desired sizes."""

from __future__ import annotations

import json

import boto3
import pytest

from config.node_launch import GP3_BASELINE, METADATA_OPTIONS, ROOT_DEVICE, root_volume
from config.node_user_data import node_user_data
from config.instance_types import INSTANCE_TYPES
from config.kubernetes import GPU_LABEL, NODEGROUP_LABEL
from ops import redeploy, redeploy_nodegroups
from ops.checks import FAIL, PASS, WARN
from test_ops_preflight_redeploy import ENTRY_IDS, REGION, deploy, judged, prod

ROW = redeploy_nodegroups.ROW
RESERVATION = "cr-0123456789abcdef0"  # prod's p5 in cdk.json
OTHER = "cr-0aaaaaaaaaaaaaaaa"
BLOCK = "cr-0fedcba9876543210"


@pytest.fixture(scope="module")
def moto_clients(moto_endpoint):
    from ops.aws import clients

    return clients(REGION)


def gpu_group(name: str, instance_type: str = "p5.48xlarge", *, reservation: str | None = RESERVATION,
              block: bool = False, placement: bool | None = None, instance_types: bool = False,
              nodes: int | None = 0, volume: dict | None = None, metadata: dict | None = None) -> dict:
    """One deployed GPU group: how the template holds it (`volume` and `metadata`: the root volume's
    Ebs and the MetadataOptions, by default what this release writes), and `nodes` its live desired
    size (None: no live node group)."""
    itype = INSTANCE_TYPES[instance_type]
    size = {**GP3_BASELINE, **root_volume(itype)}
    ebs = volume or {"VolumeSize": size["root_volume_gib"], "VolumeType": "gp3", "Encrypted": True,
                     "DeleteOnTermination": True, "Iops": size["root_volume_iops"],
                     "Throughput": size["root_volume_throughput_mbps"]}
    placement = itype.supports_efa and not reservation if placement is None else placement
    data = {"InstanceType": instance_type,
            "NetworkInterfaces": [{"NetworkCardIndex": i.network_card_index, "DeviceIndex": i.device_index,
                                   "InterfaceType": i.interface_type, "DeleteOnTermination": True,
                                   "Groups": ["sg-0123456789abcdef0"]}
                                  for i in itype.network_interfaces()],
            "MetadataOptions": metadata or dict(METADATA_OPTIONS),
            "BlockDeviceMappings": [{"DeviceName": ROOT_DEVICE, "Ebs": ebs}]}
    if reservation:
        data["CapacityReservationSpecification"] = {"CapacityReservationTarget": {"CapacityReservationId": reservation}}
    if block:
        data["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
    if placement:
        data["Placement"] = {"GroupName": f"prod-Cluster-Gpu{name}PlacementGroup"}
    user_data = node_user_data(itype)
    if user_data:
        data["UserData"] = {"Fn::Base64": user_data}
    nodegroup = {"AmiType": "AL2023_x86_64_NVIDIA", "CapacityType": "CAPACITY_BLOCK" if block else "ON_DEMAND",
                 "Labels": {NODEGROUP_LABEL: name, GPU_LABEL: "true"},
                 "LaunchTemplate": {"Id": {"Ref": f"Gpu{name}GroupLaunchTemplate"},
                                    "Version": {"Fn::GetAtt": [f"Gpu{name}GroupLaunchTemplate", "LatestVersionNumber"]}}}
    if instance_types:
        nodegroup["InstanceTypes"] = [instance_type]
    return {"name": name, "nodes": nodes, "resources": {
        f"Gpu{name}GroupLaunchTemplate": {"Type": "AWS::EC2::LaunchTemplate",
                                          "Properties": {"LaunchTemplateData": data}},
        f"Gpu{name}GroupNodegroupABCDEF12": {"Type": "AWS::EKS::Nodegroup", "Properties": nodegroup}}}


def deploy_groups(endpoint: str, env, *groups: dict) -> str:
    """`env` deployed (deploy), with a Cluster stack holding `groups` and their live node groups.
    The file system's id."""
    fs = deploy(endpoint, env)
    resources = {k: v for g in groups for k, v in g["resources"].items()}
    # env's own access entries, as its deploy made them: the admins row then has none to create.
    resources.update({ENTRY_IDS[cid]: {"Type": "AWS::EKS::AccessEntry", "Properties": {
        "ClusterName": env.cluster_name, "PrincipalArn": arn}} for cid, arn in env.admin_access_entries})
    kw = dict(region_name=REGION, endpoint_url=endpoint)
    boto3.client("cloudformation", **kw).create_stack(StackName="prod-Cluster",
                                                      TemplateBody=json.dumps({"Resources": resources}))
    eks = boto3.client("eks", **kw)
    for g in groups:
        if g["nodes"] is None:
            continue
        eks.create_nodegroup(clusterName=env.cluster_name, nodegroupName=f"Gpu{g['name']}-generated",
                             nodeRole=f"arn:aws:iam::{env.account}:role/node", subnets=["subnet-00000000"],
                             labels={NODEGROUP_LABEL: g["name"], GPU_LABEL: "true"},
                             scalingConfig={"minSize": 0, "maxSize": 16, "desiredSize": g["nodes"]})
    return fs


def p5(**capacity_and_type) -> list[dict]:
    """prod's gpuNodegroups with its p5 group changed."""
    group = {"name": "p5", "instanceType": "p5.48xlarge", "minSize": 0, "maxSize": 16, "desiredSize": 0,
             "capacity": {"type": "reserved", "reservationId": RESERVATION}}
    return [{**group, **capacity_and_type}]


def test_an_unchanged_configuration_rolls_and_replaces_no_group(aws, moto_endpoint, moto_clients, tmp_path):
    env = prod(tmp_path)
    deploy_groups(moto_endpoint, env, gpu_group("p5", nodes=4))
    rows = judged(env, moto_clients)
    assert {r.status for r in rows.values()} == {PASS}, rows
    assert "no GPU node group is rolled or replaced (1 deployed, prod-Cluster)" in rows[ROW].reason


def test_the_first_deploy_passes_saying_it_creates_the_groups(aws, moto_clients, tmp_path):
    row = judged(prod(tmp_path), moto_clients)[ROW]
    assert row.status == PASS and "no prod-Cluster stack yet: the deploy creates 1 GPU node groups" in row.reason


def test_a_new_instance_type_under_running_nodes_warns_that_the_group_rolls(aws, moto_endpoint, moto_clients,
                                                                           tmp_path):
    deploy_groups(moto_endpoint, prod(tmp_path), gpu_group("p5", nodes=4))
    rows = judged(prod(tmp_path, gpuNodegroups=p5(instanceType="p5en.48xlarge")), moto_clients)
    assert [n for n, r in rows.items() if r.status != PASS] == [ROW], rows
    row = rows[ROW]
    assert row.status == WARN
    for words in ("rolls p5 (instanceType p5en.48xlarge, deployed p5.48xlarge", "which has 4 nodes",
                  "one node at a time", "managed-node-update-behavior.html", "aws-resource-ec2-launchtemplate.html",
                  "last checkpoint"):
        assert words in row.reason, row.reason


def test_a_roll_of_a_group_at_desired_size_0_passes_naming_it(aws, moto_endpoint, moto_clients, tmp_path):
    deploy_groups(moto_endpoint, prod(tmp_path), gpu_group("p5", nodes=0))
    row = judged(prod(tmp_path, gpuNodegroups=p5(instanceType="p5en.48xlarge")), moto_clients)[ROW]
    assert row.status == PASS and "rolls p5 (instanceType p5en.48xlarge" in row.reason, row.reason
    assert "at desired size 0" in row.reason and "no run loses work" in row.reason, row.reason


def test_another_reservation_rolls_the_group(aws, moto_endpoint, moto_clients, tmp_path):
    deploy_groups(moto_endpoint, prod(tmp_path), gpu_group("p5", nodes=2))
    row = judged(prod(tmp_path, gpuNodegroups=p5(capacity={"type": "reserved", "reservationId": OTHER})),
                 moto_clients)[ROW]
    assert row.status == WARN, row.reason
    assert f"rolls p5 (capacity.reservationId {OTHER}, deployed {RESERVATION})" in row.reason, row.reason


def test_a_reserved_group_made_a_capacity_block_group_under_running_nodes_fails(aws, moto_endpoint, moto_clients,
                                                                                 tmp_path):
    deploy_groups(moto_endpoint, prod(tmp_path), gpu_group("p5", nodes=4))
    env = prod(tmp_path, gpuNodegroups=p5(capacity={"type": "capacityBlock", "reservationId": BLOCK}))
    row = judged(env, moto_clients)[ROW]
    assert row.status == FAIL
    for words in ("replaces p5 (capacity.type makes CapacityType CAPACITY_BLOCK, deployed ON_DEMAND)",
                  "which has 4 nodes", "aws-resource-eks-nodegroup.html", "Update requires: Replacement",
                  "must be at desired size 0 first", "update-nodegroup-config"):
        assert words in row.reason, row.reason


def test_a_renamed_reserved_group_under_running_nodes_fails_saying_it_is_deleted(aws, moto_endpoint, moto_clients,
                                                                                 tmp_path):
    deploy_groups(moto_endpoint, prod(tmp_path), gpu_group("p5", nodes=4))
    row = judged(prod(tmp_path, gpuNodegroups=p5(name="p5-reserved")), moto_clients)[ROW]
    assert row.status == FAIL
    assert "gpuNodegroups has no group p5 (renamed or removed): the group is deleted" in row.reason, row.reason


def test_a_capacity_block_group_rolled_while_it_has_nodes_fails_citing_the_desired_size_rule(aws, moto_endpoint,
                                                                                             moto_clients, tmp_path):
    block = p5(capacity={"type": "capacityBlock", "reservationId": BLOCK})
    deploy_groups(moto_endpoint, prod(tmp_path, gpuNodegroups=block),
                  gpu_group("p5", reservation=BLOCK, block=True, nodes=2))
    other = "cr-0bbbbbbbbbbbbbbbb"
    row = judged(prod(tmp_path, gpuNodegroups=p5(capacity={"type": "capacityBlock", "reservationId": other})),
                 moto_clients)[ROW]
    assert row.status == FAIL
    for words in (f"rolls p5 (capacity.reservationId {other}, deployed {BLOCK})", "capacity-blocks-mng.html",
                  "python -m ops capacity-block scale-to-zero --env prod --group GROUP"):
        assert words in row.reason, row.reason


def test_an_on_demand_group_replaced_under_running_nodes_warns(aws, moto_endpoint, moto_clients, tmp_path):
    """A release before this one set InstanceTypes on the group; moving it to the launch template is
    a replacement (README, "What replaces GPU nodes")."""
    on_demand = p5(capacity={"type": "onDemand"})
    deploy_groups(moto_endpoint, prod(tmp_path, gpuNodegroups=on_demand),
                  gpu_group("p5", reservation=None, instance_types=True, nodes=2))
    row = judged(prod(tmp_path, gpuNodegroups=on_demand), moto_clients)[ROW]
    assert row.status == WARN
    assert "replaces p5 (InstanceTypes leaves the node group for its launch template" in row.reason, row.reason


def test_a_group_whose_nodes_cannot_be_counted_is_judged_as_running(aws, moto_endpoint, moto_clients, tmp_path):
    deploy_groups(moto_endpoint, prod(tmp_path), gpu_group("p5", nodes=None))
    row = judged(prod(tmp_path, gpuNodegroups=p5(capacity={"type": "capacityBlock", "reservationId": BLOCK})),
                 moto_clients)[ROW]
    assert row.status == FAIL and "whose nodes could not be counted" in row.reason, row.reason


def test_moving_the_training_zone_replaces_the_groups_too(aws, moto_endpoint, moto_clients, tmp_path):
    deploy_groups(moto_endpoint, prod(tmp_path, trainingAvailabilityZone="us-east-1b"), gpu_group("p5", nodes=2))
    rows = judged(prod(tmp_path), moto_clients)
    assert rows[redeploy.FILE_SYSTEM_ROW].status == FAIL
    row = rows[ROW]
    assert row.status == FAIL
    assert "replaces p5 (Subnets: trainingAvailabilityZone us-east-1a, deployed us-east-1b)" in row.reason, row.reason


@pytest.mark.parametrize("code", ["AccessDenied", "ThrottlingException"])
def test_a_group_eks_will_not_count_leaves_the_other_groups_judged(aws, moto_endpoint, tmp_path, code):
    """EKS answers an error for one group's DescribeNodegroup: that group alone is uncountable, and
    the reserved group replaced under its 4 nodes still fails the row. (EKS lists node groups by
    name, so finding p5's describes Gpup5-generated before Gputuning-generated.)"""
    from botocore.exceptions import ClientError
    from ops.aws import clients

    tuning = {"name": "tuning", "instanceType": "g5.48xlarge", "minSize": 0, "maxSize": 4, "desiredSize": 0,
          "capacity": {"type": "onDemand"}}
    deploy_groups(moto_endpoint, prod(tmp_path, gpuNodegroups=p5() + [tuning]), gpu_group("p5", nodes=4),
                  gpu_group("tuning", "g5.48xlarge", reservation=None, nodes=2))
    aws_clients = clients(REGION)

    def refuse_tuning(params, **_):
        if params.get("nodegroupName") == "Gputuning-generated":
            raise ClientError({"Error": {"Code": code, "Message": "not this one"}}, "DescribeNodegroup")

    aws_clients.eks.meta.events.register("before-parameter-build.eks.DescribeNodegroup", refuse_tuning)
    env = prod(tmp_path, gpuNodegroups=p5(capacity={"type": "capacityBlock", "reservationId": BLOCK})
               + [{**tuning, "instanceType": "g5.24xlarge"}])
    row = judged(env, aws_clients)[ROW]
    assert row.status == FAIL, row.reason
    assert "replaces p5 (capacity.type makes CapacityType CAPACITY_BLOCK, deployed ON_DEMAND), which has 4 nodes" \
        in row.reason, row.reason
    assert "rolls tuning (instanceType g5.24xlarge, deployed g5.48xlarge), whose nodes could not be counted" \
        in row.reason, row.reason
    assert code in row.reason, row.reason


def test_a_cluster_eks_will_not_describe_leaves_a_replaced_reserved_group_failing(aws, moto_endpoint, tmp_path):
    from botocore.exceptions import ClientError
    from ops.aws import clients

    deploy_groups(moto_endpoint, prod(tmp_path), gpu_group("p5", nodes=4))
    aws_clients = clients(REGION)

    def refuse(**_):
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "DescribeCluster")

    aws_clients.eks.meta.events.register("before-parameter-build.eks.DescribeCluster", refuse)
    row = judged(prod(tmp_path, gpuNodegroups=p5(capacity={"type": "capacityBlock", "reservationId": BLOCK})),
                 aws_clients)[ROW]
    assert row.status == FAIL, row.reason
    assert "whose nodes could not be counted (DescribeCluster not permitted (AccessDenied)" in row.reason, row.reason


def test_a_release_that_changes_the_root_volume_or_the_metadata_options_warns_that_the_group_rolls(
        aws, moto_endpoint, moto_clients, tmp_path):
    """Neither is in cdk.json, but a release that changes them (cdk_constructs, config/node_launch.py)
    makes a new launch template version like any other launch data, and EKS rolls the group
    (AWS::EC2::LaunchTemplate LaunchTemplateData: "Update requires: No interruption")."""
    older = {"VolumeSize": 200, "VolumeType": "gp2", "Encrypted": True, "DeleteOnTermination": True}
    deploy_groups(moto_endpoint, prod(tmp_path), gpu_group(
        "p5", nodes=4, volume=older, metadata={"HttpEndpoint": "enabled", "HttpTokens": "optional",
                                               "HttpPutResponseHopLimit": 2}))
    row = judged(prod(tmp_path), moto_clients)[ROW]
    assert row.status == WARN, row.reason
    for words in ("rolls p5 (the root volume 100 GiB gp3 3000 IOPS 125 MB/s, deployed 200 GiB gp2",
                  "the instance metadata options IMDS enabled, tokens required, hop limit 1, deployed IMDS enabled, "
                  "tokens optional, hop limit 2", "which has 4 nodes"):
        assert words in row.reason, row.reason


def _refusing_subnets(code: str = "UnauthorizedOperation"):
    """Clients whose EC2 DescribeSubnets answers `code`, as a role without ec2:DescribeSubnets gets."""
    from botocore.exceptions import ClientError
    from ops.aws import clients

    aws_clients = clients(REGION)

    def refuse(**_):
        raise ClientError({"Error": {"Code": code, "Message": "not allowed"}}, "DescribeSubnets")

    aws_clients.ec2.meta.events.register("before-parameter-build.ec2.DescribeSubnets", refuse)
    return aws_clients


def node_group_row(env, aws_clients):
    """The row alone, as preflight runs it (guarded: an API error that escapes it warns the whole row)."""
    from ops.preflight import guarded

    [row] = guarded([(ROW, lambda: [redeploy_nodegroups.nodegroup_row(env, aws_clients)])])
    return row


def test_a_subnet_ec2_will_not_describe_leaves_the_groups_judged_on_the_rest(aws, moto_endpoint, tmp_path):
    """Only the Subnets comparison needs the training subnet: a reserved group replaced under its 4
    nodes still fails, and the row names the subnet it could not read."""
    deploy_groups(moto_endpoint, prod(tmp_path), gpu_group("p5", nodes=4))
    row = node_group_row(prod(tmp_path, gpuNodegroups=p5(capacity={"type": "capacityBlock", "reservationId": BLOCK})),
                         _refusing_subnets())
    assert row.status == FAIL, row.reason
    for words in ("replaces p5 (capacity.type makes CapacityType CAPACITY_BLOCK, deployed ON_DEMAND), "
                  "which has 4 nodes",
                  "the training subnet could not be read", "UnauthorizedOperation",
                  "a moved training subnet would replace every GPU group"):
        assert words in row.reason, row.reason


def test_an_unchanged_configuration_whose_subnet_ec2_will_not_describe_warns_naming_only_that(aws, moto_endpoint,
                                                                                          tmp_path):
    deploy_groups(moto_endpoint, prod(tmp_path), gpu_group("p5", nodes=4))
    row = node_group_row(prod(tmp_path), _refusing_subnets())
    assert row.status == WARN, row.reason
    assert row.reason.startswith("no GPU node group is rolled or replaced by its launch template or node group "
                                 "properties (1 deployed, prod-Cluster), but the training subnet could not be read"), \
        row.reason
    assert "could not check" not in row.reason, row.reason
