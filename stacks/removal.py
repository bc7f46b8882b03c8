"""The environment's removalPolicy as CDK sees it: one place decides what `destroy` deletes."""

from __future__ import annotations

import aws_cdk as cdk

from config import Environment


def removal_policy(config: Environment) -> cdk.RemovalPolicy:
    return cdk.RemovalPolicy.RETAIN if config.retain else cdk.RemovalPolicy.DESTROY
