"""Acknowledging cdk-nag findings: an acknowledgment names exactly what was reviewed, so a new
wildcard on the same policy still stops synthesis. Run through cdk-nag itself on a small stack."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from cdk_nag import AwsSolutionsChecks

from cdk_constructs.nag import acknowledge_accepted_iam5, acknowledge_resource_star, actions_on_every_resource
from stacks.nag import RUNNER_RESOURCE_STAR
from stacks.pipeline_nag import ACCEPTED_IAM5, RESOURCE_STAR

REVIEWED = {frozenset({"codebuild:BatchGetBuilds", "codebuild:StartBuild", "codebuild:StopBuild"}): "reviewed"}


def nag_findings(statements: list[iam.PolicyStatement]) -> tuple[list[str], list[str]]:
    """(unacknowledged, acknowledged) AwsSolutions rule names of a role whose policy has `statements`,
    acknowledged as the pipeline's policies are."""
    outdir = tempfile.mkdtemp(prefix="nag-")
    app = cdk.App(outdir=outdir)
    stack = cdk.Stack(app, "S", env=cdk.Environment(account="111111111111", region="us-west-2"))
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("codebuild.amazonaws.com"))
    for statement in statements:
        role.add_to_policy(statement)
    policy = role.node.find_child("DefaultPolicy").node.default_child
    acknowledge_accepted_iam5(policy, ACCEPTED_IAM5)
    acknowledge_resource_star(policy, REVIEWED)
    cdk.Validations.of(stack).add_plugins(AwsSolutionsChecks(stack))
    try:
        app.synth()
    except Exception:  # noqa: BLE001 - jsii raises its own type when a plugin fails; the report says why
        pass
    [report] = [r for r in json.loads((Path(outdir) / "validation-report.json").read_text())["pluginReports"]
                if r["pluginName"] == "AwsSolutions"]
    return ([v["ruleName"] for v in report.get("violations", [])], [v["ruleName"] for v in report.get("suppressedViolations", [])])


BUILDS = ["codebuild:BatchGetBuilds", "codebuild:StartBuild", "codebuild:StopBuild"]


def test_the_reviewed_actions_on_every_resource_are_acknowledged():
    violations, acknowledged = nag_findings([iam.PolicyStatement(actions=BUILDS, resources=["*"])])
    assert violations == [] and acknowledged == ["AwsSolutions-IAM5[Resource::*]"]


def test_one_more_action_on_every_resource_stops_synthesis():
    """The old catch-all acknowledged `Resource::*` whatever the actions; now an action nobody
    reviewed keeps the finding."""
    violations, _ = nag_findings([iam.PolicyStatement(actions=BUILDS, resources=["*"]),
                                  iam.PolicyStatement(actions=["iam:PassRole"], resources=["*"])])
    assert violations == ["AwsSolutions-IAM5[Resource::*]"]


def test_a_new_wildcard_resource_no_pattern_names_stops_synthesis():
    violations, _ = nag_findings([iam.PolicyStatement(actions=["s3:GetObject"],
                                                      resources=["arn:aws:s3:::someone-elses-bucket/*"])])
    assert violations == ["AwsSolutions-IAM5[Resource::arn:aws:s3:::someone-elses-bucket/*]"]


def test_no_accepted_pattern_matches_every_resource():
    assert not [p for p, _ in ACCEPTED_IAM5 if re.match(p, "Resource::*")]


@pytest.mark.parametrize("reviewed", [RESOURCE_STAR, RUNNER_RESOURCE_STAR])
def test_every_reviewed_action_set_has_a_reason(reviewed):
    assert reviewed and all(actions and len(reason) >= 60 for actions, reason in reviewed.items())


def test_actions_on_every_resource_reads_only_allow_statements_on_star():
    document = {"Statement": [
        {"Effect": "Allow", "Action": "ec2:DescribeVpcs", "Resource": "*"},
        {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": ["arn:aws:s3:::b/*"]},
        {"Effect": "Deny", "Action": "iam:*", "Resource": "*"},
        {"Effect": "Allow", "Action": ["kms:Decrypt", "kms:Encrypt"], "Resource": ["arn:k", "*"]},
    ]}
    assert actions_on_every_resource(document) == {"ec2:DescribeVpcs", "kms:Decrypt", "kms:Encrypt"}
