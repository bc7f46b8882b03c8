"""Destroy an environment, then deploy it again, by the same path or the other: the deploy creates
nothing under a name that what the destroy left still holds.

CloudFormation cannot create a resource under a name that exists ("... already exists"). A destroy
leaves a name taken in two ways: the resource is kept (its DeletionPolicy), or AWS holds the name
after CloudFormation deleted it. Each such resource with a name the next deploy would give it again
(a literal, not one CloudFormation generates) must be one `ops preflight` looks for after a destroy
(its `leftover log groups` row, which `make deploy` and the pipeline's Preflight step run first), or
one the README tells the user to delete. This walks every template of every environment in cdk.json,
as `make deploy` builds it without a pipeline and as the pipeline builds it, and the pipeline's own
stacks, so a named resource added later that a destroy would leave fails here with its logical id.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import aws_cdk as cdk
import pytest

from config import load_environment
from config.outputs import PIPELINE_STACK_ID
from config.pipeline import load_pipeline
from synth_helpers import CONTEXT, REPO_ROOT, VARIANTS, raw_environment, synth, synthesize
from test_teardown import NAME_PROPERTIES, _fixed

ENVIRONMENTS = sorted(CONTEXT["environments"])
README = (REPO_ROOT / "README.md").read_text()

# DeletionPolicy or UpdateReplacePolicy values under which CloudFormation leaves the resource (or, for
# Snapshot, something made from it) in the account. Counted alike: what Snapshot keeps depends on the type.
KEPT = ("Retain", "RetainExceptOnCreate", "Snapshot")

# Types whose name AWS holds, or takes again, after CloudFormation deleted the resource.
HELD_AFTER_DELETE = {
    # A service that writes to a group creates it again when it is missing: EKS for the control
    # plane's last events (https://docs.aws.amazon.com/eks/latest/userguide/control-plane-logs.html),
    # Fluent Bit for Container Insights
    # (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Container-Insights-setup-logs-FluentBit.html),
    # Lambda at a function's next run
    # (https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-loggroups.html).
    "AWS::Logs::LogGroup": "a service writing to it creates it again after the delete",
    # DeleteSecret keeps the secret, name included, through a recovery window of 7 to 30 days (30 by
    # default), and even a forced delete finishes in the background
    # (https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_DeleteSecret.html).
    "AWS::SecretsManager::Secret": "Secrets Manager keeps a deleted secret's name through its recovery window",
}
# Not held: an AWS::KMS::Alias that CloudFormation deletes is gone at once (DeleteAlias; a new alias
# may take the name: https://docs.aws.amazon.com/kms/latest/developerguide/alias-delete.html). A KMS
# key waits out its pending window, but it has no name; its aliases go with it only at the end of
# that window, so a kept alias is what would hold a name, and KEPT covers it.

# Kept under a name that is fixed and outside every environment's preflight, each with the words of
# the README that tell the user to delete it before deploying again, and how its name begins. CDK Pipelines names the
# cross-region support stack's replication bucket itself (the pipeline in another region must know
# it when it is synthesized) and keeps it (aws-cdk-lib's default for a bucket); a stack that
# creates it again fails on the kept one (awslabs/cdk-eks-blueprints#530).
DOCUMENTED = {
    ("AWS::S3::Bucket", "CrossRegionCodePipelineReplicationBucket"):
        ("`aws s3 rb s3://pipeline-support-<the rest of its name> --force --region <region>`", "pipeline-support-"),
}


@dataclass(frozen=True)
class Left:
    """A resource a destroy leaves behind under a fixed name."""
    path: str  # which deploy path built the template
    env: str | None  # the environment the stack belongs to; None for the pipeline's own stacks
    stack: str  # the CloudFormation stack name
    logical_id: str
    type_: str
    name: str
    why: str

    def __str__(self) -> str:
        return f"{self.stack}/{self.logical_id} ({self.type_} {self.name!r}: {self.why})"


def _environment_of(hierarchical_id: str) -> str | None:
    parts = hierarchical_id.split("/")
    if parts[0] == PIPELINE_STACK_ID:
        return parts[1] if len(parts) == 3 else None
    return parts[0] if len(parts) == 2 else None


def left_by_destroy(path: str, assembly: cdk.cx_api.CloudAssembly) -> list[Left]:
    """Every resource of every stack in `assembly` that a destroy leaves holding a fixed name."""
    found = []
    for stack in assembly.stacks_recursively:
        env = _environment_of(stack.hierarchical_id)
        for logical_id, resource in stack.template.get("Resources", {}).items():
            type_ = resource["Type"]
            kept = [p for p in (resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy")) if p in KEPT]
            if kept:
                why = f"kept by its {kept[0]} policy"
            elif type_ in HELD_AFTER_DELETE:
                why = HELD_AFTER_DELETE[type_]
            else:
                continue
            assert type_ in NAME_PROPERTIES, (
                f"{stack.stack_name}/{logical_id}: add {type_} to NAME_PROPERTIES (tests/stacks/test_teardown.py)")
            prop = NAME_PROPERTIES[type_]
            name = resource.get("Properties", {}).get(prop) if prop else None
            if name is not None and _fixed(name):
                found.append(Left(path, env, stack.stack_name, logical_id, type_, str(name), why))
    return found


def _by_hand(name: str):
    """app.py's stage of `name` as `make deploy` builds it with no pipeline configured."""
    return synth(name) if name in VARIANTS else synthesize(name, raw_environment(name))


