"""ManagedNodegroup: the one path every node group (system, CPU, GPU) takes to become an EKS
managed node group with its launch template.

What a group gets follows from its instance type (config/instance_types.py) and capacity:
- the instance type in the launch template, none on the node group;
- the AL2023 NVIDIA AMI type, the GPU label and the GPU taint on GPU types;
- user data for local NVMe (RAID0) and EFA huge pages where the type has them;
- the root volume the type needs once images live on local NVMe or not;
- for GPU groups, updates that never surge and never force past a disruption budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from cdk_constructs.node_launch_template import NetworkInterfaceSpec, NodeLaunchTemplate
from config.node_launch import root_volume
from config.node_user_data import node_user_data
from config.environment import CAPACITY_TYPES, EFA_ALLOCATIONS, GPU_ALLOCATIONS, RESERVATION_ID
from config.instance_types import InstanceType
from config.kubernetes import (
    EFA_DRA, GPU_TAINT_EFFECT, GPU_TAINT_KEY, GPU_TAINT_VALUE, SYSTEM_ROLE, TRAINING_ROLE, nodegroup_labels,
)

# "Understand each phase of node updates", EKS User Guide (managed-node-update-behavior.html):
# DEFAULT launches new nodes before terminating old ones (scale-up by up to twice the zone count);
# MINIMAL terminates first, "useful in scenarios where you are constrained to resources or costs,
# for example with hardware accelerators such as GPUs", so total capacity never exceeds the
# configured size and a reservation is never asked for more than it holds.
MAX_UNAVAILABLE = 1
GPU_UPDATE_STRATEGY = "MINIMAL"
CPU_UPDATE_STRATEGY = "DEFAULT"

_TAINT_EFFECTS = {"NoSchedule": eks.TaintEffect.NO_SCHEDULE, "PreferNoSchedule": eks.TaintEffect.PREFER_NO_SCHEDULE,
                  "NoExecute": eks.TaintEffect.NO_EXECUTE}
_CAPACITY_TYPES = {"onDemand": eks.CapacityType.ON_DEMAND, "reserved": eks.CapacityType.ON_DEMAND,
                   "capacityBlock": eks.CapacityType.CAPACITY_BLOCK}


@dataclass(frozen=True)
class NodegroupOptions:
    """What a node group is, whichever construct builds it (aws-eks-v2's NodegroupOptions): its
    name in the config, instance type, sizes and capacity, its nodes' role, root volume and repair.
    Where it runs and how its interfaces are wired are the constructs' own props. `root_volume_gib`
    None takes the size the instance type needs (root_volume)."""
    name: str
    instance_type: InstanceType
    min_size: int
    max_size: int
    desired_size: int
    capacity_type: str = "onDemand"
    reservation_id: str | None = None
    node_role: iam.IRole | None = None
    root_volume_gib: int | None = None
    auto_repair: bool = True
    # "dra" labels an EFA group's nodes for the EFA DRA driver (config/kubernetes.py EFA_ALLOCATION_LABEL).
    efa_allocation: str = "devicePlugin"
    # "dra" labels a GPU group's nodes for NVIDIA's GPU DRA driver (config/kubernetes.py GPU_ALLOCATION_LABEL).
    gpu_allocation: str = "devicePlugin"


class ManagedNodegroup(Construct):
    """A managed node group and its launch template.

    Attributes: `nodegroup` (aws_eks_v2.Nodegroup), `launch_template` (NodeLaunchTemplate),
    `labels`, `instance_type`, `capacity_type`.
    """

    def __init__(self, scope: Construct, id: str, *, cluster: eks.ICluster, options: NodegroupOptions, role: str,
                 subnets: ec2.SubnetSelection, network_interfaces: Sequence[NetworkInterfaceSpec] = (),
                 placement_group_name: str | None = None) -> None:
        super().__init__(scope, id)
        self._validate(options, role)
        name, instance_type, capacity_type = options.name, options.instance_type, options.capacity_type
        self.instance_type = instance_type
        self.capacity_type = capacity_type
        gpu = instance_type.is_gpu
        volume = root_volume(instance_type)
        if options.root_volume_gib is not None:
            volume["root_volume_gib"] = options.root_volume_gib

        self.launch_template = NodeLaunchTemplate(
            self, "LaunchTemplate",
            instance_type=instance_type.name,
            **volume,
            network_interfaces=network_interfaces,
            placement_group_name=placement_group_name,
            capacity_reservation_id=options.reservation_id,
            capacity_block=capacity_type == "capacityBlock",
            user_data=node_user_data(instance_type),
        )

        self.labels: dict[str, str] = nodegroup_labels(name, role, gpu=gpu, efa=instance_type.supports_efa,
                                                       efa_allocation=options.efa_allocation,
                                                       gpu_allocation=options.gpu_allocation)
        self.nodegroup = eks.Nodegroup(
            self, "Nodegroup",
            cluster=cluster,
            # No instance_types: the launch template names the type (see node_launch_template.py).
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_NVIDIA if gpu else eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            capacity_type=_CAPACITY_TYPES[capacity_type],
            launch_template_spec=self.launch_template.spec,
            subnets=subnets,
            min_size=options.min_size, max_size=options.max_size, desired_size=options.desired_size,
            labels=self.labels,
            taints=[eks.TaintSpec(effect=_TAINT_EFFECTS[GPU_TAINT_EFFECT], key=GPU_TAINT_KEY, value=GPU_TAINT_VALUE)]
            if gpu else None,
            node_role=options.node_role,
            # A GPU node mid-training is not evicted past its disruption budget: the update fails
            # and says so (PodEvictionFailure) instead.
            force_update=not gpu,
        )
        resource: eks.CfnNodegroup = self.nodegroup.node.default_child
        # Set on the resource: the L2 leaves the property out when repair is off, and an absent
        # property would not turn repair off on a group that had it.
        resource.node_repair_config = eks.CfnNodegroup.NodeRepairConfigProperty(enabled=options.auto_repair)
        resource.update_config = eks.CfnNodegroup.UpdateConfigProperty(
            max_unavailable=MAX_UNAVAILABLE, update_strategy=GPU_UPDATE_STRATEGY if gpu else CPU_UPDATE_STRATEGY)

    def _validate(self, options: NodegroupOptions, role: str) -> None:
        where = self.node.path
        name, instance_type, capacity_type = options.name, options.instance_type, options.capacity_type
        min_size, max_size, desired_size = options.min_size, options.max_size, options.desired_size
        reservation_id = options.reservation_id

        def fail(message: str) -> None:
            raise ValueError(f"{where}: {message}")

        if not name:
            fail("name must not be empty")
        if role not in (SYSTEM_ROLE, TRAINING_ROLE):
            fail(f"role must be {SYSTEM_ROLE} or {TRAINING_ROLE}, got {role!r}")
        if min(min_size, max_size, desired_size) < 0 or max_size < 1:
            fail(f"sizes must be >= 0 with max_size >= 1, got min {min_size}, desired {desired_size}, max {max_size}")
        if not min_size <= desired_size <= max_size:
            fail(f"need min_size <= desired_size <= max_size, got {min_size} <= {desired_size} <= {max_size}")
        if options.efa_allocation not in EFA_ALLOCATIONS:
            fail(f"efa_allocation must be one of {', '.join(EFA_ALLOCATIONS)}, got {options.efa_allocation!r}")
        if options.efa_allocation == EFA_DRA and not options.instance_type.supports_efa:
            fail(f"efa_allocation dra needs an EFA instance type; {options.instance_type.name} has none")
        if options.gpu_allocation not in GPU_ALLOCATIONS:
            fail(f"gpu_allocation must be one of {', '.join(GPU_ALLOCATIONS)}, got {options.gpu_allocation!r}")
        if capacity_type not in CAPACITY_TYPES:
            fail(f"capacity_type must be one of {', '.join(CAPACITY_TYPES)}, got {capacity_type!r}")
        if capacity_type == "onDemand" and reservation_id is not None:
            fail("reservation_id is only for reserved or capacityBlock capacity")
        if capacity_type != "onDemand":
            if not reservation_id or not RESERVATION_ID.match(reservation_id):
                fail(f"{capacity_type} capacity needs reservation_id cr- followed by 17 hex digits, got {reservation_id!r}")
        if capacity_type == "capacityBlock":
            if not instance_type.capacity_blocks:
                fail(f"capacity blocks are not sold for {instance_type.name}")
            if min_size or desired_size:
                fail("a capacityBlock group rests at min_size 0 and desired_size 0 "
                     "(EKS updates it only at desired size 0; ops capacity-block schedule scales it up)")
