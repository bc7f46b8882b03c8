"""Node groups in the synthesized cluster template, checked against the AWS documentation that
states each rule. The "blocks" variant carries a capacity-block, a reserved and two On-Demand
GPU groups (one with repair turned off), so every capacity type is synthesized here.
"""

from __future__ import annotations

import email
import re

import pytest
import yaml

from cdk_constructs.managed_nodegroup import ManagedNodegroup
from config.kubernetes import EFA_HUGEPAGES_2MI, GPU_TAINT_EFFECT, GPU_TAINT_KEY, GPU_TAINT_VALUE, SYSTEM_NODEGROUP
from synth_helpers import BLOCK, synth

VARIANTS = ("dev", "prod", "blocks")
HUGEPAGE_MIB = 2


@pytest.fixture(scope="module", params=VARIANTS)
def synthesized(request):
    return synth(request.param)


@pytest.fixture(scope="module")
def blocks():
    return synth("blocks")


def resources(s) -> dict:
    return s.template_json("cluster")["Resources"]


def nodegroup(s, name: str) -> dict:
    stack = s.stage.cluster
    return resources(s)[stack.get_logical_id(stack.nodegroups[name].node.default_child)]["Properties"]


def launch_template_id(props: dict) -> str:
    return props["LaunchTemplate"]["Id"]["Ref"]


def launch_data(s, name: str) -> dict:
    return resources(s)[launch_template_id(nodegroup(s, name))]["Properties"]["LaunchTemplateData"]


def user_data_parts(data: dict) -> dict[str, str]:
    """content type -> payload of the launch template's MIME multi-part user data."""
    if "UserData" not in data:
        return {}
    message = email.message_from_string(data["UserData"]["Fn::Base64"])
    assert message.is_multipart() and message.get_content_type() == "multipart/mixed"
    return {part.get_content_type(): part.get_payload() for part in message.get_payload()}


def node_config(data: dict) -> dict:
    return yaml.safe_load(user_data_parts(data)["application/node.eks.aws"])


def gpu_groups(s):
    return s.config.gpu_nodegroups


# --- 1. capacity blocks ------------------------------------------------------------------------

def test_capacity_block_group_names_its_instance_type_in_the_launch_template_and_not_on_the_group(blocks):
    """"Create a managed node group with Capacity Blocks for ML", Amazon EKS User Guide,
    https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html: the launch
    template carries InstanceMarketOptions.MarketType capacity-block, the CapacityReservationTarget
    and InstanceType; the node group's capacity type is CAPACITY_BLOCK, otherwise CreateNodegroup
    is rejected. "Customize managed nodes with launch templates",
    https://docs.aws.amazon.com/eks/latest/userguide/launch-templates.html: with an instance type in
    the launch template, the node group may name none."""
    props = nodegroup(blocks, "p5-block")
    data = launch_data(blocks, "p5-block")
    assert "InstanceTypes" not in props
    assert data["InstanceType"] == "p5.48xlarge"
    assert props["CapacityType"] == "CAPACITY_BLOCK"
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["CapacityReservationSpecification"] == {"CapacityReservationTarget": {"CapacityReservationId": BLOCK}}


def test_every_group_names_its_instance_type_in_exactly_one_place(synthesized):
    """"Customize managed nodes with launch templates" (launch-templates.html): "If you specify an
    instance type in a launch template ... you can't specify any instance types" on the node
    group; a setting in both places fails create and update."""
    for name in synthesized.stage.cluster.nodegroups:
        props, data = nodegroup(synthesized, name), launch_data(synthesized, name)
        assert "InstanceTypes" not in props, name
        assert data["InstanceType"], name


def test_capacity_block_group_starts_and_rests_at_zero(blocks):
    """capacity-blocks-mng.html: "When upgrading managed node groups with Capacity Blocks, make sure
    that the desired size of the node group is set to 0"; nodes come up at the block's start
    through `ops capacity-block schedule`, not through the template."""
    scaling = nodegroup(blocks, "p5-block")["ScalingConfig"]
    assert scaling["MinSize"] == 0 and scaling["DesiredSize"] == 0


# --- 8. updates that do not recycle or surge GPU nodes --------------------------------------------

def test_gpu_groups_update_by_terminating_first_and_never_force_past_a_disruption_budget(synthesized):
    """"Understand each phase of node updates", Amazon EKS User Guide,
    https://docs.aws.amazon.com/eks/latest/userguide/managed-node-update-behavior.html: the minimal
    update strategy "terminat[es] the old nodes before creating the new ones, so that total
    capacity never increases beyond your configured quantity" (the default one launches extra
    nodes first, which a reservation cannot hold); without the force flag a Pod that will not
    leave fails the update instead of being killed."""
    for group in gpu_groups(synthesized):
        props = nodegroup(synthesized, group.name)
        assert props["UpdateConfig"] == {"MaxUnavailable": 1, "UpdateStrategy": "MINIMAL"}, group.name
        assert props["ForceUpdateEnabled"] is False, group.name


