"""Acknowledging cdk-nag findings on the one resource they are about.

cdk-nag 3 runs as a CDK validation plugin: an acknowledgment names the exact finding id, so a new
finding on the same resource still fails synthesis. Wildcard findings spell CloudFormation
intrinsics the way cdk-nag flattens them, which `flatten_reference` reproduces.
"""

from __future__ import annotations

import aws_cdk as cdk
from constructs import IConstruct

PACK = "AwsSolutions"


def acknowledge(construct: IConstruct, rule: str, reason: str) -> None:
    cdk.Validations.of(construct).acknowledge(cdk.Acknowledgment(id=f"{PACK}::{PACK}-{rule}", reason=reason))


def flatten_reference(node) -> str:
    """A resolved CloudFormation value as cdk-nag spells it in finding ids."""
    if isinstance(node, str):
        return node.replace("${", "<").replace("}", ">")
    if isinstance(node, dict):
        if "Fn::Join" in node:
            delimiter, items = node["Fn::Join"]
            return delimiter.join(flatten_reference(i) for i in items)
        if "Fn::Sub" in node:
            return flatten_reference(node["Fn::Sub"])
        if "Fn::GetAtt" in node:
            resource, attribute = node["Fn::GetAtt"]
            return f"<{resource}.{attribute}>"
        if "Ref" in node:
            return f"<{node['Ref']}>"
    raise ValueError(f"unexpected CloudFormation value: {node!r}")


def wildcard_resource(scope: IConstruct, resource: str) -> str:
    """The IAM5 rule id for a wildcard `resource` (an ARN that may hold tokens) used in `scope`."""
    return f"IAM5[Resource::{flatten_reference(cdk.Stack.of(scope).resolve(resource))}]"
