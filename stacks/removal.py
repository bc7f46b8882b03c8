"""What `cdk destroy` deletes, decided in one place from the environment's removalPolicy.

destroy: every resource goes with its stack (FSx, ECR images, KMS keys and log groups included),
so a dev environment leaves nothing billing behind.

retain: the data stays and everything that only costs money goes. Kept: the FSx file system and
its S3 links, the ECR repository, KMS keys and log groups; and, because a kept file system keeps its network
interfaces in the training subnet, the VPC, its subnets and the file system's security group
(deleting any of them would fail on those interfaces). Deleted: the cluster, node groups, NAT
gateways, Lambdas, roles and the rest.

Deleted in every environment (`always_deleted`): what only means something with the cluster, and
what a new deploy of the environment would create again under the same name. CloudFormation cannot
create a log group whose name exists, so a kept `/aws/eks/<cluster>/cluster` would make the next
deploy of the environment fail; such groups, and the keys that only they or the cluster use, go.
"""

from __future__ import annotations

from typing import Sequence

import aws_cdk as cdk
from constructs import Construct

from config import Environment

KEPT_DATA = ("AWS::FSx::FileSystem", "AWS::FSx::DataRepositoryAssociation", "AWS::ECR::Repository", "AWS::KMS::Key", "AWS::KMS::Alias",
             "AWS::Logs::LogGroup")
# The kept file system's home: its ENIs live in a subnet of this VPC behind its security group.
KEPT_NETWORK_HOME = ("AWS::EC2::VPC", "AWS::EC2::Subnet")
KEPT_FILE_SYSTEM_GUARD = ("AWS::EC2::SecurityGroup",)


def removal_policy(config: Environment) -> cdk.RemovalPolicy:
    """The policy for the data-bearing resources (the ones a retain environment keeps)."""
    return cdk.RemovalPolicy.RETAIN if config.retain else cdk.RemovalPolicy.DESTROY


# The stack-wide policy first, then the constructs that are deleted whatever the environment keeps.
_STACK_PRIORITY = cdk.AspectPriority.MUTATING
_ALWAYS_DELETED_PRIORITY = cdk.AspectPriority.MUTATING + 1


def apply_removal_policy(stack: cdk.Stack, config: Environment, *, also_kept: tuple[str, ...] = (),
                         always_deleted: Sequence[Construct] = ()) -> None:
    """The environment's policy on every resource of `stack`, those aws-cdk-lib creates included:
    in a retain environment, RETAIN on KEPT_DATA (plus `also_kept`), DESTROY on everything else;
    DESTROY on every resource under `always_deleted` in any environment."""
    policies = cdk.RemovalPolicies.of(stack)
    for construct in always_deleted:
        cdk.RemovalPolicies.of(construct).apply(cdk.RemovalPolicy.DESTROY, priority=_ALWAYS_DELETED_PRIORITY)
    if not config.retain:
        policies.apply(cdk.RemovalPolicy.DESTROY, priority=_STACK_PRIORITY)
        return
    kept = list(KEPT_DATA + also_kept)
    policies.apply(cdk.RemovalPolicy.DESTROY, exclude_resource_types=kept, priority=_STACK_PRIORITY)
    policies.apply(cdk.RemovalPolicy.RETAIN, apply_to_resource_types=kept, priority=_STACK_PRIORITY)


def keep_when_replaced(resource: cdk.CfnResource) -> None:
    """UpdateReplacePolicy Retain on `resource` whatever removalPolicy says: the policy above is
    for `cdk destroy`, which deletes on purpose; a replacement comes from an edit (a create-only
    property, such as the file system's subnet when trainingAvailabilityZone moves), and must not
    take the data with it. A raw override, so no removal-policy aspect can set it back."""
    resource.add_override("UpdateReplacePolicy", "Retain")
