"""Network: the VPC every other stack lives in, and the one subnet training happens in."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from config import Environment
from config.environment import PUBLIC_SUBNET_MASK
from config.outputs import TRAINING_AZ_OUTPUT, TRAINING_SUBNET_ID_OUTPUT, VPC_ID_OUTPUT
from cdk_constructs.log_groups import EncryptedLogs, send_function_logs
from cdk_constructs.teardown import EniJanitor
from stacks.removal import KEPT_NETWORK_HOME, apply_removal_policy


class NetworkStack(cdk.Stack):
    """A VPC over the configured zones with one private subnet per zone sized for EFA nodes.

    Attributes: `vpc`, `training_subnet` (the private subnet in the training zone),
    `training_availability_zone`, `flow_log_group`, `logs` (EncryptedLogs: the key and its groups).
    """

    def __init__(self, scope: Construct, id: str, *, config: Environment, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        self.config = config
        # Vpc checks the zones it is given against the stack's zones, and asking the stack for its
        # zones is an AWS lookup that fails offline. config/ already checked the zones belong to the
        # region, so answer the lookup with them: synthesis stays offline for any account.
        self.node.set_context(
            f"availability-zones:account={config.account}:region={config.region}", list(config.availability_zones))

        self.vpc = ec2.Vpc(
            self, "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(config.vpc_cidr),
            # Given explicitly so synthesis needs no AZ lookup (offline, no credentials).
            availability_zones=list(config.availability_zones),
            # One NAT per zone: nodes pull images and talk to AWS APIs through it, and a zone
            # outage must not cut the other zones off.
            nat_gateways=len(config.availability_zones),
            # Private subnets first so they take the first half of the CIDR, as config/ plans it.
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name="Private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS,
                    cidr_mask=config.private_subnet_mask,
                ),
                ec2.SubnetConfiguration(
                    name="Public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=PUBLIC_SUBNET_MASK,
                    map_public_ip_on_launch=False,
                ),
            ],
        )
        # Training data and checkpoints go to S3; the gateway endpoint keeps that traffic off NAT.
        self.vpc.add_gateway_endpoint(
            "S3Endpoint", service=ec2.GatewayVpcEndpointAwsService.S3,
            subnets=[ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)],
        )

        self.logs = EncryptedLogs(self, "Logs", retain=config.retain,
                                  description=f"{config.name}: VPC flow logs at rest in CloudWatch Logs")
        self.flow_log_group = self.logs.group("FlowLogs")
        self.vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(self.flow_log_group),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )
        # aws-cdk-lib's handler that strips the default security group's rules runs at the first
        # deploy and at the destroy. It exists only under the restrictDefaultSecurityGroup flag,
        # which cdk.json sets and an App built without that context (a test's) does not.
        default_group_handler = self.node.try_find_child("Custom::VpcRestrictDefaultSGCustomResourceProvider")
        if default_group_handler is not None:
            send_function_logs(default_group_handler.node.find_child("Handler"),
                               self.logs.group("DefaultSecurityGroupHandler"))

        self.training_subnet: ec2.ISubnet = self._subnet_in(config.training_availability_zone)
        self.training_availability_zone: str = config.training_availability_zone

        # Deleted before any subnet, route or gateway of the VPC: clears the ENIs controllers left
        # and the security group EKS made for the cluster.
        self.eni_janitor = EniJanitor(self, "EniJanitor", vpc=self.vpc, cluster_name=config.cluster_name,
                                      log_key=self.logs.key)
        apply_removal_policy(self, config, also_kept=KEPT_NETWORK_HOME)
        cdk.CfnOutput(self, VPC_ID_OUTPUT, value=self.vpc.vpc_id, description="VPC of the training cluster")
        cdk.CfnOutput(
            self, TRAINING_SUBNET_ID_OUTPUT, value=self.training_subnet.subnet_id,
            description=f"Private subnet in {config.training_availability_zone}: GPU nodes and FSx live here",
        )
        cdk.CfnOutput(self, TRAINING_AZ_OUTPUT, value=config.training_availability_zone,
                      description="The one zone of training nodes and FSx")

    def _subnet_in(self, zone: str) -> ec2.ISubnet:
        for subnet in self.vpc.private_subnets:
            if subnet.availability_zone == zone:
                return subnet
        # config/ guarantees the zone is listed; reaching here is a bug, not a user error.
        raise AssertionError(f"no private subnet in {zone}")
