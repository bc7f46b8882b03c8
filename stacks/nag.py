"""cdk-nag's AwsSolutions pack on every stack of a stage, and the findings we accept, with why.

cdk-nag 3 runs as a CDK policy-validation plugin: a finding nobody acknowledged stops synthesis,
and every finding, acknowledged or not, lands in the cloud assembly's validation report. Each
acknowledgment below is attached to the one resource it is about (never a whole stack) and names
the exact finding (policy or resource), so a new finding on the same resource still fails.
"""

from __future__ import annotations

import json

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from cdk_constructs.nag import acknowledge, acknowledge_accepted_iam5, acknowledge_resource_star, wildcard_resource

# aws-cdk-lib's grants to the validation runner's CodeBuild role (stacks/validation.py).
RUNNER_IAM5 = (
    (r"^Action::s3:(GetBucket|GetObject|List)\*$",
     "aws-cdk-lib's read grant for the runner's source; the statement names only the bootstrap asset bucket "
     "and the one source object."),
    (r"^Action::kms:(GenerateDataKey|ReEncrypt)\*$",
     "CodeBuild encrypts the runner's build output with the stack's own key, the only key the statement names."),
    (r"^Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:network-interface/\*$",
     "CodeBuild in a VPC (aws-cdk-lib's grant): ec2:CreateNetworkInterfacePermission on any network interface "
     "of the account, but only with ec2:Subnet one of the runner's subnets and ec2:AuthorizedService "
     "codebuild.amazonaws.com, so only CodeBuild may attach an interface, and only there."),
    (r"^Resource::arn:[a-z-]+:codebuild:[a-z0-9-]+:\d{12}:report-group/<[A-Za-z0-9]+>-\*$",
     "Test-report groups of the runner project only (aws-cdk-lib's default CodeBuild grant)."),
    (r"^Resource::arn:[a-z-]+:logs:[a-z0-9-]+:\d{12}:log-group:/aws/codebuild/<[A-Za-z0-9]+>:\*$",
     "Log streams of the runner project's default log group only (aws-cdk-lib's default CodeBuild grant)."),
)

# The runner's VPC statement (stacks/validation.py scopes aws-cdk-lib's): the Describe calls CodeBuild
# makes for a build in a VPC ("Allow Amazon VPC access in your CodeBuild projects",
# enabling-vpc-access-in-projects.html) have no resource-level permissions.
RUNNER_RESOURCE_STAR = {
    frozenset({"ec2:DescribeDhcpOptions", "ec2:DescribeNetworkInterfaces", "ec2:DescribeSecurityGroups",
               "ec2:DescribeSubnets", "ec2:DescribeVpcs"}):
        "The Describe calls CodeBuild makes to place a build in the VPC; they have no resource-level "
        "permissions and only read",
}


def apply_nag(stage) -> None:
    """Register the pack on the stage and acknowledge the findings its stacks are known to have."""
    cdk.Validations.of(stage).add_plugins(
        AwsSolutionsChecks(stage, verbose=True, write_suppressions_to_cloud_formation=True))
    _acknowledge_cluster(stage.cluster)
    _acknowledge_validation(stage.validation)


def _managed(policy: str) -> str:
    return f"IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{policy}]"


