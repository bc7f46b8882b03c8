"""Preflight's row for the GPU node groups this deploy would roll or replace under a running job.

A GPU node group's nodes go in two ways when a deploy changes the group (README, "What replaces GPU
nodes, and how to roll them deliberately"):
- Rolled: the group's launch template data changes (instance type, capacity reservation, the EFA
  interfaces, the placement group, the user data), so CloudFormation makes a new launch template
  version (AWS::EC2::LaunchTemplate LaunchTemplateData, "Update requires: No interruption",
  LAUNCH_TEMPLATE_PAGE) and the node group, which names that version, is updated to it: EKS replaces
  its nodes one at a time, evicting each node's pods, and an update whose pods a disruption budget
  protects fails (PodEvictionFailure, the group has no force flag) after its wait (NODE_UPDATE_PAGE).
  A capacity-block group must be at desired size 0 before such an update ("When upgrading managed
  node groups with Capacity Blocks, make sure that the desired size of the node group is set to 0",
  CAPACITY_BLOCKS_PAGE).
- Replaced: a property AWS::EKS::Nodegroup creates once changes ("Update requires: Replacement",
  NODEGROUP_PAGE; cfn-lint's schema lists them as createOnlyProperties): CapacityType
  (capacity.type to or from capacityBlock), Subnets (trainingAvailabilityZone, or the zone list and
  vpcCidr that place the training subnet), AmiType, or InstanceTypes (releases before the instance
  type moved into the launch template set it on the group). CloudFormation creates the new group
  first and deletes the old one, every node at once, in its clean-up; a group renamed or taken out of
  gpuNodegroups is deleted the same way.

Each restart of a run costs the work since its last checkpoint and the pause until every worker is
back; a group at desired size 0 (what the live node group says, not cdk.json: `ops capacity-block
schedule` and people scale groups) loses nothing, so it passes. Otherwise:
- fail: a reserved or capacity-block group replaced or deleted while it has nodes (the new group asks
  the reservation for nodes the old one still holds, so it cannot come up until the old one is gone,
  and nothing brings the released capacity back to this account), and a capacity-block group rolled
  while it has nodes (EKS requires desired size 0). Scaling the group to 0 first is the way through.
- warn: any other roll or replacement of a group with nodes, naming the group and what changes.
A group whose nodes cannot be counted (no live group found, or EKS answers an error for it or for
the cluster) is judged as one with nodes, so a reserved or capacity-block group replaced then fails:
passing it would risk the reservation, which a re-run of preflight once EKS answers cannot give
back. Such an error is that group's alone; the other groups are still counted and judged.

The deployed side is the Cluster stack's template as deployed (GetTemplate), where CloudFormation
decides what changes; the new side is computed from the configuration with what the constructs use
(config/instance_types.py's interface layout, config/node_user_data.py's user data) rather
than a synth, which the pipeline's preflight step (boto3 and jsonschema only) cannot run. The root
volume and the metadata options are not in cdk.json but roll the nodes all the same when a release
changes them (config/node_launch.py), so they are compared too. The interfaces' security groups are
references to the cluster's and the EFA group's, whose ids change only when those are replaced.
tests/stacks/test_nodegroup_rolls.py holds what this module reads and computes to a synth of every
capacity type and EFA layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from config.node_launch import GP3_BASELINE, METADATA_OPTIONS, ROOT_DEVICE, ROOT_VOLUME_TYPE, root_volume
from config.node_user_data import node_user_data
from config import Environment, Nodegroup
from config.kubernetes import GPU_LABEL, NODEGROUP_LABEL
from config.outputs import CLUSTER_STACK_ID, NETWORK_STACK_ID, TRAINING_SUBNET_ID_OUTPUT, stack_name
from ops.aws import api_failure_types, explain
from ops.checks import FAIL, PASS, WARN, Check
from ops.errors import OpsError
from ops.stacks import deployed_stack, deployed_stack_for, deployed_template, stack_output

ROW = "GPU node groups"

NODEGROUP_PAGE = ("https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/"
                  "aws-resource-eks-nodegroup.html")
LAUNCH_TEMPLATE_PAGE = ("https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/"
                        "aws-resource-ec2-launchtemplate.html")
NODE_UPDATE_PAGE = "https://docs.aws.amazon.com/eks/latest/userguide/managed-node-update-behavior.html"
CAPACITY_BLOCKS_PAGE = "https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html"

# What cdk_constructs/managed_nodegroup.py gives a GPU group (tests/stacks/test_nodegroup_rolls.py).
GPU_AMI_TYPE = "AL2023_x86_64_NVIDIA"
CAPACITY_BLOCK_MARKET = "capacity-block"
RESERVED_CAPACITY = ("reserved", "capacityBlock")


def capacity_type(group: Nodegroup) -> str:
    """The node group's CapacityType for `group`'s capacity.type."""
    return "CAPACITY_BLOCK" if group.capacity.type == "capacityBlock" else "ON_DEMAND"


def launch_data(group: Nodegroup) -> dict[str, Any]:
    """The parts of `group`'s launch template data that cdk.json decides, as the template writes them:
    a missing key is a property the template leaves out."""
    itype = group.instance_type
    reservation, block = group.capacity.reservation_id, group.capacity.type == "capacityBlock"
    return {
        "InstanceType": itype.name,
        "CapacityReservationId": reservation,
        "MarketType": CAPACITY_BLOCK_MARKET if block else None,
        "NetworkInterfaces": [[i.network_card_index, i.device_index, i.interface_type]
                              for i in itype.network_interfaces()],
        # cdk_constructs/efa_nodegroup.py: a cluster placement group only for on-demand EFA groups.
        "PlacementGroup": itype.supports_efa and group.capacity.type == "onDemand",
        "UserData": node_user_data(itype),
        "RootVolume": _root_volume(itype),
        "MetadataOptions": [METADATA_OPTIONS[k] for k in _METADATA_KEYS],
    }


_METADATA_KEYS = ("HttpEndpoint", "HttpTokens", "HttpPutResponseHopLimit")


def _root_volume(itype: Any) -> list[Any]:
    size = {**GP3_BASELINE, **root_volume(itype)}
    return [size["root_volume_gib"], ROOT_VOLUME_TYPE, size["root_volume_iops"], size["root_volume_throughput_mbps"]]


def deployed_launch_data(data: dict[str, Any]) -> dict[str, Any]:
    """launch_data's keys read from a deployed LaunchTemplateData."""
    user_data = data.get("UserData")
    root = [m for m in data.get("BlockDeviceMappings") or [] if m.get("DeviceName") == ROOT_DEVICE]
    ebs = (root[0].get("Ebs") or {}) if root else {}
    return {
        "InstanceType": data.get("InstanceType"),
        "CapacityReservationId": ((data.get("CapacityReservationSpecification") or {})
                                  .get("CapacityReservationTarget") or {}).get("CapacityReservationId"),
        "MarketType": (data.get("InstanceMarketOptions") or {}).get("MarketType"),
        "NetworkInterfaces": [[i.get("NetworkCardIndex"), i.get("DeviceIndex"), i.get("InterfaceType")]
                              for i in data.get("NetworkInterfaces") or []],
        "PlacementGroup": bool((data.get("Placement") or {}).get("GroupName")),
        "UserData": user_data.get("Fn::Base64") if isinstance(user_data, dict) else user_data,
        "RootVolume": [ebs.get(k) for k in ("VolumeSize", "VolumeType", "Iops", "Throughput")],
        "MetadataOptions": [(data.get("MetadataOptions") or {}).get(k) for k in _METADATA_KEYS],
    }


