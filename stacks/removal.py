"""The environment's removalPolicy as CDK sees it: one place decides what `destroy` deletes.

destroy: every resource goes with its stack (FSx, ECR images, KMS keys and log groups included),
so a dev environment leaves nothing billing behind. retain: every resource stays, so deleting a
stack (by hand or by a replacement) never takes a file system, an image or a key with it.
"""

from __future__ import annotations

import aws_cdk as cdk

from config import Environment


def removal_policy(config: Environment) -> cdk.RemovalPolicy:
    return cdk.RemovalPolicy.RETAIN if config.retain else cdk.RemovalPolicy.DESTROY


def apply_removal_policy(stack: cdk.Stack, config: Environment) -> None:
    """The policy on every resource of `stack`, including those aws-cdk-lib creates for us."""
    cdk.RemovalPolicies.of(stack).apply(removal_policy(config))
