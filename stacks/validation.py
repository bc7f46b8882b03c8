"""Validation: the runner that checks a deployed environment from inside its own VPC.

The GPU checks and NCCL tests (`python -m ops validate`, objects from k8s/pods/validation.py) talk to
the Kubernetes API, which a pipeline in another account cannot reach: prod's endpoint is private,
dev's public one admits a few CIDRs. So each environment has its own runner, a CodeBuild project
in its private subnets. The cluster security group admits it on 443 (Amazon EKS User Guide, "View
Amazon EKS security group requirements for clusters"), and an access entry maps its role to the
Kubernetes group VALIDATION_RUNNER_GROUP with no EKS access policy ("Create an access entry using
Kubernetes groups"): k8s/addons/runner_rbac.py binds to that group exactly the requests `ops
validate` makes (list nodes; create, delete and read the check Jobs, the NCCL MPIJobs and the smoke
run, a PyTorchJob or under trainingApi v2 a TrainingRuntime and TrainJob, in the training namespace;
list their pods and read their logs), and no Secret.

Its source is an asset: the ops package, the config package it imports, and this environment's
validation objects (k8s/pods/validation.py), whose `${NAME}` placeholders `ops validate` fills from the
runner's environment variables (`runner_environment`). A failed check fails its build. Anyone
with codebuild:StartBuild on the project can run it (output RunnerProjectName); under the pipeline,
a starter role that only the pipeline's validation step may assume can start it and read its
builds, and nothing else.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Mapping

import aws_cdk as cdk
import yaml
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from cdk_constructs.log_groups import EncryptedLogs
from config import Environment
from config.eks_versions import kubectl_for
from config.kubernetes import VALIDATION_RUNNER_GROUP
from config.outputs import RUNNER_PROJECT_OUTPUT, STARTER_ROLE_ARN_OUTPUT
from stacks.removal import apply_removal_policy

REPO_ROOT = Path(__file__).resolve().parent.parent
# What `python -m ops validate` imports, relative to the repository root: the ops package (its
# parser imports only the standard library, PyYAML and config) and config.
RUNNER_SOURCES = ("ops", "config")
VALIDATION_DIR = "validation"
VALIDATION_FILE = "cluster-validation.yaml"
CHECK_TIMEOUT_S = 1800
# GPU checks and NCCL tests run one after another, each bounded by CHECK_TIMEOUT_S.
RUNNER_TIMEOUT = cdk.Duration.hours(3)
BUILD_IMAGE = codebuild.LinuxBuildImage.STANDARD_7_0
# The Python every CodeBuild project of ours runs: the image's default can change when a version
# reaches its end of life (CodeBuild User Guide, "Available runtimes"), and `make install` calls
# python3.11 by name. Ubuntu standard:7.0 offers it (aws/aws-codebuild-docker-images
# ubuntu/standard/7.0/runtimes.yml; tests/stacks/test_pipeline.py says where).
PYTHON_RUNTIME = {"runtime-versions": {"python": "3.11"}}


def pinned_requirement(name: str) -> str:
    """`name==version` as requirements.txt pins it, so CodeBuild installs what the tests ran with."""
    for line in (REPO_ROOT / "requirements.txt").read_text().splitlines():
        if line.split("==")[0].strip().lower() == name.lower():
            return line.strip()
    raise LookupError(f"{name} is not pinned in requirements.txt")


def validation_trigger_role_name(env_name: str) -> str:
    """The pipeline-account role of the step that starts `env_name`'s runner; named so the
    environment's account can trust exactly that role."""
    return f"{env_name}-cluster-validation-trigger"


def validation_starter_role_name(env_name: str) -> str:
    """The environment-account role that may start the runner; named so the trigger's policy names it."""
    return f"{env_name}-cluster-validation-starter"


