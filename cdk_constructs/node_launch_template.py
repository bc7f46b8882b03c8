"""The launch template every managed node group uses: the instance type, IMDSv2, an encrypted gp3
root volume, and the user data the hardware needs.

A managed node group without a launch template gets IMDSv1 and an unencrypted 20 GiB gp2 disk;
every group here, system, CPU and GPU, goes through this construct instead (via ManagedNodegroup).
The instance type lives here and never on the node group: capacity-block groups require it
(EKS capacity-blocks-mng.html), and a setting in both places fails create and update
(EKS launch-templates.html).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from config.node_launch import GP3_BASELINE, METADATA_OPTIONS, ROOT_DEVICE, ROOT_VOLUME_TYPE

MIN_ROOT_VOLUME_GIB = 20
MAX_ROOT_VOLUME_GIB = 16384


@dataclass(frozen=True)
class NetworkInterfaceSpec:
    """One interface of the launch template; `security_group_ids` must be set on each one because
    a launch template with NetworkInterfaces cannot also carry SecurityGroupIds."""

    network_card_index: int
    device_index: int
    interface_type: str  # "interface", "efa" or "efa-only"
    security_group_ids: tuple[str, ...]


class NodeLaunchTemplate(Construct):
    """Attributes: `resource` (the CfnLaunchTemplate) and `spec` for a Nodegroup's launch_template_spec."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        instance_type: str,
        root_volume_gib: int,
        root_volume_iops: int = GP3_BASELINE["root_volume_iops"],
        root_volume_throughput_mbps: int = GP3_BASELINE["root_volume_throughput_mbps"],
        network_interfaces: Sequence[NetworkInterfaceSpec] = (),
        placement_group_name: str | None = None,
        capacity_reservation_id: str | None = None,
        capacity_block: bool = False,
        user_data: str | None = None,
    ) -> None:
        super().__init__(scope, id)
        if not MIN_ROOT_VOLUME_GIB <= root_volume_gib <= MAX_ROOT_VOLUME_GIB:
            raise ValueError(f"{self.node.path}: root_volume_gib must be {MIN_ROOT_VOLUME_GIB}-{MAX_ROOT_VOLUME_GIB}, "
                             f"got {root_volume_gib}")
        if capacity_block and not capacity_reservation_id:
            raise ValueError(f"{self.node.path}: a capacity block needs capacity_reservation_id")
        for iface in network_interfaces:
            if not iface.security_group_ids:
                raise ValueError(f"{self.node.path}: interface on card {iface.network_card_index} has no security group")

        data = ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
            instance_type=instance_type,
            metadata_options=ec2.CfnLaunchTemplate.MetadataOptionsProperty(
                http_endpoint=METADATA_OPTIONS["HttpEndpoint"], http_tokens=METADATA_OPTIONS["HttpTokens"],
                http_put_response_hop_limit=METADATA_OPTIONS["HttpPutResponseHopLimit"],
            ),
            block_device_mappings=[
                ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
                    device_name=ROOT_DEVICE,
                    ebs=ec2.CfnLaunchTemplate.EbsProperty(
                        volume_size=root_volume_gib, volume_type=ROOT_VOLUME_TYPE, encrypted=True,
                        delete_on_termination=True, iops=root_volume_iops, throughput=root_volume_throughput_mbps,
                    ),
                )
            ],
            network_interfaces=[
                ec2.CfnLaunchTemplate.NetworkInterfaceProperty(
                    network_card_index=i.network_card_index, device_index=i.device_index,
                    interface_type=i.interface_type, groups=list(i.security_group_ids), delete_on_termination=True,
                )
                for i in network_interfaces
            ] or None,
            placement=ec2.CfnLaunchTemplate.PlacementProperty(group_name=placement_group_name)
            if placement_group_name else None,
            capacity_reservation_specification=ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty(
                capacity_reservation_target=ec2.CfnLaunchTemplate.CapacityReservationTargetProperty(
                    capacity_reservation_id=capacity_reservation_id,
                )
            ) if capacity_reservation_id else None,
            instance_market_options=ec2.CfnLaunchTemplate.InstanceMarketOptionsProperty(market_type="capacity-block")
            if capacity_block else None,
            user_data=cdk.Fn.base64(user_data) if user_data else None,
        )
        self.resource = ec2.CfnLaunchTemplate(self, "Resource", launch_template_data=data)
        # The version CloudFormation created, not $Latest or $Default: it changes only when the data
        # above changes, and only then does EKS roll the group's nodes.
        self.spec = eks.LaunchTemplateSpec(id=self.resource.ref, version=self.resource.attr_latest_version_number)
