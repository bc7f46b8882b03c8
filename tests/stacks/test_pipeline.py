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


def test_every_codebuild_project_of_the_pipeline_runs_python_3_11_by_name(built):
    """CodeBuild runs the image's default runtime unless the buildspec names one, and the default
    "can change when a previously default version reaches end of life" (CodeBuild User Guide,
    "Available runtimes", https://docs.aws.amazon.com/codebuild/latest/userguide/available-runtimes.html).
    The Synth step's `make install` calls python3.11 by name, and the preflight step's pinned
    packages are resolved for it. Ubuntu standard:7.0 offers `python: 3.11` (and makes it the
    default today): aws/aws-codebuild-docker-images at 1590e487, ubuntu/standard/7.0/runtimes.yml
    and Dockerfile:396,586."""
    from stacks.validation import BUILD_IMAGE

    _, template, _ = built
    assert BUILD_IMAGE.image_id == "aws/codebuild/standard:7.0"
    projects = resources(template, "AWS::CodeBuild::Project")
    assert len(projects) >= 2 + 2 * len(PROMOTION)  # synth, self-mutation, a preflight and a validation each
    for logical_id, project in projects.items():
        spec = json.loads(project["Properties"]["Source"]["BuildSpec"])
        assert spec["phases"]["install"]["runtime-versions"] == {"python": "3.11"}, logical_id


def _requirement(name: str) -> str:
    for line in (Path(__file__).resolve().parents[2] / "requirements.txt").read_text().splitlines():
        if line.startswith(f"{name}=="):
            return line
    raise AssertionError(f"{name} is not pinned in requirements.txt")


def test_validation_step_only_starts_and_awaits_its_stages_runner(built, stages):
    """The step runs in the pipeline account, outside any VPC: it must not talk to the cluster
    (prod's endpoint is private; dev's public one admits one CIDR). It starts the stage's runner
    and waits for it; a failed runner build is a non-zero exit, which fails the stage."""
    _, template, _ = built
    for name in PROMOTION:
        env = CONTEXT["environments"][name]
        validate = actions(stages[name])[-1]
        project = template.to_json()["Resources"][_project_of(validate)]["Properties"]
        spec = _buildspec(template, _project_of(validate))
        assert spec["phases"]["install"]["commands"] == [f"python3 -m pip install --quiet {_requirement('boto3')}"]
        assert spec["phases"]["build"]["commands"] == [
            f'python3 -m ops.remote_validation --project "$RUNNER_PROJECT" --role-arn "$STARTER_ROLE_ARN" '
            f'--region {env["region"]}']
        assert "kubectl" not in json.dumps(spec) and "VpcConfig" not in project
        variables = {v["name"]: v["value"] for v in json.loads(validate["Configuration"]["EnvironmentVariables"])}
        assert set(variables) >= {"RUNNER_PROJECT", "STARTER_ROLE_ARN"}


def _policy_statements(template: Template, role_logical_id: str) -> list[dict]:
    return [s for p in resources(template, "AWS::IAM::Policy").values()
            if {"Ref": role_logical_id} in p["Properties"]["Roles"]
            for s in p["Properties"]["PolicyDocument"]["Statement"]]


def _role_named(template: Template, role_name: str) -> str:
    [logical] = [k for k, r in resources(template, "AWS::IAM::Role").items()
                 if r["Properties"].get("RoleName") == role_name]
    return logical


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def test_validation_step_role_may_reach_nothing_but_its_stages_starter_role(built):
    """Beyond what CDK Pipelines grants every CodeBuild step (its logs, test reports and the
    pipeline's artifacts), the step's role may only assume the stage's starter role."""
    _, template, _ = built
    housekeeping = ("logs:", "codebuild:CreateReport", "codebuild:UpdateReport", "codebuild:BatchPutTestCases",
                    "codebuild:BatchPutCodeCoverages", "s3:", "kms:")
    for name in PROMOTION:
        env = CONTEXT["environments"][name]
        role = _role_named(template, f"{name}-cluster-validation-trigger")
        reach = [s for s in _policy_statements(template, role)
                 if not all(a.startswith(housekeeping) for a in _as_list(s["Action"]))]
        assert len(reach) == 1 and reach[0]["Action"] == "sts:AssumeRole", reach
        assert reach[0]["Resource"] == {"Fn::Join": ["", [
            "arn:", {"Ref": "AWS::Partition"}, f':iam::{env["account"]}:role/{name}-cluster-validation-starter']]}


