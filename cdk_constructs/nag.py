"""Acknowledging cdk-nag findings on the one resource they are about.

cdk-nag 3 runs as a CDK validation plugin: an acknowledgment names the exact finding id, so a new
finding on the same resource still fails synthesis. Wildcard findings spell CloudFormation
intrinsics the way cdk-nag flattens them, which `flatten_reference` reproduces.
"""

from __future__ import annotations

import json
import re

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
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


def iam5_findings(policy_document: dict) -> list[str]:
    """The IAM5 findings cdk-nag reports for a resolved policy document."""
    findings: list[str] = []
    for statement in policy_document.get("Statement", []):
        if statement.get("Effect") != "Allow":
            continue
        for action in _as_list(statement.get("Action")):
            if "*" in action:
                findings.append(f"Action::{action}")
        for resource in _as_list(statement.get("Resource")):
            if "*" in json.dumps(resource):
                findings.append(f"Resource::{flatten_reference(resource)}")
    return list(dict.fromkeys(findings))


def acknowledge_accepted_iam5(policy: iam.CfnPolicy, accepted: tuple[tuple[str, str], ...]) -> None:
    """Acknowledge each IAM5 finding of `policy` that matches an accepted (pattern, reason) pair;
    a finding that matches none is left alone, so anything new still stops synthesis."""
    document = cdk.Stack.of(policy).resolve(policy.policy_document)
    for finding in iam5_findings(document):
        reason = next((why for pattern, why in accepted if re.match(pattern, finding)), None)
        if reason:
            acknowledge(policy, f"IAM5[{finding}]", reason)


def actions_on_every_resource(policy_document: dict) -> set[str]:
    """The actions a resolved policy document allows on Resource "*"."""
    return {action for statement in policy_document.get("Statement", []) if statement.get("Effect") == "Allow"
            and "*" in _as_list(statement.get("Resource")) for action in _as_list(statement.get("Action"))}


def acknowledge_resource_star(policy: iam.CfnPolicy, reviewed: dict[frozenset[str], str]) -> bool:
    """Acknowledge `policy`'s IAM5[Resource::*] finding only when the actions it allows on "*" are
    exactly one reviewed set (actions -> reason); any other action on "*" leaves the finding to stop
    synthesis. True when acknowledged."""
    actions = frozenset(actions_on_every_resource(cdk.Stack.of(policy).resolve(policy.policy_document)))
    reason = reviewed.get(actions)
    if actions and reason:
        acknowledge(policy, "IAM5[Resource::*]", f"{reason} (on \"*\": {', '.join(sorted(actions))})")
    return bool(actions and reason)


def _as_list(value) -> list:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]