def test_node_groups_pin_the_launch_template_version_cloudformation_created(synthesized):
    """launch-templates.html: updating a node group "to a different version of your launch template"
    recycles all its nodes. The group names the template's LatestVersionNumber, which changes only
    when the launch data changes; never $Latest or $Default."""
    for name in synthesized.stage.cluster.nodegroups:
        spec = nodegroup(synthesized, name)["LaunchTemplate"]
        assert spec["Version"] == {"Fn::GetAtt": [spec["Id"]["Ref"], "LatestVersionNumber"]}, name


def test_system_and_cpu_groups_keep_the_default_surge_strategy(synthesized):
    """managed-node-update-behavior.html recommends the default strategy where capacity is not
    constrained: new nodes first, so cluster services never lose capacity."""
    cpu = [SYSTEM_NODEGROUP, *(g.name for g in synthesized.config.cpu_nodegroups)]
    for name in cpu:
        assert nodegroup(synthesized, name)["UpdateConfig"] == {"MaxUnavailable": 1, "UpdateStrategy": "DEFAULT"}


# --- 9. node auto repair --------------------------------------------------------------------------

def test_gpu_groups_repair_nodes_unless_the_group_turns_it_off(synthesized):
    """"Enable node auto repair and investigate node health issues", Amazon EKS User Guide,
    https://docs.aws.amazon.com/eks/latest/userguide/node-health.html: auto repair is set per
    managed node group (node-repair-config enabled=true); with the node monitoring agent it acts
    on AcceleratedHardwareReady after 10 minutes."""
    for group in gpu_groups(synthesized):
        repair = nodegroup(synthesized, group.name)["NodeRepairConfig"]
        assert repair == {"Enabled": group.auto_repair}, group.name


def test_the_blocks_variant_turns_repair_off_on_one_group(blocks):
    assert nodegroup(blocks, "g5")["NodeRepairConfig"] == {"Enabled": False}
    assert nodegroup(blocks, "p5-block")["NodeRepairConfig"] == {"Enabled": True}


# --- 10. huge pages for EFA pods ------------------------------------------------------------------

def _hugepages_script(data: dict) -> str:
    return user_data_parts(data).get("text/x-shellscript", "")


def test_efa_groups_reserve_the_huge_pages_an_efa_pod_requests_before_kubelet_starts(synthesized):
    """"Customize managed nodes with launch templates" (launch-templates.html, "Amazon EC2 user
    data"): managed node group user data is a MIME multi-part archive merged with EKS's own.
    "Manage HugePages" (https://kubernetes.io/docs/tasks/manage-hugepages/scheduling-hugepages/):
    nodes must pre-allocate huge pages; pages allocated after kubelet starts are not reported until
    it restarts. A user-data shell script runs in cloud-final, and nodeadm-run (which starts
    kubelet) is ordered After=cloud-final.service in the AL2023 AMI."""
    needed = int(EFA_HUGEPAGES_2MI.removesuffix("Mi")) // HUGEPAGE_MIB
    for group in gpu_groups(synthesized):
        script = _hugepages_script(launch_data(synthesized, group.name))
        if not group.instance_type.supports_efa:
            assert "nr_hugepages" not in script, group.name
            continue
        assert script.startswith("#!/bin/bash"), group.name
        pages = re.search(r"^EFA_HUGEPAGES_2MI=(\d+)$", script, re.M)
        assert pages and int(pages.group(1)) >= needed, group.name
        # Applied now and on every boot, never lowering a larger reservation already in place.
        assert "sysctl -w vm.nr_hugepages=" in script and "/etc/sysctl.d/" in script, group.name


def test_groups_without_efa_carry_no_huge_page_script(synthesized):
    for name in (SYSTEM_NODEGROUP, *(g.name for g in synthesized.config.cpu_nodegroups)):
        assert "nr_hugepages" not in _hugepages_script(launch_data(synthesized, name)), name


# --- 11. local NVMe -------------------------------------------------------------------------------

def test_groups_with_instance_storage_put_kubelet_and_containerd_on_a_raid0_of_it(synthesized):
    """nodeadm NodeConfig API (awslabs/amazon-eks-ami, doc/nodeadm/doc/api.md, LocalStorageOptions):
    strategy RAID0 builds one array from every NVMe instance store disk and bind-mounts
    /var/lib/kubelet, /var/lib/containerd and /var/log/pods onto it; the root volume then only holds
    the operating system."""
    for name, group_type in _all_groups(synthesized):
        data = launch_data(synthesized, name)
        root = data["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"]
        if group_type.local_nvme_disks:
            config = node_config(data)
            assert config["apiVersion"] == "node.eks.aws/v1alpha1" and config["kind"] == "NodeConfig"
            assert config["spec"]["instance"]["localStorage"] == {"strategy": "RAID0"}, name
            assert root == 100, name
        else:
            assert "application/node.eks.aws" not in user_data_parts(data), name
            assert root == (500 if group_type.is_gpu else 100), name