def test_starter_role_may_only_start_and_read_builds_of_the_runner_and_trusts_only_the_step(built):
    stack, _, _ = built
    pipeline_account = CONTEXT["pipeline"]["account"]
    for name in PROMOTION:
        validation = Template.from_stack(stack.stages[name].validation)
        role = _role_named(validation, f"{name}-cluster-validation-starter")
        [trust] = resources(validation, "AWS::IAM::Role")[role]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        trigger = f":iam::{pipeline_account}:role/{name}-cluster-validation-trigger"
        assert trigger in json.dumps(trust["Condition"]["ArnEquals"]["aws:PrincipalArn"])
        [statement] = _policy_statements(validation, role)
        [project_id] = resources(validation, "AWS::CodeBuild::Project")
        assert sorted(_as_list(statement["Action"])) == ["codebuild:BatchGetBuilds", "codebuild:StartBuild"]
        assert statement["Resource"] == {"Fn::GetAtt": [project_id, "Arn"]}


def test_every_stage_has_its_runner_in_its_own_vpc(built):
    stack, _, _ = built
    for name in PROMOTION:
        stage = stack.stages[name]
        project = only(resources(Template.from_stack(stage.validation), "AWS::CodeBuild::Project"))
        vpc_export = project["Properties"]["VpcConfig"]["VpcId"]["Fn::ImportValue"]
        assert vpc_export.startswith(f"{stage.network.stack_name}:"), vpc_export
        assert stage.network.get_logical_id(stage.network.vpc.node.default_child) in vpc_export


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


def test_pipeline_has_no_unacknowledged_cdk_nag_findings(built):
    _, _, outdir = built
    reports = json.loads((outdir / "validation-report.json").read_text())["pluginReports"]
    for report in reports:
        assert report["conclusion"] == "success", [v["ruleName"] for v in report["violations"]][:10]
    # cdk-nag runs on the pipeline, its stages and its cross-region support stack (a plugin on a
    # stage nested in the pipeline is never reported, so it is registered on the pipeline stack).
    [nag] = [r for r in reports if r["pluginName"] == "AwsSolutions"]
    checked = {c["constructPath"].split("/")[0] + "/" + c["constructPath"].split("/")[1]
               for f in nag["suppressedViolations"] for c in f["violatingConstructs"]}
    assert {"Pipeline/Pipeline", *(f"Pipeline/{name}" for name in PROMOTION)} <= checked
    # Resource "*" on the pipeline's own policies is acknowledged only with the reviewed action sets.
    star = [f for f in nag["suppressedViolations"] if f["ruleName"] == "AwsSolutions-IAM5[Resource::*]"
            and f["acknowledgedAt"].startswith("Pipeline/Pipeline/")]
    assert len(star) == 4 and all('(on "*": ' in f["reason"] for f in star)


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


# ---- the pre-deploy preflight step ----------------------------------------------------------------

BOOTSTRAP_TEMPLATE = Path(__file__).resolve().parents[2] / "node_modules/aws-cdk/lib/api/bootstrap/bootstrap-template.yaml"


def test_each_stage_runs_its_preflight_after_its_approval_and_before_any_deploy_action(stages):
    from stacks.pipeline import preflight_step_id

    for i, name in enumerate(PROMOTION):
        ordered = actions(stages[name])
        [preflight] = [a for a in ordered if a["Name"] == preflight_step_id(name)]
        assert preflight["ActionTypeId"]["Provider"] == "CodeBuild"
        deploys = [a for a in ordered if a["ActionTypeId"]["Provider"] == "CloudFormation"]
        assert preflight["RunOrder"] < min(d["RunOrder"] for d in deploys)
        approvals = [a for a in ordered if a["ActionTypeId"]["Category"] == "Approval"]
        assert all(a["RunOrder"] < preflight["RunOrder"] for a in approvals) and len(approvals) == (1 if i else 0)


def test_preflight_step_installs_only_its_pins_and_runs_the_environments_pipeline_preflight(built, stages):
    from stacks.pipeline import PREFLIGHT_PACKAGES, preflight_step_id

    _, template, _ = built
    for name in PROMOTION:
        [preflight] = [a for a in stages[name]["Actions"] if a["Name"] == preflight_step_id(name)]
        spec = _buildspec(template, _project_of(preflight))
        [install] = spec["phases"]["install"]["commands"]
        assert install.startswith("python3 -m pip install --quiet --no-deps ")
        assert install.split()[6:] == [_requirement(p) for p in PREFLIGHT_PACKAGES]
        assert spec["phases"]["build"]["commands"] == [
            f'python3 -m ops preflight --env {name} --pipeline --assume-role "$LOOKUP_ROLE_ARN"']
        project = template.to_json()["Resources"][_project_of(preflight)]["Properties"]
        variables = {v["Name"]: v["Value"] for v in project["Environment"]["EnvironmentVariables"]}
        assert variables["LOOKUP_ROLE_ARN"] == _lookup_role_arn(name)
        assert "VpcConfig" not in project


