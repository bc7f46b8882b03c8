"""EfaNodegroup: a GPU node group that attaches every EFA device its instance type has.

The interface layout, GPU count and capacity-block support come from config/instance_types.py,
the one table of hardware facts. A GPU type without EFA (g5.xlarge) gets a plain GPU node group.
The node group itself, its launch template and its update and repair policy come from
ManagedNodegroup, the path every node group takes.
"""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from cdk_constructs.managed_nodegroup import ManagedNodegroup, NodegroupOptions
from cdk_constructs.node_launch_template import NetworkInterfaceSpec
from cdk_constructs.security_group_rules import allow_from, allow_to
from config.kubernetes import TRAINING_ROLE

MIN_GPU_ROOT_VOLUME_GIB = 100


class EfaNodegroup(Construct):
    """A GPU node group in one subnet, with EFA when the instance type has it.

    Attributes: `group` (ManagedNodegroup), `nodegroup` (aws_eks_v2.Nodegroup), `launch_template`
    (NodeLaunchTemplate), `placement_group` (CfnPlacementGroup or None), `efa_security_group`
    (ISecurityGroup or None), `efa_interface_count`, `labels`, `capacity_type`.
    """

    def __init__(self, scope: Construct, id: str, *, cluster: eks.ICluster, options: NodegroupOptions,
                 subnet: ec2.ISubnet, cluster_security_group_id: str | None = None,
                 efa_security_group: ec2.ISecurityGroup | None = None) -> None:
        super().__init__(scope, id)
        instance_type, capacity_type, volume_gib = options.instance_type, options.capacity_type, options.root_volume_gib
        if not instance_type.is_gpu:
            raise ValueError(f"{self.node.path}: {instance_type.name} has no GPUs; EfaNodegroup is for GPU instance types")
        if volume_gib is not None and volume_gib < MIN_GPU_ROOT_VOLUME_GIB:
            raise ValueError(f"{self.node.path}: root_volume_gib must be at least {MIN_GPU_ROOT_VOLUME_GIB} "
                             f"for GPU images, got {volume_gib}")
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
            interfaces = [NetworkInterfaceSpec(i.network_card_index, i.device_index, i.interface_type, groups)
                          for i in instance_type.network_interfaces()]

        # Reserved and capacity-block instances already sit where EC2 put the reservation; a
        # placement group on top makes launches fail with InsufficientInstanceCapacity.
        self.placement_group: ec2.CfnPlacementGroup | None = None
        if instance_type.supports_efa and capacity_type == "onDemand":
            self.placement_group = ec2.CfnPlacementGroup(self, "PlacementGroup", strategy="cluster")

        self.group = ManagedNodegroup(
            self, "Group",
            cluster=cluster, options=options, role=TRAINING_ROLE, subnets=ec2.SubnetSelection(subnets=[subnet]),
            network_interfaces=interfaces,
            placement_group_name=self.placement_group.ref if self.placement_group else None,
        )
        self.nodegroup = self.group.nodegroup
        self.launch_template = self.group.launch_template
        self.labels = self.group.labels


def efa_self_referencing_security_group(scope: Construct, id: str, *, vpc: ec2.IVpc) -> ec2.SecurityGroup:
    """EFA's OS-bypass traffic is only allowed between interfaces that share a security group
    allowing all traffic to and from itself; nothing else is opened."""
    sg = ec2.SecurityGroup(
        scope, id, vpc=vpc, allow_all_outbound=False,
        description="EFA: all traffic between EFA interfaces of training nodes, nothing else",
    )
    # Named by place, not by the group's path: the same under app.py's stage and the pipeline's.
    allow_from(sg, "FromItself", group=sg, source=sg, port=ec2.Port.all_traffic(),
               description="EFA traffic from other EFA interfaces")
    allow_to(sg, "ToItself", group=sg, destination=sg, port=ec2.Port.all_traffic(),
             description="EFA traffic to other EFA interfaces")
    return sg