def runner_buildspec(config: Environment) -> dict:
    kubectl_version, kubectl_sha256 = kubectl_for(config.kubernetes_version)
    return {
        "version": "0.2",
        "phases": {
            "install": {**PYTHON_RUNTIME, "commands": [
                f"curl -fsSLo /usr/local/bin/kubectl https://dl.k8s.io/release/{kubectl_version}/bin/linux/amd64/kubectl",
                f'echo "{kubectl_sha256}  /usr/local/bin/kubectl" | sha256sum --check',
                "chmod +x /usr/local/bin/kubectl",
                f"python3 -m pip install --quiet {pinned_requirement('PyYAML')}",
            ]},
            "build": {"commands": [
                f'aws eks update-kubeconfig --name "$CLUSTER_NAME" --region {config.region}',
                # A non-zero exit here fails the build, and with it the pipeline's validation step.
                f"python3 -m ops validate --dist {VALIDATION_DIR}/{config.name} --timeout {CHECK_TIMEOUT_S}",
            ]},
        },
    }


class ValidationStack(cdk.Stack):
    """Attributes: `runner` (codebuild.Project), `runner_role`, `runner_access` (its access entry),
    `runner_security_group`, `runner_source` (the S3 asset), `runner_project_output`; with a
    pipeline account, `starter_role` and `starter_role_arn_output` (else None)."""

    def __init__(self, scope: Construct, id: str, *, config: Environment, vpc: ec2.IVpc, cluster: eks.ICluster,
                 validation_objects: list[dict], runner_environment: Mapping[str, str] | None = None,
                 pipeline_account: str | None = None, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        self.config = config
        self.logs = EncryptedLogs(self, "Logs", retain=config.retain,
                                  description=f"{config.name}: validation runner logs and build artifacts")

        self.runner_role = iam.Role(
            self, "RunnerRole", assumed_by=iam.ServicePrincipal("codebuild.amazonaws.com"),
            description=f"{config.name}: runs the post-deploy GPU and NCCL validation inside the VPC",
        )
        # update-kubeconfig reads the endpoint and CA with this role's credentials.
        self.runner_role.add_to_policy(iam.PolicyStatement(actions=["eks:DescribeCluster"],
                                                           resources=[cluster.cluster_arn]))
        # No access policy: AmazonEKSEditPolicy reads every Secret of its namespaces, and none covers
        # kubeflow.org, so the NCCL MPIJob's create was refused. The group gets RBAC instead.
        # KubernetesGroups is not on the L2 construct; set in place, the entry keeps its logical id
        # and CloudFormation updates it rather than creating a second entry for the same principal.
        self.runner_access = eks.AccessEntry(self, "RunnerAccess", cluster=cluster,
                                             principal=self.runner_role.role_arn, access_policies=[])
        entry: eks.CfnAccessEntry = self.runner_access.node.default_child
        entry.kubernetes_groups = [VALIDATION_RUNNER_GROUP]

        self.runner_security_group = ec2.SecurityGroup(
            self, "RunnerSecurityGroup", vpc=vpc, allow_all_outbound=False,
            description="Validation runner: HTTPS out only (cluster API, AWS APIs, kubectl and PyPI downloads)",
        )
        self.runner_security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS")
        ec2.CfnSecurityGroupIngress(
            self, "ApiFromRunner", group_id=cluster.cluster_security_group_id, ip_protocol="tcp",
            from_port=443, to_port=443, source_security_group_id=self.runner_security_group.security_group_id,
            description="Kubernetes API from the validation runner",
        )

        self.runner_source = self._stage_source(validation_objects)
        self.runner = codebuild.Project(
            self, "Runner",
            description=f"{config.name}: GPU checks and NCCL tests against the cluster (python -m ops validate)",
            role=self.runner_role,
            vpc=vpc, subnet_selection=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            security_groups=[self.runner_security_group],
            source=codebuild.Source.s3(bucket=self.runner_source.bucket, path=self.runner_source.s3_object_key),
            build_spec=codebuild.BuildSpec.from_object(runner_buildspec(config)),
            environment=codebuild.BuildEnvironment(
                build_image=BUILD_IMAGE, compute_type=codebuild.ComputeType.SMALL,
                environment_variables={
                    "CLUSTER_NAME": codebuild.BuildEnvironmentVariable(value=config.cluster_name),
                    **{name: codebuild.BuildEnvironmentVariable(value=value)
                       for name, value in (runner_environment or {}).items()}},
            ),
            encryption_key=self.logs.key,
            logging=codebuild.LoggingOptions(cloud_watch=codebuild.CloudWatchLoggingOptions(
                log_group=self.logs.group("RunnerLogs"))),
            timeout=RUNNER_TIMEOUT,
            # The checks delete and recreate the same Jobs: two runs at once would fight.
            concurrent_build_limit=1,
        )

        self._scope_runner_network_interfaces(vpc)

        self.starter_role = None
        self.starter_role_arn_output = None
        if pipeline_account is not None:
            self._add_starter_role(pipeline_account)

        apply_removal_policy(self, config)
        self.runner_project_output = cdk.CfnOutput(
            self, RUNNER_PROJECT_OUTPUT, value=self.runner.project_name,
            description="Validation runner: aws codebuild start-build --project-name <this>")

    def _scope_runner_network_interfaces(self, vpc: ec2.IVpc) -> None:
        """aws-cdk-lib gives a CodeBuild project in a VPC ec2:CreateNetworkInterface and
        DeleteNetworkInterface on every resource, as CodeBuild's guide does ("Allow Amazon VPC
        access in your CodeBuild projects"). Both take resource ARNs ("Actions, resources, and
        condition keys for Amazon EC2"): the runner may create interfaces only in its own subnets
        with its own security group, and delete only interfaces in this VPC. The Describe calls have
        no resource-level permissions and stay on "*"."""
        arn = lambda resource, name: self.format_arn(service="ec2", resource=resource, resource_name=name)  # noqa: E731
        subnets = vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS).subnet_ids
        policy = self.runner.node.find_child("PolicyDocument").node.default_child
        policy.policy_document = {"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Resource": "*",
             "Action": ["ec2:DescribeDhcpOptions", "ec2:DescribeNetworkInterfaces", "ec2:DescribeSecurityGroups",
                        "ec2:DescribeSubnets", "ec2:DescribeVpcs"]},
            {"Effect": "Allow", "Action": "ec2:CreateNetworkInterface",
             "Resource": [arn("network-interface", "*"), *(arn("subnet", s) for s in subnets),
                          arn("security-group", self.runner_security_group.security_group_id)]},
            {"Effect": "Allow", "Action": "ec2:DeleteNetworkInterface", "Resource": arn("network-interface", "*"),
             "Condition": {"ArnEquals": {"ec2:Vpc": arn("vpc", vpc.vpc_id)}}},
        ]}

    def _stage_source(self, validation_objects: list[dict]) -> s3_assets.Asset:
        """The runner's source as an asset. Asset staging copies the directory into the cloud
        assembly when the Asset is constructed, so the temporary directory may go right after."""
        with tempfile.TemporaryDirectory(prefix="validation-runner-") as tmp:
            root = Path(tmp)
            for relative in RUNNER_SOURCES:
                source, target = REPO_ROOT / relative, root / relative
                if source.is_dir():
                    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(source, target)
            objects = root / VALIDATION_DIR / self.config.name
            objects.mkdir(parents=True)
            (objects / VALIDATION_FILE).write_text(yaml.safe_dump_all(validation_objects, sort_keys=False))
            return s3_assets.Asset(self, "RunnerSource", path=str(root))

    def _add_starter_role(self, pipeline_account: str) -> None:
        trigger = (f"arn:{cdk.Aws.PARTITION}:iam::{pipeline_account}:role/"
                   f"{validation_trigger_role_name(self.config.name)}")
        self.starter_role = iam.Role(
            self, "StarterRole",
            role_name=validation_starter_role_name(self.config.name),
            description=f"{self.config.name}: lets the pipeline's validation step start the runner and read its builds",
            assumed_by=iam.AccountPrincipal(pipeline_account).with_conditions({"ArnEquals": {"aws:PrincipalArn": trigger}}),
            max_session_duration=cdk.Duration.hours(1),
        )
        self.starter_role.add_to_policy(iam.PolicyStatement(
            actions=["codebuild:StartBuild", "codebuild:BatchGetBuilds"], resources=[self.runner.project_arn]))
        self.starter_role_arn_output = cdk.CfnOutput(self, STARTER_ROLE_ARN_OUTPUT, value=self.starter_role.role_arn)
