"""ValidationAccessStack: the door the pipeline's post-deploy validation walks through.

It lives in the target environment's account beside the cluster: a role that only the named
validation runner role of the pipeline account may assume, mapped by an EKS access entry to
edit rights in the training namespace (where the validation Jobs run) and read-only rights on
the cluster (to count Ready nodes per node group). No cluster-admin.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from config.kubernetes import TRAINING_NAMESPACE


def validation_runner_role_name(env_name: str) -> str:
    """The pipeline-account role that runs validation for `env_name`; named so the target
    account can trust exactly that role and nothing else in the pipeline account."""
    return f"{env_name}-cluster-validation-runner"


def validation_role_name(env_name: str) -> str:
    """The target-account role the runner assumes; fixed so the runner's policy names it exactly."""
    return f"{env_name}-cluster-validation"


class ValidationAccessStack(cdk.Stack):
    """Attributes: `role` (the assumable validation role), `role_arn_output` (CfnOutput)."""

    def __init__(self, scope: Construct, id: str, *, cluster: eks.ICluster, env_name: str,
                 pipeline_account: str, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        runner_arn = f"arn:{cdk.Aws.PARTITION}:iam::{pipeline_account}:role/{validation_runner_role_name(env_name)}"
        self.role = iam.Role(
            self, "ValidationRole",
            role_name=validation_role_name(env_name),
            description=f"{env_name}: post-deploy GPU and NCCL validation from the pipeline",
            assumed_by=iam.AccountPrincipal(pipeline_account).with_conditions(
                {"ArnEquals": {"aws:PrincipalArn": runner_arn}}),
            max_session_duration=cdk.Duration.hours(1),
        )
        # update-kubeconfig reads the endpoint and CA with this role's credentials.
        self.role.add_to_policy(iam.PolicyStatement(actions=["eks:DescribeCluster"], resources=[cluster.cluster_arn]))
        eks.AccessEntry(
            self, "ValidationAccess", cluster=cluster, principal=self.role.role_arn,
            access_policies=[
                eks.AccessPolicy.from_access_policy_name(
                    "AmazonEKSEditPolicy", access_scope_type=eks.AccessScopeType.NAMESPACE,
                    namespaces=[TRAINING_NAMESPACE]),
                eks.AccessPolicy.from_access_policy_name(
                    "AmazonEKSAdminViewPolicy", access_scope_type=eks.AccessScopeType.CLUSTER),
            ],
        )
        self.role_arn_output = cdk.CfnOutput(self, "ValidationRoleArn", value=self.role.role_arn)