_LAUNCH_FIELDS = {"InstanceType": "instanceType", "CapacityReservationId": "capacity.reservationId",
                  "MarketType": "capacity.type", "NetworkInterfaces": "the EFA interfaces of instanceType",
                  "PlacementGroup": "the placement group (on-demand EFA groups only)",
                  "UserData": "the node user data (instance storage, huge pages, locked memory)",
                  "RootVolume": "the root volume", "MetadataOptions": "the instance metadata options"}


@dataclass
class Deployed:
    """A GPU node group in the deployed Cluster template."""
    name: str
    logical_id: str
    properties: dict
    launch: dict[str, Any] | None  # deployed_launch_data; None: its launch template is not in the template

    @property
    def reserved(self) -> bool:
        return bool(self.launch and self.launch["CapacityReservationId"])

    @property
    def capacity_block(self) -> bool:
        return self.properties.get("CapacityType") == "CAPACITY_BLOCK"


@dataclass
class Change:
    group: Deployed
    replaced: list[str] = field(default_factory=list)
    rolled: list[str] = field(default_factory=list)


def deployed_gpu_groups(template: dict) -> dict[str, Deployed]:
    """Config name (the NODEGROUP_LABEL the group gives its nodes) -> each GPU node group of a
    Cluster stack template, with the launch template it names."""
    resources = template.get("Resources") or {}
    found = {}
    for logical_id, resource in resources.items():
        props = resource.get("Properties") or {}
        labels = props.get("Labels") or {}
        if resource.get("Type") != "AWS::EKS::Nodegroup" or labels.get(GPU_LABEL) != "true":
            continue
        name = labels.get(NODEGROUP_LABEL)
        if not isinstance(name, str):
            continue
        ref = (props.get("LaunchTemplate") or {}).get("Id")
        template_id = ref.get("Ref") if isinstance(ref, dict) else None
        data = ((resources.get(template_id) or {}).get("Properties") or {}).get("LaunchTemplateData")
        found[name] = Deployed(name, logical_id, props, deployed_launch_data(data) if isinstance(data, dict) else None)
    return found


