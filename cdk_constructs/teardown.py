"""Custom resources that make `cdk destroy` finish and keep what must be kept.

- `EniJanitor`: deleted before the VPC's subnets, it removes ENIs that controllers left behind
  (VPC CNI pod ENIs, EFA interfaces, the VPC Lambdas' hyperplane ENIs; aws-cdk 26716) and the
  cluster security group EKS could not delete (aws-cdk 18650), and fails when it cannot.
- `FsxFinalBackup`: in retained environments, takes a final backup of the file system as the
  storage stack is deleted, and fails the delete when that backup fails.

Each handler is its own service token (one Lambda, no provider framework), runs outside the VPC
(its own ENIs would otherwise block the subnets it is cleaning) and logs to a log group that
follows the environment's removal policy (applied by the stack). The training drain
(cdk_constructs/training_drain.py) uses the same function construct, inside the VPC.
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from cdk_constructs.nag import acknowledge, acknowledge_resource_star, wildcard_resource

HANDLERS = Path(__file__).resolve().parent / "teardown_handlers"
# teardown_handlers/eni_janitor.py CLUSTER_TAG: the Lambda asset imports nothing from here.
CLUSTER_TAG = "aws:eks:cluster-name"


class _TeardownFunction(Construct):
    """A Lambda from teardown_handlers/ with its own role, log group and dead-letter queue (no
    managed policies). The group and the queue are encrypted with `log_key` when given (a key
    CloudWatch Logs may use: EncryptedLogs.key). Attributes: `role`, `function`, `log_group`,
    `dead_letters`."""

    def __init__(self, scope: Construct, id: str, *, handler: str, description: str, timeout: cdk.Duration,
                 memory_size: int = 128, log_key: kms.IKey | None = None, **function_options):
        """`function_options`: further lambda.Function props (a VPC placement)."""
        super().__init__(scope, id)
        # Its removal policy is the stack's (stacks/removal.py), like every other log group.
        self.log_group = logs.LogGroup(self, "Logs", retention=logs.RetentionDays.ONE_MONTH, encryption_key=log_key)
        self.role = iam.Role(self, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                             description=description)
        self.log_group.grant_write(self.role)
        # CloudFormation invokes a custom resource's handler asynchronously: an invocation that
        # crashes or runs out of time before it replies is retried twice, then kept here for
        # whoever asks why the deploy or delete waited.
        self.dead_letters = sqs.Queue(
            self, "DeadLetters", retention_period=cdk.Duration.days(14), enforce_ssl=True,
            encryption=sqs.QueueEncryption.KMS if log_key else sqs.QueueEncryption.SQS_MANAGED,
            encryption_master_key=log_key)
        self.function = lambda_.Function(
            self, "Function", runtime=lambda_.Runtime.PYTHON_3_14, handler=handler,
            code=lambda_.Code.from_asset(str(HANDLERS), exclude=["__pycache__", "*.pyc"]),
            role=self.role, timeout=timeout, description=description, log_group=self.log_group,
            memory_size=memory_size, dead_letter_queue=self.dead_letters, **function_options,
        )
        # Lambda grants sqs:SendMessage for its dead-letter queue, not the use of the queue's key: a
        # producer of a KMS-encrypted queue needs kms:GenerateDataKey and kms:Decrypt (Amazon SQS
        # Developer Guide, "Configuring AWS KMS permissions for Amazon SQS").
        if log_key is not None:
            self.role.add_to_policy(iam.PolicyStatement(actions=["kms:GenerateDataKey", "kms:Decrypt"],
                                                        resources=[log_key.key_arn]))


class EniJanitor(Construct):
    """Deleted before every resource of `vpc`, it deletes the ENIs controllers left there and the
    security groups EKS created for the cluster `cluster_name`, waiting (within Lambda's 15
    minutes) for attached ones to be released; if any is still there it fails the delete, saying
    which (teardown_handlers/eni_janitor.py). `log_key` encrypts its log group (EncryptedLogs.key).
    Attributes: `resource`, `role`, `function`."""

    def __init__(self, scope: Construct, id: str, *, vpc: ec2.Vpc, cluster_name: str,
                 log_key: kms.IKey | None = None):
        super().__init__(scope, id)
        fn = _TeardownFunction(
            self, "Handler", handler="eni_janitor.handler",
            description="On stack deletion: delete ENIs and EKS cluster security groups left in the VPC so it can go",
            # Lambda's maximum: hyperplane ENIs of a deleted VPC Lambda take minutes to be released.
            timeout=cdk.Duration.minutes(15), log_key=log_key,
        )
        stack = cdk.Stack.of(self)
        in_this_vpc = {"ArnEquals": {"ec2:Vpc": stack.format_arn(service="ec2", resource="vpc",
                                                                   resource_name=vpc.vpc_id)}}
        fn.role.add_to_policy(iam.PolicyStatement(
            actions=["ec2:DescribeNetworkInterfaces", "ec2:DescribeSecurityGroups"], resources=["*"]))
        any_interface = stack.format_arn(service="ec2", resource="network-interface", resource_name="*")
        fn.role.add_to_policy(iam.PolicyStatement(
            actions=["ec2:DeleteNetworkInterface"], resources=[any_interface], conditions=in_this_vpc))
        any_group = stack.format_arn(service="ec2", resource="security-group", resource_name="*")
        fn.role.add_to_policy(iam.PolicyStatement(
            actions=["ec2:DeleteSecurityGroup"], resources=[any_group],
            conditions={**in_this_vpc, "StringEquals": {f"ec2:ResourceTag/{CLUSTER_TAG}": cluster_name}}))
        policy = fn.role.node.find_child("DefaultPolicy").node.default_child
        acknowledge(policy, "IAM5[Resource::*]",
                    "ec2:DescribeNetworkInterfaces and ec2:DescribeSecurityGroups have no resource-level "
                    "permissions; they only read.")
        acknowledge(policy, wildcard_resource(policy, any_interface),
                    "The leftover ENIs have ids nobody knows in advance; the ec2:Vpc condition limits "
                    "deletion to interfaces in this environment's VPC.")
        acknowledge(policy, wildcard_resource(policy, any_group),
                    "EKS creates the cluster security group, so its id is unknown here; the conditions limit "
                    "deletion to groups in this VPC that EKS tagged with this environment's cluster name.")
        self.role = fn.role
        self.function = fn.function
        self.resource = cdk.CustomResource(
            self, "Resource", service_token=fn.function.function_arn, resource_type="Custom::EniJanitor",
            properties={"VpcId": vpc.vpc_id, "ClusterName": cluster_name},
        )
        # Depending on the VPC construct depends on every subnet, route, NAT gateway and gateway in
        # it: CloudFormation deletes this resource (and so sweeps) before any of them.
        self.resource.node.add_dependency(vpc)


class FsxFinalBackup(Construct):
    """Attributes: `resource`, `role`."""

    def __init__(self, scope: Construct, id: str, *, file_system: fsx.LustreFileSystem):
        super().__init__(scope, id)
        fn = _TeardownFunction(
            self, "Handler", handler="fsx_final_backup.handler",
            description="On stack deletion: back up the retained FSx file system and wait until the backup is AVAILABLE",
            # Lambda's maximum: an incremental backup after the daily one takes seconds to minutes;
            # a longer one fails the delete with its id, and the next delete waits on it again.
            timeout=cdk.Duration.minutes(15),
        )
        stack = cdk.Stack.of(self)
        any_backup = stack.format_arn(service="fsx", resource="backup", resource_name="*")
        fn.role.add_to_policy(iam.PolicyStatement(
            actions=["fsx:CreateBackup"],
            resources=[stack.format_arn(service="fsx", resource="file-system", resource_name=file_system.file_system_id),
                       any_backup],
        ))
        fn.role.add_to_policy(iam.PolicyStatement(actions=["fsx:TagResource"], resources=[any_backup]))
        fn.role.add_to_policy(iam.PolicyStatement(actions=["fsx:DescribeBackups"], resources=["*"]))
        policy = fn.role.node.find_child("DefaultPolicy").node.default_child
        acknowledge(policy, wildcard_resource(fn.role, any_backup),
                    "A new backup's id is only known once FSx creates it; CreateBackup is also limited to "
                    "this one file system, and no permission restores or deletes backups.")
        acknowledge_resource_star(policy, {frozenset({"fsx:DescribeBackups"}): (
            "fsx:DescribeBackups has no resource-level permissions; it only reads backup states, which the "
            "handler polls until its backup is AVAILABLE")})
        self.role = fn.role
        self.function = fn.function
        self.resource = cdk.CustomResource(
            self, "Resource", service_token=fn.function.function_arn, resource_type="Custom::FsxFinalBackup",
            properties={"FileSystemId": file_system.file_system_id, "StackName": stack.stack_name},
        )