def _lookup_role_arn(env_name: str) -> dict:
    env = CONTEXT["environments"][env_name]
    return {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"},
                              f':iam::{env["account"]}:role/cdk-hnb659fds-lookup-role-{env["account"]}-{env["region"]}']]}


def test_preflight_step_role_may_reach_nothing_but_the_environments_lookup_role(built, stages):
    from stacks.pipeline import preflight_step_id

    _, template, _ = built
    housekeeping = ("logs:", "codebuild:CreateReport", "codebuild:UpdateReport", "codebuild:BatchPutTestCases",
                    "codebuild:BatchPutCodeCoverages", "s3:", "kms:")
    for name in PROMOTION:
        [preflight] = [a for a in stages[name]["Actions"] if a["Name"] == preflight_step_id(name)]
        project = template.to_json()["Resources"][_project_of(preflight)]["Properties"]
        role = project["ServiceRole"]["Fn::GetAtt"][0]
        reach = [s for s in _policy_statements(template, role)
                 if not all(a.startswith(housekeeping) for a in _as_list(s["Action"]))]
        assert len(reach) == 1 and reach[0]["Action"] == "sts:AssumeRole", reach
        assert reach[0]["Resource"] == _lookup_role_arn(name)


def test_the_lookup_role_is_the_read_only_role_the_projects_cdk_bootstrap_creates():
    """The CLI's own bootstrap template (the aws-cdk package the project installs) creates, in every
    account bootstrapped with `--trust PIPELINE`, the role the preflight step assumes: named by the
    qualifier we synthesize with, trusted by TrustedAccounts, ReadOnlyAccess, no kms:Decrypt."""
    import yaml

    from config.pipeline import BOOTSTRAP_QUALIFIER, lookup_role_name

    assert BOOTSTRAP_TEMPLATE.is_file(), f"{BOOTSTRAP_TEMPLATE} is missing: run `make install` (npm installs aws-cdk)"
    template = yaml.safe_load(BOOTSTRAP_TEMPLATE.read_text())
    assert template["Parameters"]["Qualifier"]["Default"] == BOOTSTRAP_QUALIFIER
    role = template["Resources"]["LookupRole"]["Properties"]
    pattern = role["RoleName"]["Fn::Sub"]
    assert pattern == "cdk-${Qualifier}-lookup-role-${AWS::AccountId}-${AWS::Region}"
    assert lookup_role_name("111111111111", "us-east-1") == pattern.replace("${Qualifier}", BOOTSTRAP_QUALIFIER).replace(
        "${AWS::AccountId}", "111111111111").replace("${AWS::Region}", "us-east-1")
    trusted = [s["Fn::If"][1] for s in role["AssumeRolePolicyDocument"]["Statement"]
               if isinstance(s, dict) and "Fn::If" in s and s["Fn::If"][0] == "HasTrustedAccounts"]
    assert {"Action": ["sts:AssumeRole"], "Effect": "Allow", "Principal": {"AWS": {"Ref": "TrustedAccounts"}}}.items() \
        <= next(s for s in trusted if "sts:AssumeRole" in s["Action"]).items()
    assert role["ManagedPolicyArns"] == [{"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/ReadOnlyAccess"}]
    [policy] = role["Policies"]
    assert {"Effect": "Deny", "Action": ["kms:Decrypt"], "Resource": "*"}.items() <= policy["PolicyDocument"][
        "Statement"][0].items()


def test_the_pipeline_deploys_through_bootstrap_roles_of_the_same_qualifier(stages):
    """The lookup role's name and the deploy roles the stage's actions use come from one qualifier:
    an app that set another (`@aws-cdk/core:bootstrapQualifier`) would fail here."""
    from config.pipeline import BOOTSTRAP_QUALIFIER

    for name in PROMOTION:
        env = CONTEXT["environments"][name]
        deploys = [a for a in stages[name]["Actions"] if a["ActionTypeId"]["Provider"] == "CloudFormation"]
        for action in deploys:
            role = json.dumps(action["RoleArn"])
            assert f"cdk-{BOOTSTRAP_QUALIFIER}-deploy-role-{env['account']}-{env['region']}" in role, role


def test_preflight_step_installs_boto3_and_jsonschema_with_what_they_need_and_nothing_else():
    """The step installs with --no-deps, so its list must hold every distribution the two need
    (markers read for this Python, the image's); tests/ops/test_ops_preflight_pipeline.py shows the
    command imports nothing else."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    from stacks.pipeline import PREFLIGHT_PACKAGES

    needed, todo = set(), ["boto3", "jsonschema"]
    while todo:
        name = canonicalize_name(todo.pop())
        if name not in needed:
            needed.add(name)
            todo += [r.name for r in map(Requirement, metadata.requires(name) or [])
                     if r.marker is None or r.marker.evaluate({"extra": ""})]
    assert {canonicalize_name(p) for p in PREFLIGHT_PACKAGES} == needed