def changes(env: Environment, deployed: dict[str, Deployed], subnet_moved: str | None) -> list[Change]:
    """What this deploy does to each deployed GPU group; `subnet_moved` says how the training subnet
    changes (None: it does not)."""
    configured = {g.name: g for g in env.gpu_nodegroups}
    found = []
    for name, group in deployed.items():
        change = Change(group)
        new = configured.get(name)
        if new is None:
            change.replaced.append(f"environments.{env.name}.gpuNodegroups has no group {name} (renamed or removed): "
                                   "the group is deleted")
            found.append(change)
            continue
        was_type, now_type = group.properties.get("CapacityType"), capacity_type(new)
        if was_type != now_type:
            change.replaced.append(f"capacity.type makes CapacityType {now_type}, deployed {was_type}")
        if subnet_moved:
            change.replaced.append(f"Subnets: {subnet_moved}")
        if group.properties.get("AmiType") != GPU_AMI_TYPE:
            change.replaced.append(f"AmiType becomes {GPU_AMI_TYPE}, deployed {group.properties.get('AmiType')}")
        if group.properties.get("InstanceTypes"):
            change.replaced.append("InstanceTypes leaves the node group for its launch template (a release "
                                   "before this one set it)")
        if not change.replaced:
            if group.launch is None:
                change.rolled.append("its launch template is not in the deployed template")
            else:
                now = launch_data(new)
                change.rolled += [_launch_change(key, group.launch[key], now[key])
                                  for key in now if group.launch[key] != now[key]]
        if change.replaced or change.rolled:
            found.append(change)
    return found


def _launch_change(key: str, was: Any, now: Any) -> str:
    what = _LAUNCH_FIELDS[key]
    if key in ("InstanceType", "CapacityReservationId", "MarketType"):
        return f"{what} {now or 'none'}, deployed {was or 'none'}"
    if key in _SAID:
        return f"{what} {_SAID[key](now)}, deployed {_SAID[key](was)}"
    return f"{what} changes"


_SAID = {
    "RootVolume": lambda v: "none" if v[0] is None else
    f"{v[0]} GiB {v[1]} {v[2] or 'default'} IOPS {v[3] or 'default'} MB/s",
    "MetadataOptions": lambda v: f"IMDS {v[0] or 'default'}, tokens {v[1] or 'default'}, hop limit {v[2] or 'default'}",
}


