"""EfaNodegroup: every EFA device in EC2's layout, placement rules per capacity type, validation."""

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Template

from cdk_constructs.efa_nodegroup import EfaNodegroup
from cdk_constructs.managed_nodegroup import NodegroupOptions
from config.instance_types import INSTANCE_TYPES
from config.kubernetes import EFA_LABEL, GPU_LABEL, GPU_TAINT_KEY, NODEGROUP_LABEL, ROLE_LABEL

CLUSTER_SG = "sg-0123456789abcdef0"
RESERVATION = "cr-0123456789abcdef0"
# name -> (instance type, capacity type, reservation id)
GROUPS = {
    "p4d": ("p4d.24xlarge", "onDemand", None),
    "p4de": ("p4de.24xlarge", "reserved", RESERVATION),
    "p5": ("p5.48xlarge", "onDemand", None),
    "p5e": ("p5e.48xlarge", "reserved", RESERVATION),
    "p5en": ("p5en.48xlarge", "capacityBlock", RESERVATION),
    "g5-48": ("g5.48xlarge", "onDemand", None),
    "g5-1": ("g5.xlarge", "onDemand", None),
}
EXPECTED_EFA = {"p4d": 4, "p4de": 4, "p5": 32, "p5e": 32, "p5en": 16, "g5-48": 1, "g5-1": 0}


class Fixture:
    def __init__(self):
        app = cdk.App()
        self.stack = cdk.Stack(app, "Test", env=cdk.Environment(account="111111111111", region="us-west-2"))
        self.vpc = ec2.Vpc(self.stack, "Vpc", availability_zones=["us-west-2a", "us-west-2b"], nat_gateways=1)
        self.cluster = eks.Cluster.from_cluster_attributes(
            self.stack, "Cluster", cluster_name="training", vpc=self.vpc, cluster_security_group_id=CLUSTER_SG)
        self.subnet = self.vpc.private_subnets[1]

    def group(self, id, **overrides):
        options = dict(name=id, instance_type=INSTANCE_TYPES["p5.48xlarge"], min_size=0, max_size=2, desired_size=0)
        options.update(overrides)
        return EfaNodegroup(self.stack, id, cluster=self.cluster, subnet=self.subnet,
                            options=NodegroupOptions(**options))


@pytest.fixture(scope="module")
def built():
    f = Fixture()
    groups = {name: f.group(name, instance_type=INSTANCE_TYPES[t], capacity_type=c, reservation_id=r)
              for name, (t, c, r) in GROUPS.items()}
    template = Template.from_stack(f.stack).to_json()
    return f, groups, template


def resource(built, construct):
    f, _, template = built
    element = construct if isinstance(construct, cdk.CfnElement) else construct.node.default_child
    return template["Resources"][f.stack.get_logical_id(element)]


def launch_data(built, name):
    return resource(built, built[1][name].launch_template.resource)["Properties"]["LaunchTemplateData"]


def nodegroup(built, name):
    return resource(built, built[1][name].nodegroup)["Properties"]


@pytest.mark.parametrize("name", list(GROUPS))
def test_attaches_every_efa_device_of_the_instance_type(built, name):
    interfaces = launch_data(built, name).get("NetworkInterfaces", [])
    efa_only = [i for i in interfaces if i["InterfaceType"] == "efa-only"]
    assert len(efa_only) == EXPECTED_EFA[name] == INSTANCE_TYPES[GROUPS[name][0]].efa_interfaces
    # Plus the ENA primary wherever interfaces are named at all.
    assert len(interfaces) == (EXPECTED_EFA[name] + 1 if EXPECTED_EFA[name] else 0)
    assert built[1][name].efa_interface_count == EXPECTED_EFA[name]


@pytest.mark.parametrize("name", ["p4d", "p5", "p5en", "g5-48"])
def test_interfaces_follow_the_ec2_layout_one_efa_per_network_card(built, name):
    """"Maximize network bandwidth on Amazon EC2 instances with multiple network cards", EC2 User
    Guide (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html): ENA primary
    at card 0 device 0, EFA-only at card 0 device 1, EFA-only at device 0 of every further card."""
    interfaces = launch_data(built, name)["NetworkInterfaces"]
    layout = [(i["NetworkCardIndex"], i["DeviceIndex"], i["InterfaceType"]) for i in interfaces]
    assert layout[:2] == [(0, 0, "interface"), (0, 1, "efa-only")]
    assert layout[2:] == [(card, 0, "efa-only") for card in range(1, EXPECTED_EFA[name])]
    assert layout == [i.as_tuple() for i in INSTANCE_TYPES[GROUPS[name][0]].network_interfaces()]


def test_every_interface_carries_the_cluster_and_efa_security_groups(built):
    efa_sg = built[1]["p5"].efa_security_group
    efa_ref = {"Fn::GetAtt": [built[0].stack.get_logical_id(efa_sg.node.default_child), "GroupId"]}
    for interface in launch_data(built, "p5")["NetworkInterfaces"]:
        assert interface["Groups"] == [CLUSTER_SG, efa_ref]
        assert interface["DeleteOnTermination"] is True


def test_launch_template_sets_no_security_group_ids_beside_interfaces(built):
    for name in GROUPS:
        assert "SecurityGroupIds" not in launch_data(built, name)


def test_on_demand_efa_groups_get_a_cluster_placement_group(built):
    for name in ("p4d", "p5", "g5-48"):
        pg = built[1][name].placement_group
        assert pg is not None and resource(built, pg)["Properties"]["Strategy"] == "cluster"
        assert launch_data(built, name)["Placement"] == {"GroupName": {"Ref": built[0].stack.get_logical_id(pg)}}