def _acknowledge_cluster(stack) -> None:
    cluster = stack.cluster
    acknowledge(cluster.role.node.default_child, _managed("AmazonEKSClusterPolicy"),
                "EKS requires AmazonEKSClusterPolicy on the cluster service role; AWS maintains it as the "
                "control plane's API needs change.")
    node_role = stack.node_role.node.default_child
    for policy, why in (
        ("AmazonEKSWorkerNodePolicy", "lets the kubelet register the node and describe its instance, and the Pod "
                                      "Identity agent fetch pod credentials"),
        ("AmazonEC2ContainerRegistryPullOnly", "lets the kubelet pull images from ECR, nothing else"),
    ):
        acknowledge(node_role, _managed(policy),
                    f"The Amazon EKS node IAM role takes this AWS-maintained policy (EKS User Guide, create-node-role): "
                    f"it {why}.")
    acknowledge(stack.node.find_child("VpcCniRole").node.default_child, _managed("AmazonEKS_CNI_Policy"),
                "The VPC CNI's own Pod Identity role (kube-system/aws-node only), as the EKS User Guide recommends "
                "(cni-iam-role) instead of the node role: AWS maintains the ENI and IP-assignment actions it needs.")
    acknowledge(stack.node.find_child("CloudWatchAgentRole").node.default_child,
                _managed("CloudWatchAgentServerPolicy"),
                "The amazon-cloudwatch-observability add-on documents this AWS-maintained policy for its "
                "agent's Pod Identity role: put metrics and log events, describe volumes and tags.")
    acknowledge(stack.node.find_child("FsxCsiRole").node.find_child("DefaultPolicy").node.default_child,
                f"IAM5[Resource::{stack.format_arn(service='fsx', resource='file-system', resource_name='*')}]",
                "Read-only fsx:DescribeFileSystems on this account and region's file systems. The file system "
                "is created by the Storage stack, which depends on this one, so naming its ARN here would be "
                "a dependency cycle; the driver cannot create, change or delete anything.")
    for name, role in stack.data_source_roles.items():
        source = stack.config.data_source(name)
        acknowledge(role.node.find_child("DefaultPolicy").node.default_child,
                    wildcard_resource(role, f"arn:{stack.partition}:s3:::{source.bucket}/{source.prefix}*"),
                    f"s3:GetObject on the objects below the configured prefix {source.s3_uri} only: the data Job "
                    "copies whatever the prefix holds, so the object names are not known in advance.")
    _acknowledge_kubectl_provider(cluster.node.find_child("KubectlProvider"))


def _acknowledge_kubectl_provider(provider: Construct) -> None:
    """The kubectl handler and its custom-resource framework are aws-cdk-lib's own Lambda functions."""
    handler = provider.node.find_child("Handler")
    handler_role = handler.node.find_child("ServiceRole").node.default_child
    framework_role = provider.node.find_child("Provider").node.find_child("framework-onEvent") \
        .node.find_child("ServiceRole")
    lambda_why = "aws-cdk-lib's kubectl provider Lambda needs it to {}; the role is not used by anything else."
    for role in (handler_role, framework_role.node.default_child):
        acknowledge(role, _managed("service-role/AWSLambdaBasicExecutionRole"), lambda_why.format("write its logs"))
        acknowledge(role, _managed("service-role/AWSLambdaVPCAccessExecutionRole"),
                    lambda_why.format("run in the private subnets that reach the private API endpoint"))
    acknowledge(handler_role, _managed("AmazonEC2ContainerRegistryReadOnly"),
                lambda_why.format("read Helm charts stored as OCI artifacts in ECR (read-only)"))
    ecr_public = {"Fn::If": [
        cdk.Stack.of(provider).get_logical_id(handler.node.find_child("HasEcrPublic")),
        {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly"]]},
        {"Ref": "AWS::NoValue"},
    ]}
    acknowledge(handler_role, f"IAM4[Policy::{json.dumps(ecr_public, separators=(',', ':'))}]",
                lambda_why.format("read public Helm charts from ECR Public, only in partitions that have it"))
    acknowledge(framework_role.node.find_child("DefaultPolicy").node.default_child,
                f"IAM5[Resource::<{cdk.Stack.of(provider).get_logical_id(handler.node.default_child)}.Arn>:*]",
                "The custom-resource framework may invoke any version of the kubectl handler Lambda, and only it.")
    acknowledge(handler.node.default_child, "L1",
                "aws-cdk-lib picks the kubectl handler's Python runtime and ships its code; it is upgraded with "
                "aws-cdk-lib, not here.")


def _acknowledge_validation(stack) -> None:
    acknowledge_accepted_iam5(stack.runner_role.node.find_child("DefaultPolicy").node.default_child, RUNNER_IAM5)
    vpc_policy = stack.runner.node.find_child("PolicyDocument").node.default_child
    acknowledge_resource_star(vpc_policy, RUNNER_RESOURCE_STAR)
    acknowledge(vpc_policy, wildcard_resource(vpc_policy, stack.format_arn(
        service="ec2", resource="network-interface", resource_name="*")),
        "CodeBuild creates the build's interface (its id is not known in advance) only in the runner's subnets "
        "with the runner's security group, and may delete interfaces only where ec2:Vpc is this VPC.")