@pytest.fixture(scope="module")
def pipeline_assembly() -> cdk.cx_api.CloudAssembly:
    """The app as cdk.json configures it: the pipeline (its stages, its cross-region support stacks)
    and app.py's stage of every environment the pipeline does not own."""
    import app as app_module
    from stacks.pipeline import PipelineStack

    environments = CONTEXT["environments"]
    settings = load_pipeline(CONTEXT["pipeline"], CONTEXT["promotion"], environments)
    flags = {k: v for k, v in CONTEXT.items() if k.startswith("@")}
    app = cdk.App(outdir=tempfile.mkdtemp(prefix="synth-redeploy-"), context=flags)
    for name in ENVIRONMENTS:
        if name not in CONTEXT["promotion"]:
            app_module.environment_stage(app, load_environment(environments, name), settings)
    PipelineStack(app, PIPELINE_STACK_ID, settings=settings)
    return app.synth()


@pytest.fixture(scope="module")
def left(pipeline_assembly) -> list[Left]:
    found = left_by_destroy("pipeline", pipeline_assembly)
    for name in ENVIRONMENTS:
        found += left_by_destroy("make deploy", _by_hand(name).assembly)
    return found


def _found_by_preflight(item: Left) -> bool:
    """ops/preflight.py's `leftover log groups` row: the log groups it looks for in the environment."""
    if item.env is None or item.type_ != "AWS::Logs::LogGroup":
        return False
    config = load_environment(CONTEXT["environments"], item.env)
    return item.name in config.cluster_log_group_names


def _documented(item: Left) -> tuple[str, str] | None:
    """The README's words for `item` and how its name begins, None when DOCUMENTED has none."""
    return next((entry for (type_, prefix), entry in DOCUMENTED.items()
                 if item.type_ == type_ and item.logical_id.startswith(prefix)), None)


def test_the_walk_sees_every_environment_by_both_paths_and_the_pipelines_own_stacks(left, pipeline_assembly):
    """What the test below relies on: it walked each environment's stacks by each path, and the
    pipeline's stacks in every account and region they deploy to."""
    walked = {(s.hierarchical_id.split("/")[0], _environment_of(s.hierarchical_id))
              for s in pipeline_assembly.stacks_recursively}
    assert {env for _, env in walked if env} == set(ENVIRONMENTS)
    assert (PIPELINE_STACK_ID, None) in walked and any(env is None and top != PIPELINE_STACK_ID for top, env in walked)
    # The cluster's log groups carry fixed names in every environment, by both paths.
    assert {(i.path, i.env) for i in left if i.env} == {(p, e) for p in ("pipeline", "make deploy")
                                                          for e in ENVIRONMENTS}


def test_a_name_a_destroy_leaves_taken_is_found_by_preflight_or_the_readme_says_to_delete_it(left):
    """Each such resource is a log group preflight's `leftover log groups` row looks for in its
    environment (it names each and the command that deletes it), or one DOCUMENTED says the README
    tells the user to delete."""
    unaccounted = [str(i) for i in left if not _found_by_preflight(i) and _documented(i) is None]
    assert unaccounted == []
    for item in left:
        entry = _documented(item)
        if entry is not None:
            text, name_start = entry
            assert text in README, f"{item}: the README does not say {text!r}"
            assert item.name.startswith(name_start), item


def test_a_fixed_name_both_paths_create_comes_from_the_same_stack_and_logical_id(left, pipeline_assembly):
    """An environment first deployed by one path and then by the other (without a destroy between,
    or with one) is the same set of stacks: a name one path creates, the other creates from the same
    resource, so the second deploy updates it instead of creating it again beside the first."""
    owners: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for name in ENVIRONMENTS:
        for assembly in (pipeline_assembly, _by_hand(name).assembly):
            for stack in assembly.stacks_recursively:
                if _environment_of(stack.hierarchical_id) != name:
                    continue
                for logical_id, resource in stack.template.get("Resources", {}).items():
                    prop = NAME_PROPERTIES.get(resource["Type"])
                    value = resource.get("Properties", {}).get(prop) if prop else None
                    if value is not None and _fixed(value):
                        owners.setdefault((resource["Type"], str(value)), set()).add((stack.stack_name, logical_id))
    assert owners and {k: v for k, v in owners.items() if len(v) > 1} == {}
