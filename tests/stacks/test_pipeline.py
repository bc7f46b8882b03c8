"""The promotion pipeline, read off its synthesized template: the stage order, the approval before
every environment after the first, a validation action per stage, and a synth step that tests."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match, Template

from config.pipeline import load_pipeline
from synth_helpers import CONTEXT, only, resources

PROMOTION = CONTEXT["promotion"]


@pytest.fixture(scope="module")
def built():
    from stacks.pipeline import PipelineStack

    settings = load_pipeline(CONTEXT["pipeline"], PROMOTION, CONTEXT["environments"])
    outdir = Path(tempfile.mkdtemp(prefix="synth-pipeline-"))
    flags = {k: v for k, v in CONTEXT.items() if k.startswith("@")}
    app = cdk.App(outdir=str(outdir), context=flags)
    stack = PipelineStack(app, "Pipeline", settings=settings)
    app.synth()
    return stack, Template.from_stack(stack), outdir


@pytest.fixture(scope="module")
def stages(built):
    _, template, _ = built
    pipeline = only(resources(template, "AWS::CodePipeline::Pipeline"))
    return {s["Name"]: s for s in pipeline["Properties"]["Stages"]}


def actions(stage: dict) -> list[dict]:
    return sorted(stage["Actions"], key=lambda a: a["RunOrder"])


def test_environments_deploy_in_promotion_order_after_build_and_assets(stages):
    names = list(stages)
    assert names[:2] == ["Source", "Build"]
    assert "Assets" in names and names.index("Assets") < names.index(PROMOTION[0])
    assert [n for n in names if n in PROMOTION] == PROMOTION


def test_manual_approval_comes_before_every_environment_after_the_first(stages):
    for i, name in enumerate(PROMOTION):
        ordered = actions(stages[name])
        approvals = [a for a in ordered if a["ActionTypeId"]["Category"] == "Approval"]
        deploys = [a for a in ordered if a["ActionTypeId"]["Provider"] == "CloudFormation"]
        assert deploys, f"{name} deploys nothing"
        if i == 0:
            assert approvals == [], "the first environment deploys without waiting"
        else:
            assert len(approvals) == 1
            assert approvals[0]["RunOrder"] < min(d["RunOrder"] for d in deploys)


def test_each_stage_ends_with_its_validation_step(stages):
    for name in PROMOTION:
        ordered = actions(stages[name])
        last = ordered[-1]
        assert last["Name"] == f"Validate-{name}"
        assert last["ActionTypeId"]["Provider"] == "CodeBuild"
        deploys = [a for a in ordered if a["ActionTypeId"]["Provider"] == "CloudFormation"]
        assert last["RunOrder"] > max(d["RunOrder"] for d in deploys)


def _buildspec(template: Template, project_logical_id: str) -> dict:
    project = template.to_json()["Resources"][project_logical_id]
    return json.loads(project["Properties"]["Source"]["BuildSpec"])


def _project_of(action: dict) -> str:
    return action["Configuration"]["ProjectName"]["Ref"]


def test_synth_step_installs_like_the_readme_runs_the_tests_then_synthesizes(built, stages):
    _, template, _ = built
    [synth] = stages["Build"]["Actions"]
    phases = _buildspec(template, _project_of(synth))["phases"]
    assert phases["install"]["commands"] == ["make install etcd"]
    commands = phases["build"]["commands"]
    assert commands.index("make test") < next(i for i, c in enumerate(commands) if " synth" in c)


def test_validation_runs_the_checks_with_the_validation_role_against_its_cluster(built, stages):
    _, template, _ = built
    for name in PROMOTION:
        env = CONTEXT["environments"][name]
        validate = actions(stages[name])[-1]
        spec = _buildspec(template, _project_of(validate))
        commands = spec["phases"]["build"]["commands"]
        assert any("sts assume-role" in c and "$VALIDATION_ROLE_ARN" in c for c in commands)
        assert f'aws eks update-kubeconfig --name "$CLUSTER_NAME" --region {env["region"]}' in commands
        assert commands[-1] == f"python3 -m ops.validate --dist dist/{name}"
        variables = json.loads(validate["Configuration"]["EnvironmentVariables"])
        assert {v["name"] for v in variables} >= {"CLUSTER_NAME", "VALIDATION_ROLE_ARN"}


def test_cross_account_promotion_encrypts_artifacts_with_a_rotated_key(built):
    _, template, _ = built
    key = only(resources(template, "AWS::KMS::Key"))
    assert key["Properties"]["EnableKeyRotation"] is True
    template.has_resource_properties("AWS::S3::Bucket", {"BucketEncryption": Match.object_like({
        "ServerSideEncryptionConfiguration": [Match.object_like({
            "ServerSideEncryptionByDefault": Match.object_like({"SSEAlgorithm": "aws:kms"})})]})})


def test_trainer_images_publish_on_a_docker_enabled_build(built, stages):
    _, template, _ = built
    docker_actions = [a for a in stages["Assets"]["Actions"] if a["Name"].startswith("TrainerImage-")]
    assert sorted(a["Name"] for a in docker_actions) == ["TrainerImage-cpu", "TrainerImage-gpu"]
    for action in docker_actions:
        project = template.to_json()["Resources"][_project_of(action)]
        assert project["Properties"]["Environment"]["PrivilegedMode"] is True


def test_each_environment_deploys_into_its_own_account_and_region(built):
    stack, _, _ = built
    for name in PROMOTION:
        stage = stack.stages[name]
        env = CONTEXT["environments"][name]
        assert (stage.account, stage.region) == (env["account"], env["region"])


def test_validation_role_trusts_only_the_runner_and_gets_no_cluster_admin(built):
    stack, _, _ = built
    for name in PROMOTION:
        access = Template.from_stack(stack.stages[name].node.find_child("ValidationAccess"))
        role = only(resources(access, "AWS::IAM::Role"))
        [statement] = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        runner = f":iam::{CONTEXT['pipeline']['account']}:role/{name}-cluster-validation-runner"
        assert runner in json.dumps(statement["Condition"]["ArnEquals"]["aws:PrincipalArn"])
        entry = only(resources(access, "AWS::EKS::AccessEntry"))
        policies = {json.dumps(p["PolicyArn"]).rsplit("/", 1)[-1].strip('"]}'): p["AccessScope"]
                    for p in entry["Properties"]["AccessPolicies"]}
        assert policies == {
            "AmazonEKSEditPolicy": {"Type": "namespace", "Namespaces": ["training"]},
            "AmazonEKSAdminViewPolicy": {"Type": "cluster"},
        }


def test_pipeline_has_no_unacknowledged_cdk_nag_findings(built):
    _, _, outdir = built
    reports = json.loads((outdir / "validation-report.json").read_text())["pluginReports"]
    for report in reports:
        assert report["conclusion"] == "success", [v["ruleName"] for v in report["violations"]][:10]


def test_pipeline_templates_pass_cfn_lint_and_stay_small(built):
    _, _, outdir = built
    import subprocess
    import sys

    files = sorted(str(p) for p in outdir.glob("*.template.json"))  # the pipeline and its cross-region support
    assert len(files) >= 2
    for path in files:
        assert Path(path).stat().st_size < 800_000, path
    lint = Path(sys.executable).parent / "cfn-lint"
    result = subprocess.run([str(lint), "--format", "json", *files], capture_output=True, text=True, timeout=300)
    findings = json.loads(result.stdout)
    assert [f"{f['Rule']['Id']} {f['Message']}" for f in findings if f["Level"] == "Error"] == []