def test_node_user_data_leaves_max_pods_to_eks(synthesized):
    """"Choose an optimal Amazon EC2 node instance type", section "How maxPods is determined"
    (https://docs.aws.amazon.com/eks/latest/userguide/choosing-instance-type.html#max-pods-precedence):
    for a managed node group without a custom AMI, the maxPods EKS puts in the node's user data
    "takes precedence over any other maxPods configuration". Our launch templates name no AMI, so a
    maxPods of ours would be silently overridden: none is written."""
    for name, _ in _all_groups(synthesized):
        data = launch_data(synthesized, name)
        assert "ImageId" not in data, name
        part = user_data_parts(data).get("application/node.eks.aws")
        assert part is None or "maxPods" not in part, name


def test_gpu_groups_let_containers_lock_memory_before_containerd_starts(synthesized):
    """EFA registers (locks) its buffers; containers inherit containerd's RLIMIT_MEMLOCK (nodeadm's
    base OCI spec sets only RLIMIT_NOFILE), and limits.d does not reach services. Every GPU group's
    script raises containerd's limit to what the GPU check expects in a pod
    (config.kubernetes.GPU_CONTAINER_MEMLOCK); CPU and system groups keep the default."""
    import subprocess

    from config.node_user_data import CONTAINERD_DROP_IN
    from config.kubernetes import GPU_CONTAINER_MEMLOCK

    assert GPU_CONTAINER_MEMLOCK == "unlimited"
    for name, group_type in _all_groups(synthesized):
        script = _hugepages_script(launch_data(synthesized, name))
        if not group_type.is_gpu:
            assert "LimitMEMLOCK" not in script, name
            continue
        assert f"printf '[Service]\\nLimitMEMLOCK=infinity\\n' > {CONTAINERD_DROP_IN}" in script, name
        assert script.index("LimitMEMLOCK") < script.index("systemctl daemon-reload"), name
        check = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, timeout=30)
        assert check.returncode == 0, check.stderr


def _all_groups(s):
    yield SYSTEM_NODEGROUP, s.config.system_nodegroup.instance_type
    for group in s.config.training_nodegroups:
        yield group.name, group.instance_type


def test_launch_data_is_the_same_on_every_synth(blocks):
    """A node group is recycled whenever its launch template version changes, so nothing in the
    launch data may differ between two synths of one config (a random MIME boundary would)."""
    again = synth.__wrapped__("blocks")
    for name in blocks.stage.cluster.nodegroups:
        assert launch_data(again, name) == launch_data(blocks, name), name


# --- 12. EFA interface layout ---------------------------------------------------------------------

def test_efa_interfaces_follow_the_ec2_guide(synthesized):
    """"Maximize network bandwidth on Amazon EC2 instances with multiple network cards", Amazon EC2
    User Guide, https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html: the
    primary interface (card 0, device 0) is ENA; an EFA-only interface on card 0 device 1; one
    EFA-only interface at device 0 on every further card (P5/P5e use case 1)."""
    for group in gpu_groups(synthesized):
        interfaces = launch_data(synthesized, group.name).get("NetworkInterfaces", [])
        layout = [(i["NetworkCardIndex"], i["DeviceIndex"], i["InterfaceType"]) for i in interfaces]
        cards = group.instance_type.efa_interfaces
        if not cards:
            assert layout == [], group.name
            continue
        expected = [(0, 0, "interface"), (0, 1, "efa-only")] + [(c, 0, "efa-only") for c in range(1, cards)]
        assert layout == expected, group.name


# --- structure: one node-group path, shared constants ---------------------------------------------

def test_every_node_group_is_built_by_the_one_node_group_construct(synthesized):
    for name, group in synthesized.stage.cluster.nodegroups.items():
        assert isinstance(group.node.scope, ManagedNodegroup), name


def test_gpu_taint_comes_from_the_shared_constants(synthesized):
    effect = re.sub(r"(?<!^)(?=[A-Z])", "_", GPU_TAINT_EFFECT).upper()  # NoSchedule -> NO_SCHEDULE
    for group in gpu_groups(synthesized):
        taints = nodegroup(synthesized, group.name)["Taints"]
        assert taints == [{"Key": GPU_TAINT_KEY, "Value": GPU_TAINT_VALUE, "Effect": effect}]


# --- 14. reserved names ---------------------------------------------------------------------------

def test_a_training_group_named_system_cannot_replace_the_system_group():
    """The config parser refuses the name (tests/config); the stack refuses it too, so a config
    built in code cannot silently overwrite the system node group either."""
    import aws_cdk as cdk
    from dataclasses import replace

    from stacks.stage import TrainingClusterStage
    from synth_helpers import environment

    config = environment("dev")
    clash = replace(config, cpu_nodegroups=(replace(config.cpu_nodegroups[0], name=SYSTEM_NODEGROUP),))
    with pytest.raises(ValueError, match="node group name 'system' is taken"):
        TrainingClusterStage(cdk.App(), "dev", config=clash)
