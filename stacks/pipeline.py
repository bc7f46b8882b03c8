"""PipelineStack: the same TrainingClusterStage promoted through environments by CDK Pipelines.

Source (a CodeConnections connection) -> Synth (the README's install, `make test`, `cdk synth`)
-> self-mutation -> asset publishing (the trainer images, docker-enabled) -> one stage per
environment in `promotion` order, each into its own account and region, a manual approval
before every environment after the first, a pre-deploy preflight step and a post-deploy
validation step per stage.

The preflight step runs `python -m ops preflight --pipeline` before CloudFormation touches the
environment: the edits it cannot take (a smaller or replaced file system, a Kubernetes downgrade or
skip, another vpcCidr, log groups left by an earlier cluster) and the account's capacity fail the
stage there. It reads the account as the CDK bootstrap's lookup role, which `cdk bootstrap --trust
PIPELINE` creates in every environment account with ReadOnlyAccess (config/pipeline.py); its own
role may assume that role and nothing else.

The validation step cannot run the checks itself: it runs here, outside every environment's VPC,
and prod's API endpoint is private. Each stage carries its own runner inside its VPC
(stacks/validation.py); the step assumes that stage's starter role, which may only start the
runner and read its builds, starts one build and waits for it (`python -m ops.remote_validation`).
A failed check fails the runner's build, the step and so the stage.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_iam as iam
from aws_cdk import pipelines
from constructs import Construct

from config.environment import Environment
from config.pipeline import PipelineSettings, lookup_role_name
from stacks.pipeline_nag import apply_pipeline_nag
from stacks.stage import TrainingClusterStage
from stacks.validation import (
    BUILD_IMAGE, PYTHON_RUNTIME, RUNNER_TIMEOUT, pinned_requirement, validation_starter_role_name,
    validation_trigger_role_name,
)

CDK = "node_modules/.bin/cdk"
# The step outlives its runner by the time a build may wait in CodeBuild's queue.
VALIDATION_STEP_TIMEOUT = RUNNER_TIMEOUT.plus(cdk.Duration.minutes(30))
PREFLIGHT_STEP_TIMEOUT = cdk.Duration.minutes(15)
# What `python -m ops preflight --pipeline` imports beyond the standard library and this repository
# (boto3, jsonschema) and everything those need on Python 3.11, installed with --no-deps so that the
# step runs exactly these pins: tests/ops/test_ops_preflight_pipeline.py runs the step's command with
# nothing else importable.
PREFLIGHT_PACKAGES = ("boto3", "botocore", "jmespath", "s3transfer", "python-dateutil", "six", "urllib3",
                      "jsonschema", "attrs", "jsonschema-specifications", "referencing", "rpds-py",
                      "typing_extensions")
LOOKUP_ROLE_VARIABLE = "LOOKUP_ROLE_ARN"


def approval_step_id(env_name: str) -> str:
    return f"Approve-{env_name}"


def validation_step_id(env_name: str) -> str:
    return f"Validate-{env_name}"


def preflight_step_id(env_name: str) -> str:
    return f"Preflight-{env_name}"


def preflight_install_command() -> str:
    return "python3 -m pip install --quiet --no-deps " + " ".join(pinned_requirement(p) for p in PREFLIGHT_PACKAGES)


def preflight_command(env_name: str) -> str:
    return f'python3 -m ops preflight --env {env_name} --pipeline --assume-role "${LOOKUP_ROLE_VARIABLE}"'


def _as_sub(parts: list) -> str:
    """Fn::Join parts (strings and Refs) as one Fn::Sub template."""
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(part.replace("${", "${!"))
        elif isinstance(part, dict) and set(part) == {"Ref"}:
            out.append("${" + part["Ref"] + "}")
        else:
            raise ValueError(f"cannot express {part!r} in Fn::Sub")
    return "".join(out)


class PipelineStack(cdk.Stack):
    """Attributes: `pipeline` (pipelines.CodePipeline), `stages` (env name -> TrainingClusterStage),
    `synth` (the ShellStep whose commands run the tests)."""

    def __init__(self, scope: Construct, id: str, *, settings: PipelineSettings, **kwargs) -> None:
        kwargs.setdefault("env", cdk.Environment(account=settings.account, region=settings.region))
        super().__init__(scope, id, **kwargs)
        source = pipelines.CodePipelineSource.connection(
            settings.repository, settings.branch, connection_arn=settings.connection_arn)
        self.synth = pipelines.ShellStep(
            "Synth", input=source,
            # The README's commands, so the pipeline installs exactly what a developer does.
            install_commands=["make install etcd"],
            commands=["make test", f"{CDK} synth --no-notices --quiet"],
            primary_output_directory="cdk.out",
        )
        self.pipeline = pipelines.CodePipeline(
            self, "Pipeline",
            synth=self.synth,
            pipeline_type=cdk.aws_codepipeline.PipelineType.V2,
            cross_account_keys=settings.cross_account,
            enable_key_rotation=settings.cross_account,
            # The trainer images are Docker assets: publishing them needs a Docker daemon.
            docker_enabled_for_self_mutation=True,
            code_build_defaults=pipelines.CodeBuildOptions(
                build_environment=codebuild.BuildEnvironment(build_image=BUILD_IMAGE,
                                                             compute_type=codebuild.ComputeType.LARGE),
                # Every step's Python by version, not the image's changing default (stacks/validation.py).
                partial_build_spec=codebuild.BuildSpec.from_object({"phases": {"install": PYTHON_RUNTIME}})),
        )
        self.stages: dict[str, TrainingClusterStage] = {}
        for i, env in enumerate(settings.stages):
            stage = TrainingClusterStage(self, env.name, config=env, pipeline_account=settings.account)
            preflight = self._preflight_step(env, source)
            pre = [preflight]
            if i:
                approval = pipelines.ManualApprovalStep(
                    approval_step_id(env.name), comment=f"Promote to {env.name} ({env.account}, {env.region})?")
                # Steps in `pre` run side by side unless ordered: the check runs on what is deployed
                # when the promotion is approved, not when the approval was first asked for.
                preflight.add_step_dependency(approval)
                pre = [approval, preflight]
            post = [self._validation_step(env, stage, source)]
            self.pipeline.add_stage(stage, pre=pre, post=post)
            self.stages[env.name] = stage
        # Build now, not at synthesis, so the generated roles exist to be reviewed by cdk-nag.
        self.pipeline.build_pipeline()
        support = self.pipeline.pipeline.cross_region_support
        apply_pipeline_nag(self, [s.stack for s in support.values()])
        self._role_arns_as_sub()

    def _role_arns_as_sub(self) -> None:
        """CDK Pipelines writes cross-account deploy role ARNs as Fn::Join with an empty delimiter,
        which cfn-lint reports as an error (E3703); the same value as Fn::Sub passes."""
        cfn = self.pipeline.pipeline.node.default_child
        for i, stage in enumerate(self.resolve(cfn.stages)):
            # The L1 property resolves with its own (camelCase) keys; Configuration is free-form.
            for j, action in enumerate(stage["actions"]):
                role = (action.get("configuration") or {}).get("RoleArn")
                if isinstance(role, dict) and "Fn::Join" in role and role["Fn::Join"][0] == "":
                    cfn.add_property_override(f"Stages.{i}.Actions.{j}.Configuration.RoleArn",
                                              {"Fn::Sub": _as_sub(role["Fn::Join"][1])})

    def _validation_step(self, env: Environment, stage: TrainingClusterStage,
                         source: pipelines.IFileSetProducer) -> pipelines.CodeBuildStep:
        trigger = iam.Role(
            self, f"ValidationTrigger-{env.name}",
            role_name=validation_trigger_role_name(env.name),
            assumed_by=iam.ServicePrincipal("codebuild.amazonaws.com"),
            description=f"Starts {env.name}'s validation runner and waits for it",
        )
        trigger.add_to_policy(iam.PolicyStatement(
            actions=["sts:AssumeRole"],
            resources=[f"arn:{cdk.Aws.PARTITION}:iam::{env.account}:role/{validation_starter_role_name(env.name)}"],
        ))
        return pipelines.CodeBuildStep(
            validation_step_id(env.name),
            input=source,
            role=trigger,
            env_from_cfn_outputs={
                "RUNNER_PROJECT": stage.validation.runner_project_output,
                "STARTER_ROLE_ARN": stage.validation.starter_role_arn_output,
            },
            install_commands=[f"python3 -m pip install --quiet {pinned_requirement('boto3')}"],
            commands=[f'python3 -m ops.remote_validation --project "$RUNNER_PROJECT" --role-arn "$STARTER_ROLE_ARN" '
                      f'--region {env.region}'],
            timeout=VALIDATION_STEP_TIMEOUT,
        )

    def _preflight_step(self, env: Environment, source: pipelines.IFileSetProducer) -> pipelines.CodeBuildStep:
        lookup_role = f"arn:{cdk.Aws.PARTITION}:iam::{env.account}:role/{lookup_role_name(env.account, env.region)}"
        role = iam.Role(
            self, f"PreflightRole-{env.name}",
            assumed_by=iam.ServicePrincipal("codebuild.amazonaws.com"),
            description=f"Reads {env.name}'s account as its CDK bootstrap lookup role before the deploy",
        )
        role.add_to_policy(iam.PolicyStatement(actions=["sts:AssumeRole"], resources=[lookup_role]))
        return pipelines.CodeBuildStep(
            preflight_step_id(env.name),
            input=source,
            role=role,
            env={LOOKUP_ROLE_VARIABLE: lookup_role},
            install_commands=[preflight_install_command()],
            # A fail row is exit 1, which fails the step and so the stage before its deploy actions.
            commands=[preflight_command(env.name)],
            build_environment=codebuild.BuildEnvironment(build_image=BUILD_IMAGE,
                                                         compute_type=codebuild.ComputeType.SMALL),
            timeout=PREFLIGHT_STEP_TIMEOUT,
        )
