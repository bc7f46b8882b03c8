"""Copy Docker image assets into the app's own ECR repository at deploy time.

aws-cdk-lib publishes a DockerImageAsset to the CDK bootstrap's container-assets repository only.
`TrainerImageCopy` copies each image (linux/amd64) from there into `repository` under the asset's
tag, the source hash, so the repository's scan on push, immutable tags, KMS key and lifecycle
apply to what the pods run. The handler is teardown_handlers/copy_image.py.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from cdk_constructs.teardown import _TeardownFunction

SOURCE_READ = ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]
DESTINATION_WRITE = ["ecr:BatchGetImage", "ecr:BatchCheckLayerAvailability", "ecr:InitiateLayerUpload",
                     "ecr:UploadLayerPart", "ecr:CompleteLayerUpload", "ecr:PutImage"]


class TrainerImageCopy(Construct):
    """Attributes: `tags` (key -> the immutable tag, known at synth), `digests` (key -> the copied
    image's digest, a deploy-time token), `resources` (key -> CustomResource), `role`, `function`,
    `dead_letters` (the handler's dead-letter queue, encrypted with `log_key` when given)."""

    def __init__(self, scope: Construct, id: str, *, repository: ecr.IRepository,
                 images: dict[str, ecr_assets.DockerImageAsset], log_key: kms.IKey | None = None):
        """`log_key` encrypts the handler's log group (a key CloudWatch Logs may use: EncryptedLogs.key)."""
        super().__init__(scope, id)
        if not images:
            raise ValueError(f"{self.node.path}: images must name at least one DockerImageAsset")
        # A retried invocation (CloudFormation's asynchronous retries) copies only what is missing.
        fn = _TeardownFunction(
            self, "Handler", handler="copy_image.handler",
            description="On deploy: copy a trainer image from the CDK assets repository into the trainer repository",
            # Lambda's maximum; a copy cut short fails the deploy and the next one copies only what is missing.
            timeout=cdk.Duration.minutes(15), memory_size=2048, log_key=log_key,
        )
        fn.role.add_to_policy(iam.PolicyStatement(
            actions=SOURCE_READ, resources=sorted({a.repository.repository_arn for a in images.values()})))
        fn.role.add_to_policy(iam.PolicyStatement(actions=DESTINATION_WRITE, resources=[repository.repository_arn]))
        self.role, self.function, self.dead_letters = fn.role, fn.function, fn.dead_letters
        self.tags: dict[str, str] = {}
        self.digests: dict[str, str] = {}
        self.resources: dict[str, cdk.CustomResource] = {}
        for key, asset in images.items():
            resource = cdk.CustomResource(
                self, f"Copy-{key}", service_token=fn.function.function_arn, resource_type="Custom::TrainerImageCopy",
                properties={"SourceRepository": asset.repository.repository_name,
                            "DestinationRepository": repository.repository_name, "Tag": asset.image_tag})
            # The role's policy must exist before the handler runs.
            resource.node.add_dependency(fn.role)
            self.tags[key] = asset.image_tag
            self.digests[key] = resource.get_att_string("ImageDigest")
            self.resources[key] = resource
