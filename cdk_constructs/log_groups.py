"""CloudWatch Logs groups that expire and are encrypted with a customer key the stack owns.

A log group encrypted with a KMS key needs a key policy that lets the regional CloudWatch Logs
service principal use the key, limited by the `kms:EncryptionContext:aws:logs:arn` condition;
otherwise creating the group fails (Amazon CloudWatch Logs User Guide, "Encrypt log data in
CloudWatch Logs using AWS Key Management Service",
https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/encrypt-log-data-kms.html, step 2).
Writers need no KMS permission of their own: CloudWatch Logs encrypts on their behalf.

The groups' removal policy is the stack's (stacks/removal.py keeps log groups and keys in a
retain environment, except groups under a fixed name, which a later deploy would create again);
retention is longer there too.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

RETENTION_KEPT = logs.RetentionDays.ONE_YEAR
RETENTION_DISPOSABLE = logs.RetentionDays.ONE_MONTH


def log_retention(retain: bool) -> logs.RetentionDays:
    """A year where the environment keeps its data, a month where it does not."""
    return RETENTION_KEPT if retain else RETENTION_DISPOSABLE


class EncryptedLogs(Construct):
    """A rotating KMS key CloudWatch Logs may use for this account and region's log groups, and
    the log groups made with it. Attributes: `key`, `groups` (construct id -> LogGroup)."""

    def __init__(self, scope: Construct, id: str, *, retain: bool, description: str) -> None:
        super().__init__(scope, id)
        stack = cdk.Stack.of(self)
        self.retention = log_retention(retain)
        self.key = kms.Key(self, "Key", enable_key_rotation=True, description=description)
        # The group names are not all known here (some are generated), and naming a group's ARN
        # in the key that encrypts it would be a cycle; the condition keeps the key to log groups.
        self.key.add_to_resource_policy(iam.PolicyStatement(
            principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
            actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
            resources=["*"],
            conditions={"ArnLike": {"kms:EncryptionContext:aws:logs:arn": stack.format_arn(
                service="logs", resource="log-group", resource_name="*", arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME)}},
        ))
        self.groups: dict[str, logs.LogGroup] = {}

    def group(self, id: str, *, name: str | None = None) -> logs.LogGroup:
        """A log group in this construct, named `name` (or by CloudFormation)."""
        group = logs.LogGroup(self, id, log_group_name=name, encryption_key=self.key, retention=self.retention)
        self.groups[id] = group
        return group


def send_function_logs(function: cdk.CfnResource, group: logs.ILogGroup) -> None:
    """`function`, an AWS::Lambda::Function that aws-cdk-lib makes without a log group, writes to
    `group`. Otherwise CloudWatch creates /aws/lambda/<function> at its first invocation (Lambda
    Developer Guide, "Configuring CloudWatch log groups",
    https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-loggroups.html): a group
    no stack knows, without expiry or key, that every destroy leaves behind. The function's role
    needs no more: aws-cdk-lib gives it AWSLambdaBasicExecutionRole, which may write to any group."""
    function.add_property_override("LoggingConfig.LogGroup", group.log_group_name)
