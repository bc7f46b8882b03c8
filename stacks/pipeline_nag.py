"""cdk-nag acknowledgments for what CDK Pipelines generates, each with the reviewer's reason.

The pipelines library writes its own roles and grants (artifact bucket, artifact key, CodeBuild
logs and reports, self-mutation). Their wildcard findings are acknowledged here one by one, on
the policy that has them: a wildcard resource or action by matching the finding against the
patterns below, Resource "*" only for the exact action sets reviewed below. A finding that
matches nothing is left alone, so anything new still stops synthesis.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct

from cdk_constructs.nag import acknowledge, acknowledge_accepted_iam5, acknowledge_resource_star

_ARTIFACTS = "the pipeline's own artifact bucket, private and KMS-encrypted"
ACCEPTED_IAM5 = (
    (r"^Action::s3:(Abort|DeleteObject|GetBucket|GetObject|List)\*$",
     f"CDK Pipelines' standard object grant on {_ARTIFACTS}: stages read and write build artifacts."),
    (r"^Action::kms:(GenerateDataKey|ReEncrypt)\*$",
     "CDK Pipelines' grant on the pipeline's artifact encryption key: encrypting artifacts needs data keys."),
    (r"^Resource::<[A-Za-z0-9]+ArtifactsBucket[A-Za-z0-9]*\.Arn>/\*$",
     f"Objects of {_ARTIFACTS}; no other bucket is reachable."),
    (r"^Resource::arn:[a-z-]+:s3:::pipeline-support-[a-z0-9-]+/\*$",
     "Objects of the cross-region replication bucket CDK Pipelines creates for the prod region's artifacts."),
    (r"^Resource::arn:[a-z-]+:codebuild:[a-z0-9-]+:\d{12}:report-group/(\*|<[A-Za-z0-9]+>-\*)$",
     "CodeBuild test reports of the pipeline's own build projects."),
    (r"^Resource::arn:[a-z-]+:logs:[a-z0-9-]+:\d{12}:log-group:/aws/codebuild/(\*|<[A-Za-z0-9]+>:\*)$",
     "CloudWatch log streams of the pipeline's own CodeBuild projects."),
    (r"^Resource::arn:\*:iam::\d{12}:role/\*$",
     "Self-mutation assumes the CDK bootstrap roles of the pipeline account; the pipelines library adds "
     "a condition on the bootstrap role tag, so only those roles can be assumed."),
)
# What CDK Pipelines grants on Resource "*", as the exact action set of each policy that has it; a
# policy with any other action on "*" keeps its finding (cdk_constructs/nag.acknowledge_resource_star).
RESOURCE_STAR = {
    frozenset({"kms:Decrypt", "kms:DescribeKey", "kms:Encrypt", "kms:GenerateDataKey*", "kms:ReEncrypt*"}):
        "The pipeline role's use of the cross-region replication bucket's key, which the support stack in "
        "the other region creates; CDK Pipelines cannot name a key of another stack and region here",
    frozenset({"cloudformation:DescribeStacks", "s3:ListBucket"}):
        "Self-mutation reads stack states and lists the artifact buckets before `cdk deploy` of the pipeline "
        "itself; the bootstrap roles it assumes hold the rights that change anything",
    frozenset({"codebuild:BatchGetBuilds", "codebuild:StartBuild", "codebuild:StopBuild"}):
        "The asset-publishing action roles start and watch the CodeBuild projects CDK Pipelines creates for "
        "publishing; the library names no project in this statement",
}


def apply_pipeline_nag(pipeline_stack: cdk.Stack, support_stacks: list[cdk.Stack]) -> None:
    """Run cdk-nag's AwsSolutions pack on the pipeline stack (its stages and the cross-region support
    stacks included: a plugin on a stage nested in it is never reported), and acknowledge the
    accepted findings on every generated policy and artifact bucket outside the deployment stages
    (their stacks have their own acknowledgments, stacks/nag.py)."""
    cdk.Validations.of(pipeline_stack).add_plugins(
        AwsSolutionsChecks(pipeline_stack, verbose=True, write_suppressions_to_cloud_formation=True))
    for scope in (pipeline_stack, *support_stacks):
        for node in _outside_stages(scope):
            if isinstance(node, iam.CfnPolicy):
                acknowledge_accepted_iam5(node, ACCEPTED_IAM5)
                acknowledge_resource_star(node, RESOURCE_STAR)
            elif isinstance(node, s3.CfnBucket):
                acknowledge(node, "S1", "Pipeline artifact store written only by the pipeline's roles; access "
                            "is audited through CloudTrail, and a log bucket would itself need a log bucket.")


def _outside_stages(scope: IConstruct):
    stack = [scope]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(c for c in node.node.children if not isinstance(c, cdk.Stage))
