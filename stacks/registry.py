"""Registry: the trainer's ECR repository, and the trainer images built from trainer/ at deploy time.

`cdk deploy` builds each image and publishes it to the CDK bootstrap's container-assets
repository (the only place aws-cdk-lib publishes image assets), then copies it into the trainer
repository (cdk_constructs/image_copy.py), where scan on push, immutable tags, the KMS key and the
lifecycle rules apply. Pods run the copy, never the asset.
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_kms as kms
from constructs import Construct

from config import Environment
from cdk_constructs.image_copy import TrainerImageCopy
from cdk_constructs.log_groups import EncryptedLogs
from config.outputs import REPOSITORY_URI_OUTPUT, trainer_image_output
from stacks.removal import apply_removal_policy, removal_policy

REPO_ROOT = Path(__file__).resolve().parent.parent
# The image needs the trainer and the shared config package; its requirements are trainer/'s own
# (requirements.lock, requirements-torch.txt). Everything else (.venv, node_modules, cdk.out, the
# development pins of requirements.txt and requirements-checkov.txt, which no image reads) would
# otherwise be copied into every asset staging directory, and a change to it would rebuild the images.
DOCKER_CONTEXT_EXCLUDE = [
    "*",
    "!trainer/",
    "!config/",
    "**/__pycache__",
    "**/*.pyc",
]
TRAINER_DOCKERFILES = {"cpu": "trainer/Dockerfile.cpu", "gpu": "trainer/Dockerfile"}
UNTAGGED_IMAGE_DAYS = 7
IMAGES_KEPT = 50


class RegistryStack(cdk.Stack):
    """Attributes: `repository` (ecr.Repository), `kms_key`, `logs` (EncryptedLogs), `trainer_images` ({"cpu", "gpu"} ->
    DockerImageAsset: built and pushed by `cdk deploy`, never by synth), `image_copy`
    (TrainerImageCopy), `trainer_image_uris` (variant -> `<repository URI>:<tag>`: the copy in the
    trainer repository under its immutable tag, the asset's source hash, known at synth) and
    `trainer_image_digest_uris` (variant -> `<repository URI>:<tag>@<digest>`, known at deploy)."""

    def __init__(self, scope: Construct, id: str, *, config: Environment, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        self.config = config
        policy = removal_policy(config)

        self.kms_key = kms.Key(self, "RepositoryKey", enable_key_rotation=True, removal_policy=policy,
                               description=f"{config.name}: trainer images at rest in ECR")
        self.repository = ecr.Repository(
            self, "TrainerRepository",
            image_scan_on_push=True,
            # A tag names one image forever: a job that ran with :v12 can be rerun with the same bits.
            image_tag_mutability=ecr.TagMutability.IMMUTABLE,
            encryption=ecr.RepositoryEncryption.KMS, encryption_key=self.kms_key,
            lifecycle_rules=[
                ecr.LifecycleRule(rule_priority=1, description="Drop untagged layers of superseded pushes",
                                  tag_status=ecr.TagStatus.UNTAGGED, max_image_age=cdk.Duration.days(UNTAGGED_IMAGE_DAYS)),
                ecr.LifecycleRule(rule_priority=2, description=f"Keep the newest {IMAGES_KEPT} images",
                                  tag_status=ecr.TagStatus.ANY, max_image_count=IMAGES_KEPT),
            ],
            removal_policy=policy,
            empty_on_delete=not config.retain,
        )

        self.trainer_images: dict[str, ecr_assets.DockerImageAsset] = {
            variant: ecr_assets.DockerImageAsset(
                self, f"TrainerImage-{variant}",
                directory=str(REPO_ROOT), file=dockerfile,
                exclude=DOCKER_CONTEXT_EXCLUDE, ignore_mode=cdk.IgnoreMode.DOCKER,
                platform=ecr_assets.Platform.LINUX_AMD64,
            )
            for variant, dockerfile in TRAINER_DOCKERFILES.items()
        }

        self.logs = EncryptedLogs(self, "Logs", retain=config.retain,
                                  description=f"{config.name}: the trainer image copy's logs at rest")
        self.image_copy = TrainerImageCopy(self, "TrainerImageCopy", repository=self.repository,
                                           images=self.trainer_images, log_key=self.logs.key)
        uri = self.repository.repository_uri
        self.trainer_image_uris = {v: f"{uri}:{tag}" for v, tag in self.image_copy.tags.items()}
        self.trainer_image_digest_uris = {v: f"{uri}:{self.image_copy.tags[v]}@{digest}"
                                          for v, digest in self.image_copy.digests.items()}

        apply_removal_policy(self, config)
        cdk.CfnOutput(self, REPOSITORY_URI_OUTPUT, value=self.repository.repository_uri,
                      description="ECR repository for trainer images")
        # The image the deployed preset jobs run, pinned by digest; `ops submit`, `ops data` and
        # `ops model download` default --image to it.
        for variant, image in self.trainer_image_digest_uris.items():
            cdk.CfnOutput(self, trainer_image_output(variant), value=image,
                          description=f"trainer image ({variant}) in the trainer repository, by digest")
