"""EfaNodegroup: a managed GPU node group that attaches every EFA interface its instance type has.

The interface layout, GPU count and capacity-block support come from config/instance_types.py,
the one table of hardware facts. A GPU type without EFA (g5.xlarge) gets a plain GPU node group.
"""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from cdk_constructs.node_launch_template import NetworkInterfaceSpec, NodeLaunchTemplate
from config.environment import CAPACITY_TYPES, RESERVATION_ID
from config.instance_types import InstanceType
from config.kubernetes import (
    EFA_LABEL, GPU_LABEL, GPU_TAINT_KEY, GPU_TAINT_VALUE, NODEGROUP_LABEL, ROLE_LABEL,
)

# Container images for GPU training run to tens of GiB, and the NVIDIA AMI takes ~30 GiB itself.
DEFAULT_ROOT_VOLUME_GIB = 500
MIN_GPU_ROOT_VOLUME_GIB = 100


class EfaNodegroup(Construct):
    """A GPU node group in one subnet, with EFA when the instance type has it.

    Attributes: `nodegroup` (aws_eks_v2.Nodegroup), `launch_template` (NodeLaunchTemplate),
    `placement_group` (CfnPlacementGroup or None), `efa_security_group` (ISecurityGroup or None),
    `efa_interface_count`, `labels`, `capacity_type`.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.ICluster,
        name: str,
        instance_type: InstanceType,
        subnet: ec2.ISubnet,
        min_size: int,
        max_size: int,
        desired_size: int,
        capacity_type: str = "onDemand",
        reservation_id: str | None = None,
        cluster_security_group_id: str | None = None,
        efa_security_group: ec2.ISecurityGroup | None = None,
        node_role: iam.IRole | None = None,
        root_volume_gib: int = DEFAULT_ROOT_VOLUME_GIB,
    ) -> None:
        super().__init__(scope, id)
        self._validate(name, instance_type, min_size, max_size, desired_size, capacity_type, reservation_id,
                       root_volume_gib)
        self.instance_type = instance_type
        self.capacity_type = capacity_type
        self.efa_interface_count = instance_type.efa_interfaces
        self.subnet = subnet

        # EKS adds the cluster security group to nodes itself, except when the launch template
        # names interfaces: then every interface must carry it, or nodes cannot reach the API.
        sg_cluster = cluster_security_group_id or cluster.cluster_security_group_id
        self.efa_security_group: ec2.ISecurityGroup | None = None
        interfaces: list[NetworkInterfaceSpec] = []
        if instance_type.supports_efa:
            self.efa_security_group = efa_security_group or efa_self_referencing_security_group(
                self, "EfaSecurityGroup", vpc=cluster.vpc)
            groups = (sg_cluster, self.efa_security_group.security_group_id)
            interfaces = [
                NetworkInterfaceSpec(i.network_card_index, i.device_index, i.interface_type, groups)
                for i in instance_type.efa_layout()
            ]

        # Reserved and capacity-block instances already sit where EC2 put the reservation; a
        # placement group on top makes launches fail with InsufficientInstanceCapacity.
        self.placement_group: ec2.CfnPlacementGroup | None = None
        if instance_type.supports_efa and capacity_type == "onDemand":
            self.placement_group = ec2.CfnPlacementGroup(self, "PlacementGroup", strategy="cluster")

        self.launch_template = NodeLaunchTemplate(
            self, "LaunchTemplate",
            root_volume_gib=root_volume_gib, root_volume_iops=6000, root_volume_throughput_mbps=500,
            network_interfaces=interfaces,
            placement_group_name=self.placement_group.ref if self.placement_group else None,
            capacity_reservation_id=reservation_id,
            capacity_block=capacity_type == "capacityBlock",
        )

        self.labels: dict[str, str] = {
            NODEGROUP_LABEL: name, ROLE_LABEL: "training", GPU_LABEL: "true",
            **({EFA_LABEL: "true"} if instance_type.supports_efa else {}),
        }
        self.nodegroup = eks.Nodegroup(
            self, "Nodegroup",
            cluster=cluster,
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_NVIDIA,
            capacity_type=eks.CapacityType.CAPACITY_BLOCK if capacity_type == "capacityBlock"
            else eks.CapacityType.ON_DEMAND,
            launch_template_spec=self.launch_template.spec,
            subnets=ec2.SubnetSelection(subnets=[subnet]),
            min_size=min_size, max_size=max_size, desired_size=desired_size,
            labels=self.labels,
            taints=[eks.TaintSpec(effect=eks.TaintEffect.NO_SCHEDULE, key=GPU_TAINT_KEY, value=GPU_TAINT_VALUE)],
            node_role=node_role,
        )
        # Set on the resource, not the L2: aws-cdk-lib's table of GPU types lacks p5 and would
        # reject the NVIDIA AMI type for it. Our own table (config/) already vouched for the type.
        resource: eks.CfnNodegroup = self.nodegroup.node.default_child
        resource.instance_types = [instance_type.name]

    def _validate(self, name, instance_type, min_size, max_size, desired_size, capacity_type, reservation_id,
                  root_volume_gib) -> None:
        where = self.node.path

        def fail(message: str) -> None:
            raise ValueError(f"{where}: {message}")

        if not name:
            fail("name must not be empty")
        if not instance_type.is_gpu:
            fail(f"{instance_type.name} has no GPUs; EfaNodegroup is for GPU instance types")
        if min(min_size, max_size, desired_size) < 0 or max_size < 1:
            fail(f"sizes must be >= 0 with max_size >= 1, got min {min_size}, desired {desired_size}, max {max_size}")
        if not min_size <= desired_size <= max_size:
            fail(f"need min_size <= desired_size <= max_size, got {min_size} <= {desired_size} <= {max_size}")
        if capacity_type not in CAPACITY_TYPES:
            fail(f"capacity_type must be one of {', '.join(CAPACITY_TYPES)}, got {capacity_type!r}")
        if capacity_type == "onDemand" and reservation_id is not None:
            fail("reservation_id is only for reserved or capacityBlock capacity")
        if capacity_type != "onDemand":
            if not reservation_id or not RESERVATION_ID.match(reservation_id):
                fail(f"{capacity_type} capacity needs reservation_id cr- followed by 17 hex digits, got {reservation_id!r}")
        if capacity_type == "capacityBlock" and not instance_type.capacity_blocks:
            fail(f"capacity blocks are not sold for {instance_type.name}")
        if root_volume_gib < MIN_GPU_ROOT_VOLUME_GIB:
            fail(f"root_volume_gib must be at least {MIN_GPU_ROOT_VOLUME_GIB} for GPU images, got {root_volume_gib}")


def efa_self_referencing_security_group(scope: Construct, id: str, *, vpc: ec2.IVpc) -> ec2.SecurityGroup:
    """EFA's OS-bypass traffic is only allowed between interfaces that share a security group
    allowing all traffic to and from itself; nothing else is opened."""
    sg = ec2.SecurityGroup(
        scope, id, vpc=vpc, allow_all_outbound=False,
        description="EFA: all traffic between EFA interfaces of training nodes, nothing else",
    )
    sg.add_ingress_rule(sg, ec2.Port.all_traffic(), "EFA traffic from other EFA interfaces")
    sg.add_egress_rule(sg, ec2.Port.all_traffic(), "EFA traffic to other EFA interfaces")
    return sg