def nodegroup_row(env: Environment, aws: Any) -> Check:
    name = stack_name(env.name, CLUSTER_STACK_ID)
    stack, unknown = deployed_stack_for(ROW, aws.cloudformation, env, CLUSTER_STACK_ID)
    if unknown:
        return unknown
    if stack is None:
        return Check(ROW, PASS, f"no {name} stack yet: the deploy creates {len(env.gpu_nodegroups)} GPU node groups")
    name = stack["StackName"]
    template = deployed_template(aws.cloudformation, name)
    if template is None:
        return Check(ROW, WARN, f"the template of {name} is not JSON; the GPU node groups were not compared")
    deployed = deployed_gpu_groups(template)
    moved, unread = _training_subnet_moved(env, aws)
    found = changes(env, deployed, moved)
    # Only the Subnets comparison needs the subnet: the rest is still judged, and the row says what it missed.
    missed = (f"the training subnet could not be read ({unread}), so it was not compared: a moved training subnet "
              "would replace every GPU group") if unread else ""
    if not found:
        if missed:
            return Check(ROW, WARN, f"no GPU node group is rolled or replaced by its launch template or node group "
                                    f"properties ({len(deployed)} deployed, {name}), but {missed}")
        return Check(ROW, PASS, f"no GPU node group is rolled or replaced ({len(deployed)} deployed, {name})")
    uncounted = None
    try:
        cluster = _cluster_name(env, aws.eks)
    except api_failure_types() as err:
        cluster, uncounted = None, explain(err)
    fails, warns, idle = [], [], []
    for change in found:
        nodes = _desired_size(aws.eks, cluster, change.group.name) if cluster else uncounted
        said = _said(change, nodes)
        if nodes == 0:
            idle.append(said)
        elif (change.replaced and (change.group.reserved or change.group.capacity_block)) or \
                (change.rolled and change.group.capacity_block):
            fails.append(said)
        else:
            warns.append(said)
    rules = (f"a changed launch template rolls a group one node at a time, evicting each node's pods "
             f"({LAUNCH_TEMPLATE_PAGE}, {NODE_UPDATE_PAGE}); a changed create-only property replaces it, every node "
             f"at once (\"Update requires: Replacement\", {NODEGROUP_PAGE})")
    if fails:
        return Check(ROW, FAIL, f"{'; '.join(fails + warns)}: {rules}. A reserved or capacity-block group must be at "
                                "desired size 0 first (a replacement asks the reservation for nodes the old group "
                                f"holds; EKS updates a capacity-block group only at 0, {CAPACITY_BLOCKS_PAGE}): "
                                f"let its runs checkpoint, then `python -m ops capacity-block scale-to-zero --env "
                                f"{env.name} --group GROUP` for a capacity-block group, or `aws eks "
                                "update-nodegroup-config --scaling-config minSize=0,desiredSize=0` for a reserved one, "
                                f"and deploy once it has no nodes{'; ' + missed if missed else ''}")
    if warns:
        return Check(ROW, WARN, f"{'; '.join(warns + idle)}: {rules}. Each restart costs a run the work since its "
                                f"last checkpoint; deploy between runs, or scale the group to 0 first"
                                f"{'; ' + missed if missed else ''}")
    if missed:
        return Check(ROW, WARN, f"{'; '.join(idle)}: no node runs there now, but {missed}")
    return Check(ROW, PASS, f"{'; '.join(idle)}: no node runs there now, so no run loses work")


def _said(change: Change, nodes: int | str | None) -> str:
    how = (f"replaces {change.group.name} ({', '.join(change.replaced)})" if change.replaced else
           f"rolls {change.group.name} ({', '.join(change.rolled)})")
    if nodes is None:
        return f"{how}, whose nodes could not be counted"
    if isinstance(nodes, str):
        return f"{how}, whose nodes could not be counted ({nodes})"
    return f"{how}, which has {nodes} nodes" if nodes else f"{how} at desired size 0"


def _training_subnet_moved(env: Environment, aws: Any) -> tuple[str | None, str | None]:
    """(how the training subnet moves, None: it does not; why it could not be read, None: it was)."""
    try:
        stack = deployed_stack(aws.cloudformation, env, NETWORK_STACK_ID)
    except OpsError:
        return None, None
    subnet_id = stack_output(stack, TRAINING_SUBNET_ID_OUTPUT) if stack else None
    if not subnet_id:
        return None, None
    try:
        [subnet] = aws.ec2.describe_subnets(SubnetIds=[subnet_id])["Subnets"]
    except api_failure_types() as err:
        return None, f"{subnet_id}: {explain(err)}"
    zone, cidr = subnet.get("AvailabilityZone"), subnet.get("CidrBlock")
    if zone != env.training_availability_zone:
        return f"trainingAvailabilityZone {env.training_availability_zone}, deployed {zone}", None
    if cidr != env.training_subnet_cidr:
        return (f"the training subnet becomes {env.training_subnet_cidr} (availabilityZones, vpcCidr), deployed {cidr}",
                None)
    return None, None


def _cluster_name(env: Environment, eks: Any) -> str | None:
    from ops.kubeconfig import find_cluster

    try:
        return find_cluster(eks, env)["name"]
    except OpsError:
        return None


def _desired_size(eks: Any, cluster: str, group: str) -> int | str | None:
    """The live node group's desired size, which people and `ops capacity-block` change outside the
    template; None: not found; text: why EKS would not say."""
    from ops.capacity_blocks import nodegroup_of

    try:
        return int(nodegroup_of(eks, cluster, group)["scalingConfig"]["desiredSize"])
    except OpsError:
        return None
    except api_failure_types() as err:
        return explain(err)