@pytest.mark.parametrize("name", ["p4de", "p5e", "p5en"])
def test_reserved_and_capacity_block_groups_get_no_placement_group(built, name):
    assert built[1][name].placement_group is None
    assert "Placement" not in launch_data(built, name)


def test_gpu_group_without_efa_gets_no_placement_group_and_no_efa_label(built):
    assert built[1]["g5-1"].placement_group is None
    assert built[1]["g5-1"].efa_security_group is None
    assert EFA_LABEL not in nodegroup(built, "g5-1")["Labels"]


def test_on_demand_group_has_no_reservation_or_market_options(built):
    data = launch_data(built, "p5")
    assert "CapacityReservationSpecification" not in data and "InstanceMarketOptions" not in data
    assert nodegroup(built, "p5")["CapacityType"] == "ON_DEMAND"


def test_reserved_group_targets_its_capacity_reservation(built):
    data = launch_data(built, "p5e")
    assert data["CapacityReservationSpecification"] == {"CapacityReservationTarget": {"CapacityReservationId": RESERVATION}}
    assert "InstanceMarketOptions" not in data
    assert nodegroup(built, "p5e")["CapacityType"] == "ON_DEMAND"


def test_capacity_block_group_uses_capacity_block_market_and_capacity_type(built):
    data = launch_data(built, "p5en")
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["CapacityReservationSpecification"] == {"CapacityReservationTarget": {"CapacityReservationId": RESERVATION}}
    assert nodegroup(built, "p5en")["CapacityType"] == "CAPACITY_BLOCK"


@pytest.mark.parametrize("name", list(GROUPS))
def test_nodegroup_uses_the_nvidia_al2023_ami_in_the_one_subnet(built, name):
    props = nodegroup(built, name)
    assert props["AmiType"] == "AL2023_x86_64_NVIDIA"
    # The type is named once, in the launch template (EKS launch-templates.html).
    assert "InstanceTypes" not in props and launch_data(built, name)["InstanceType"] == GROUPS[name][0]
    subnet_id = built[0].stack.get_logical_id(built[0].subnet.node.default_child)
    assert props["Subnets"] == [{"Ref": subnet_id}]


def test_labels_and_gpu_taint(built):
    props = nodegroup(built, "p5")
    assert props["Labels"] == {NODEGROUP_LABEL: "p5", ROLE_LABEL: "training", GPU_LABEL: "true", EFA_LABEL: "true"}
    assert props["Taints"] == [{"Key": GPU_TAINT_KEY, "Value": "true", "Effect": "NO_SCHEDULE"}]


@pytest.mark.parametrize("name", list(GROUPS))
def test_imdsv2_required_and_encrypted_gp3_root_for_the_os(built, name):
    data = launch_data(built, name)
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    [root] = data["BlockDeviceMappings"]
    assert root["Ebs"]["Encrypted"] is True and root["Ebs"]["VolumeType"] == "gp3"
    # Every GPU type in the table has NVMe instance storage, where images and pod data go.
    assert root["Ebs"]["VolumeSize"] == 100


def test_efa_security_group_is_self_referencing(built):
    _, groups, template = built
    sg_id = built[0].stack.get_logical_id(groups["p4d"].efa_security_group.node.default_child)
    ref = {"Fn::GetAtt": [sg_id, "GroupId"]}
    rules = [r["Properties"] for r in template["Resources"].values()
             if r["Type"] in ("AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress")
             and r["Properties"]["GroupId"] == ref]
    assert {(r.get("SourceSecurityGroupId") or r.get("DestinationSecurityGroupId")) == ref for r in rules} == {True}
    assert {r["IpProtocol"] for r in rules} == {"-1"} and len(rules) == 2


@pytest.mark.parametrize("overrides, message", [
    ({"instance_type": INSTANCE_TYPES["m5.2xlarge"]}, "m5.2xlarge has no GPUs"),
    ({"min_size": 3, "max_size": 2, "desired_size": 2}, "min_size <= desired_size <= max_size"),
    ({"min_size": -1}, "sizes must be >= 0"),
    ({"max_size": 0}, "max_size >= 1"),
    ({"capacity_type": "spot"}, "capacity_type must be one of onDemand, reserved, capacityBlock"),
    ({"capacity_type": "reserved"}, "reserved capacity needs reservation_id"),
    ({"capacity_type": "capacityBlock", "reservation_id": "cr-123"}, "capacityBlock capacity needs reservation_id"),
    ({"reservation_id": RESERVATION}, "reservation_id is only for reserved or capacityBlock"),
    ({"instance_type": INSTANCE_TYPES["g5.48xlarge"], "capacity_type": "capacityBlock", "reservation_id": RESERVATION},
     "capacity blocks are not sold for g5.48xlarge"),
    ({"root_volume_gib": 50}, "root_volume_gib must be at least 100"),
    ({"name": ""}, "name must not be empty"),
    ({"capacity_type": "capacityBlock", "reservation_id": RESERVATION, "desired_size": 1},
     "a capacityBlock group rests at min_size 0 and desired_size 0"),
])
def test_bad_props_fail_eagerly_with_a_clear_message(overrides, message):
    f = Fixture()
    with pytest.raises(ValueError, match="^Test/Bad(/Group)?: ") as err:
        f.group("Bad", **overrides)
    assert message in str(err.value)


def test_launch_data_is_identical_on_every_synth():
    """A new launch template version recycles every node of the group (EKS launch-templates.html):
    the same props must give byte-identical launch data, user data included."""
    def data():
        f = Fixture()
        group = f.group("p5", capacity_type="capacityBlock", reservation_id=RESERVATION)
        return Template.from_stack(f.stack).to_json()["Resources"][
            f.stack.get_logical_id(group.launch_template.resource)]["Properties"]["LaunchTemplateData"]
    first = data()
    assert "UserData" in first and first == data()
