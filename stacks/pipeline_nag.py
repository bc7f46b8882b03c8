"""cdk-nag acknowledgments for what CDK Pipelines generates, each with the reviewer's reason.

The pipelines library writes its own roles and grants (artifact bucket, artifact key, CodeBuild
logs and reports, self-mutation). Their wildcard findings are acknowledged here one by one, on
the policy that has them, by matching the finding against the patterns below. A finding that
matches no pattern is left alone, so anything new still stops synthesis.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct, IConstruct

from cdk_constructs.nag import acknowledge, acknowledge_accepted_iam5

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
    (r"^Resource::\*$",
     "Actions AWS does not scope by resource here: CodeBuild batch/start on the asset projects created "
     "at publish time, cloudformation:DescribeStacks and s3:ListBucket for self-mutation, and KMS on the "
     "cross-region replication key that lives in another stack."),
)


def acknowledge_pipeline(scopes: list[Construct]) -> None:
    """Acknowledge the accepted findings on every generated policy and artifact bucket in `scopes`,
    skipping the deployment stages (their stacks have their own acknowledgments)."""
    for scope in scopes:
        for node in _outside_stages(scope):
            if isinstance(node, iam.CfnPolicy):
                acknowledge_accepted_iam5(node, ACCEPTED_IAM5)
            elif isinstance(node, s3.CfnBucket):
                acknowledge(node, "S1", "Pipeline artifact store written only by the pipeline's roles; access "
                            "is audited through CloudTrail, and a log bucket would itself need a log bucket.")


def _outside_stages(scope: IConstruct):
    stack = [scope]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(c for c in node.node.children if not isinstance(c, cdk.Stage))
