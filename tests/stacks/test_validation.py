"""Validation stack: the runner that checks a deployed environment from inside its own VPC.

A CodeBuild project in the environment's private subnets, admitted to the API by the cluster
security group on 443 only, mapped by an EKS access entry to exactly the rights `ops validate`
needs, with its source (the ops package and the environment's validation objects) as an asset.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from config.kubernetes import VALIDATION_RUNNER_GROUP
from synth_helpers import only, synth


@pytest.fixture(scope="module")
def dev():
    return synth("dev")


@pytest.fixture(scope="module")
def template(dev):
    return dev.templates["validation"]


@pytest.fixture(scope="module")
def project(template):
    return only(template.find_resources("AWS::CodeBuild::Project"))


def buildspec(project: dict) -> dict:
    return yaml.safe_load(project["Properties"]["Source"]["BuildSpec"])


def test_runner_sits_in_the_private_subnets_of_its_environments_vpc(dev, project):
    """AWS CodeBuild User Guide, "Use AWS CodeBuild with Amazon Virtual Private Cloud"
    (https://docs.aws.amazon.com/codebuild/latest/userguide/vpc-support.html): a project with a VPC
    configuration runs in those subnets and reaches private endpoints there. Amazon EKS User Guide,
    "Cluster API server endpoint" (https://docs.aws.amazon.com/eks/latest/userguide/cluster-endpoint.html):
    with private access, the API is reachable from within the cluster's VPC."""
    vpc_config = project["Properties"]["VpcConfig"]
    network = dev.stage.network
    assert dev.imported_ref(vpc_config["VpcId"]) == dev.logical_id("network", network.vpc)
    private = {dev.logical_id("network", s) for s in network.vpc.private_subnets}
    assert {dev.imported_ref(s) for s in vpc_config["Subnets"]} == private


def test_cluster_security_group_admits_the_runner_on_443_and_nothing_else(dev, template, project):
    """Amazon EKS User Guide, "View Amazon EKS security group requirements for clusters"
    (https://docs.aws.amazon.com/eks/latest/userguide/sec-group-reqs.html): the cluster security
    group guards the control plane's network interfaces, so a client outside it needs an inbound
    rule on 443 to reach the private endpoint."""
    [runner_sg] = project["Properties"]["VpcConfig"]["SecurityGroupIds"]
    resources = dev.template_json("validation")["Resources"]
    inbound = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::EC2::SecurityGroupIngress"]
    [rule] = [r for r in inbound if r["SourceSecurityGroupId"] == runner_sg]
    assert (rule["IpProtocol"], rule["FromPort"], rule["ToPort"]) == ("tcp", 443, 443)
    cluster = dev.logical_id("cluster", dev.stage.cluster.cluster)
    assert dev.exported_value(rule["GroupId"]) == {"Fn::GetAtt": [cluster, "ClusterSecurityGroupId"]}
    runner = resources[runner_sg["Fn::GetAtt"][0]]["Properties"]
    assert "SecurityGroupIngress" not in runner
    assert [(e["IpProtocol"], e["FromPort"], e["ToPort"]) for e in runner["SecurityGroupEgress"]] == [("tcp", 443, 443)]


def test_runner_role_is_mapped_to_its_kubernetes_group_with_no_access_policy(dev, template, project):
    """Amazon EKS User Guide, "Review access policy permissions"
    (https://docs.aws.amazon.com/eks/latest/userguide/access-policy-permissions.html): access policies
    are fixed rule lists; AmazonEKSEditPolicy reads Secrets and no policy covers kubeflow.org, so the
    runner's `kubectl create` of the NCCL MPIJob was refused. "Create an access entry using Kubernetes
    groups" maps the role to a group that RBAC (k8s/addons/runner_rbac.py) binds instead."""
    entry = only(template.find_resources("AWS::EKS::AccessEntry"))["Properties"]
    assert entry["PrincipalArn"] == {"Fn::GetAtt": [project["Properties"]["ServiceRole"]["Fn::GetAtt"][0], "Arn"]}
    assert entry["KubernetesGroups"] == [VALIDATION_RUNNER_GROUP]
    assert not entry.get("AccessPolicies")
    assert dev.exported_value(entry["ClusterName"]) == {"Ref": dev.logical_id("cluster", dev.stage.cluster.cluster)}


def test_the_runner_group_is_bound_by_the_chart_the_workloads_stack_applies(dev):
    entries = {e.name: e for e in dev.stage.workloads.charts.entries}
    subjects = [s for o in entries["runner-rbac"].chart.to_json() if "subjects" in o for s in o["subjects"]]
    assert subjects and all(s == {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io",
                                  "name": VALIDATION_RUNNER_GROUP} for s in subjects)


def test_runner_runs_the_checks_and_a_failed_check_fails_its_build(dev, project):
    """AWS CodeBuild User Guide, "Build specification reference"
    (https://docs.aws.amazon.com/codebuild/latest/userguide/build-spec-ref.html): a command that
    exits non-zero in the build phase fails the build."""
    spec = buildspec(project)
    commands = spec["phases"]["build"]["commands"]
    assert commands[-1] == f"python3 -m ops validate --dist validation/{dev.config.name} --timeout 1800"
    assert not any("|| true" in c or c.rstrip().endswith("|| :") for c in commands)
    assert any(c.startswith('aws eks update-kubeconfig --name "$CLUSTER_NAME"') for c in commands)
    env = {v["Name"]: v["Value"] for v in project["Properties"]["Environment"]["EnvironmentVariables"]}
    assert env["CLUSTER_NAME"] == dev.config.cluster_name
    # The smoke run's image placeholder, resolved by CloudFormation to the asset `cdk deploy` pushed.
    image = json.dumps(env["TRAINER_IMAGE_CPU"])
    assert dev.stage.registry.trainer_images["cpu"].image_tag in image
    # The Python it runs by version, as every pipeline step (tests/stacks/test_pipeline.py says why).
    assert spec["phases"]["install"]["runtime-versions"] == {"python": "3.11"}
    install = spec["phases"]["install"]["commands"]
    # kubectl matching the cluster, checked against the digest of the binary the kubectl layer ships.
    assert any("dl.k8s.io/release/v1.35.2/bin/linux/amd64/kubectl" in c for c in install)
    assert any("sha256sum --check" in c for c in install)


def _runner_source(dev) -> Path:
    key = dev.stage.validation.runner_source.asset_hash
    [staged] = [p for p in dev.outdir.glob(f"**/asset.{key}") if p.is_dir()]
    return staged


def test_runner_source_holds_the_ops_package_and_the_environments_validation_objects(dev):
    source = _runner_source(dev)
    objects = [d for d in yaml.safe_load_all((source / "validation" / "dev" / "cluster-validation.yaml").read_text()) if d]
    from k8s.pods.validation import validation_objects

    assert objects == validation_objects(dev.config)
    assert {o["kind"] for o in objects} == {"Job", "MPIJob", "PyTorchJob"}
    # The runner's copy imports and runs on its own, without the rest of the repository.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "ops", "validate", "--help"], cwd=source, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in source.iterdir()) == ["config", "ops", "validation"]


def test_a_stage_built_without_a_pipeline_has_no_role_anyone_outside_may_assume(template):
    roles = template.find_resources("AWS::IAM::Role")
    trusted = {s["Principal"].get("Service") for r in roles.values()
               for s in r["Properties"]["AssumeRolePolicyDocument"]["Statement"]}
    assert trusted == {"codebuild.amazonaws.com"}


def test_outputs_name_the_runner_for_humans(template):
    assert "RunnerProjectName" in template.find_outputs("*")


def test_the_runner_creates_interfaces_only_in_its_subnets_and_deletes_them_only_in_its_vpc():
    """ec2:CreateNetworkInterface and DeleteNetworkInterface take resource ARNs and ec2:Vpc ("Actions,
    resources, and condition keys for Amazon EC2",
    https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2.html); only the
    Describe calls stay on "*"."""
    dev = synth("dev")
    stack = dev.stage.validation
    policy = dev.template_json("validation")["Resources"][
        stack.get_logical_id(stack.runner.node.find_child("PolicyDocument").node.default_child)]
    statements = {s["Action"] if isinstance(s["Action"], str) else "describe": s
                  for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert all(a.startswith("ec2:Describe") for a in statements["describe"]["Action"])
    create = statements["ec2:CreateNetworkInterface"]["Resource"]
    assert "*" not in create and any(":subnet/" in json.dumps(r) for r in create)
    assert any(":security-group/" in json.dumps(r) for r in create)
    delete = statements["ec2:DeleteNetworkInterface"]
    assert delete["Resource"] != "*" and "ec2:Vpc" in delete["Condition"]["ArnEquals"]
