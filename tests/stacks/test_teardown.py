"""Teardown: what `cdk destroy` deletes per environment, and the order that lets it finish.

Read off the synthesized templates of dev (removalPolicy destroy) and prod (retain). The order
rules answer known CDK/EKS destroy failures: manifests deleted after the security-group rules
the kubectl Lambda needs (aws-cdk 9970), the control-plane security group deleted before the
cluster (18650), and subnets blocked by ENIs or load balancers controllers created (26716).
"""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Template

from synth_helpers import only, synth

STACKS = ("network", "cluster", "storage", "registry", "workloads")
KUBERNETES_RESOURCE = "Custom::AWSCDK-EKS-KubernetesResource"


def templates(variant: str) -> dict[str, dict]:
    s = synth(variant)
    return {name: Template.from_stack(getattr(s.stage, name)).to_json() for name in STACKS}


@pytest.fixture(scope="module")
def dev():
    return templates("dev")


@pytest.fixture(scope="module")
def prod():
    return templates("prod")


def policies(template: dict, type_: str) -> list[tuple[str, str]]:
    return [(r.get("DeletionPolicy", "Delete"), r.get("UpdateReplacePolicy", "Delete"))
            for r in template["Resources"].values() if r["Type"] == type_]


def all_resources(stacks: dict[str, dict]):
    for stack, template in stacks.items():
        for logical_id, resource in template["Resources"].items():
            yield stack, logical_id, resource


def test_destroy_environment_deletes_everything(dev):
    """Everything but the file system also goes when a deploy replaces it; a replaced file system
    stays (tests/stacks/test_second_deploy.py: an edit, not a destroy, replaces it)."""
    kept = [f"{s}/{lid}" for s, lid, r in all_resources(dev) if r.get("DeletionPolicy", "Delete") != "Delete"
            or (r.get("UpdateReplacePolicy", "Delete") != "Delete" and r["Type"] != "AWS::FSx::FileSystem")]
    assert kept == []


def test_destroy_environment_empties_the_repository_before_deleting_it(dev):
    repository = only({k: r for k, r in dev["registry"]["Resources"].items() if r["Type"] == "AWS::ECR::Repository"})
    assert repository["Properties"]["EmptyOnDelete"] is True


@pytest.mark.parametrize("type_", ["AWS::FSx::FileSystem", "AWS::ECR::Repository", "AWS::KMS::Key",
                                   "AWS::Logs::LogGroup"])
def test_retain_environment_keeps_its_data(prod, type_):
    found = [p for name, t in prod.items() if name != "cluster" for p in policies(t, type_)]
    assert found and set(found) == {("Retain", "Retain")}, type_


@pytest.mark.parametrize("type_", ["AWS::KMS::Key", "AWS::Logs::LogGroup"])
def test_retain_environment_deletes_the_clusters_logs_and_keys(prod, type_):
    """The control-plane and Container Insights groups are named for the cluster, and their key and
    the secrets key serve only the cluster: they go with it, in every environment."""
    found = policies(prod["cluster"], type_)
    assert found and set(found) == {("Delete", "Delete")}, type_


# The properties that name a resource of these types; the rest get a name CloudFormation makes up.
NAME_PROPERTIES = {"AWS::Logs::LogGroup": "LogGroupName", "AWS::ECR::Repository": "RepositoryName",
                   "AWS::KMS::Alias": "AliasName", "AWS::S3::Bucket": "BucketName", "AWS::IAM::Role": "RoleName",
                   "AWS::EKS::Cluster": "Name", "AWS::EC2::SecurityGroup": "GroupName",
                   "AWS::SecretsManager::Secret": "Name", "AWS::SSM::Parameter": "Name",
                   "AWS::FSx::FileSystem": None, "AWS::KMS::Key": None, "AWS::EC2::VPC": None,
                   "AWS::EC2::Subnet": None, "Custom::AWSCDK-EKS-KubernetesResource": None}


def _fixed(value) -> bool:
    """A name that a second deploy would produce again: literals and pseudo parameters only, no
    reference to a resource the deploy creates."""
    if isinstance(value, dict):
        if "Ref" in value:
            return value["Ref"].startswith("AWS::")
        if "Fn::GetAtt" in value or "Fn::ImportValue" in value:
            return False
        return all(_fixed(v) for v in value.values())
    if isinstance(value, list):
        return all(_fixed(v) for v in value)
    return True


def test_nothing_kept_after_destroy_has_a_name_the_next_deploy_would_take_again():
    """CloudFormation cannot create a named resource whose name exists (a log group, a repository,
    a role). What prod keeps when it is destroyed must therefore carry no fixed name, or the next
    deploy of prod fails on it."""
    s = synth("prod")
    for name in (*STACKS, "validation"):
        template = Template.from_stack(getattr(s.stage, name)).to_json()
        for logical_id, resource in template["Resources"].items():
            if resource.get("DeletionPolicy", "Delete") != "Retain":
                continue
            assert resource["Type"] in NAME_PROPERTIES, f"{name}/{logical_id}: add {resource['Type']} to NAME_PROPERTIES"
            prop = NAME_PROPERTIES[resource["Type"]]
            value = resource.get("Properties", {}).get(prop) if prop else None
            assert value is None or not _fixed(value), f"{name}/{logical_id} is kept under the fixed name {value}"


@pytest.mark.parametrize("variant", ["dev", "prod"])
def test_every_log_group_created_under_a_fixed_name_is_one_preflight_looks_for_after_a_destroy(variant):
    """The stack deletes the cluster's log groups after the cluster, yet EKS's service-linked role
    can create /aws/eks/<cluster>/cluster again for the control plane's last events
    (terraform-aws-modules/terraform-aws-eks#2446 and #2763 saw it in CloudTrail), and Fluent Bit
    creates its Container Insights groups whenever they are missing. CloudFormation cannot create a
    log group whose name exists, so such a leftover would fail the environment's next deploy:
    `ops preflight` (which `make deploy` runs first) looks for exactly these names
    (tests/ops/test_ops_preflight.py)."""
    s = synth(variant)
    fixed = {group["Properties"]["LogGroupName"]
             for name in (*STACKS, "validation")
             for group in Template.from_stack(getattr(s.stage, name)).find_resources("AWS::Logs::LogGroup").values()
             if "LogGroupName" in group["Properties"] and _fixed(group["Properties"]["LogGroupName"])}
    assert fixed and fixed == set(s.config.cluster_log_group_names)


@pytest.mark.parametrize("variant", ["dev", "prod"])
def test_every_lambda_logs_to_a_group_its_stack_creates(variant):
    """Without a log group of its own, CloudWatch creates /aws/lambda/<function> at the first
    invocation (Lambda Developer Guide, "Configuring CloudWatch log groups",
    https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-loggroups.html): a group
    no stack knows, without expiry or key, that every destroy leaves behind (aws-cdk-lib's kubectl
    handler, its framework and the default-security-group handler had none)."""
    s = synth(variant)
    for name in (*STACKS, "validation"):
        resources = Template.from_stack(getattr(s.stage, name)).to_json()["Resources"]
        for logical_id, function in resources.items():
            if function["Type"] != "AWS::Lambda::Function":
                continue
            group = function["Properties"].get("LoggingConfig", {}).get("LogGroup", {})
            assert resources.get(group.get("Ref"), {}).get("Type") == "AWS::Logs::LogGroup", f"{name}/{logical_id}"


def test_retain_environment_keeps_the_file_systems_network_home(prod):
    assert set(policies(prod["network"], "AWS::EC2::VPC")) == {("Retain", "Retain")}
    assert set(policies(prod["network"], "AWS::EC2::Subnet")) == {("Retain", "Retain")}
    assert set(policies(prod["storage"], "AWS::EC2::SecurityGroup")) == {("Retain", "Retain")}


@pytest.mark.parametrize("stack, type_", [
    ("cluster", "AWS::EKS::Cluster"), ("cluster", "AWS::EKS::Nodegroup"), ("network", "AWS::EC2::NatGateway"),
    ("network", "AWS::EC2::EIP"), ("cluster", "AWS::Lambda::Function"),
])
def test_retain_environment_deletes_what_only_costs_money(prod, stack, type_):
    found = policies(prod[stack], type_)
    assert found and set(found) == {("Delete", "Delete")}


def test_retain_environment_keeps_only_the_manifests_that_bind_data(prod):
    """Namespaces, CRDs and the FSx volume would cascade into jobs and bindings if the Workloads
    stack alone were deleted or replaced; every other manifest goes."""
    from stacks.workloads import KEPT_WHEN_RETAINED, _construct_id

    kept_ids = {_construct_id(name) for name in KEPT_WHEN_RETAINED}
    for logical_id, resource in prod["workloads"]["Resources"].items():
        if resource["Type"] == KUBERNETES_RESOURCE:
            expected = "Retain" if any(logical_id.startswith(k) for k in kept_ids) else "Delete"
            assert resource.get("DeletionPolicy", "Delete") == expected, logical_id


def test_retain_environment_takes_a_final_backup_of_the_file_system(prod, dev):
    [backup] = [r for r in prod["storage"]["Resources"].values() if r["Type"] == "Custom::FsxFinalBackup"]
    fs_id = next(k for k, r in prod["storage"]["Resources"].items() if r["Type"] == "AWS::FSx::FileSystem")
    assert backup["Properties"]["FileSystemId"] == {"Ref": fs_id}
    # The backup resource itself must be deleted, or its handler never hears of the deletion.
    assert backup.get("DeletionPolicy", "Delete") == "Delete"
    assert not [r for r in dev["storage"]["Resources"].values() if r["Type"] == "Custom::FsxFinalBackup"]


def test_kept_security_groups_have_no_inline_rules_that_pin_deleted_groups(prod):
    for stack, logical_id, resource in all_resources(prod):
        if resource["Type"] == "AWS::EC2::SecurityGroup" and resource.get("DeletionPolicy") == "Retain":
            rules = resource["Properties"].get("SecurityGroupIngress", []) + \
                resource["Properties"].get("SecurityGroupEgress", [])
            assert not [r for r in rules if "SourceSecurityGroupId" in r or "DestinationSecurityGroupId" in r], \
                f"{stack}/{logical_id}"


# -- destroy order ------------------------------------------------------------------------------


def stack_dependencies(variant: str) -> dict[str, set[str]]:
    """Stack artifact id -> the artifact ids it depends on, transitively, from the cloud assembly."""
    s = synth(variant)
    direct = {st.id: {d.id for d in st.dependencies}
              for st in s.assembly.get_nested_assembly(s.stage.artifact_id).stacks}
    closed: dict[str, set[str]] = {}

    def close(name: str) -> set[str]:
        if name not in closed:
            closed[name] = set()
            for dep in direct.get(name, ()):
                closed[name] |= {dep} | close(dep)
        return closed[name]
    return {name: close(name) for name in direct}


def artifact_ids(variant: str) -> dict[str, str]:
    s = synth(variant)
    return {name: getattr(s.stage, name).artifact_id for name in STACKS}


@pytest.mark.parametrize("variant", ["dev", "prod"])
def test_manifests_are_deleted_before_the_cluster_its_rules_and_the_network(variant):
    """aws-cdk 9970: the kubectl Lambda must still reach the API while it deletes manifests, so
    every manifest lives in a stack that CloudFormation deletes before the stacks holding the
    cluster, its security-group rules, the node groups, the NAT gateways and the storage."""
    stacks = templates(variant)
    holders = {name for name, t in stacks.items()
               if any(r["Type"] == KUBERNETES_RESOURCE for r in t["Resources"].values())}
    assert holders == {"workloads"}
    ids = artifact_ids(variant)
    by_id = {v: k for k, v in ids.items()}
    deps = stack_dependencies(variant)
    assert {by_id[d] for d in deps[ids["workloads"]] if d in by_id} >= {"network", "cluster", "storage"}


def test_cluster_security_groups_outlive_the_cluster(dev):
    """aws-cdk 18650: the cluster references each of its security groups, so CloudFormation deletes
    the cluster first, and no other stack owns a group the cluster uses."""
    resources = dev["cluster"]["Resources"]
    cluster = only({k: r for k, r in resources.items() if r["Type"] == "AWS::EKS::Cluster"})
    groups = cluster["Properties"]["ResourcesVpcConfig"]["SecurityGroupIds"]
    assert groups
    for group in groups:
        logical_id = group["Fn::GetAtt"][0]
        assert resources[logical_id]["Type"] == "AWS::EC2::SecurityGroup"


def test_node_groups_are_deleted_before_the_cluster(dev):
    resources = dev["cluster"]["Resources"]
    cluster_id = next(k for k, r in resources.items() if r["Type"] == "AWS::EKS::Cluster")
    for logical_id, resource in resources.items():
        if resource["Type"] == "AWS::EKS::Nodegroup":
            assert resource["Properties"]["ClusterName"] == {"Ref": cluster_id}, logical_id


def test_no_chart_asks_a_controller_for_a_load_balancer():
    """aws-cdk 26716: a load balancer a controller created blocks subnet deletion; we create none."""
    s = synth("dev")
    for name, objects in s.stage.workloads.charts.manifests().items():
        for obj in objects:
            assert obj["kind"] != "Ingress", name
            if obj["kind"] == "Service":
                assert obj["spec"].get("type", "ClusterIP") == "ClusterIP", f"{name}/{obj['metadata']['name']}"


def test_eni_janitor_runs_before_any_subnet_route_or_gateway_is_deleted(dev):
    """aws-cdk 26716: ENIs left by the VPC CNI, EFA or the kubectl Lambda block subnet deletion;
    the janitor depends on every VPC resource, so it runs (and sweeps) before they go."""
    resources = dev["network"]["Resources"]
    [(janitor_id, janitor)] = [(k, r) for k, r in resources.items() if r["Type"] == "Custom::EniJanitor"]
    vpc_id = next(k for k, r in resources.items() if r["Type"] == "AWS::EC2::VPC")
    assert janitor["Properties"]["VpcId"] == {"Ref": vpc_id}
    network_types = {"AWS::EC2::Subnet", "AWS::EC2::RouteTable", "AWS::EC2::NatGateway", "AWS::EC2::Route",
                     "AWS::EC2::SubnetRouteTableAssociation", "AWS::EC2::VPCGatewayAttachment",
                     "AWS::EC2::InternetGateway", "AWS::EC2::VPC"}
    expected = {k for k, r in resources.items() if r["Type"] in network_types}
    assert expected <= set(janitor.get("DependsOn", []))
    handler = resources[janitor["Properties"]["ServiceToken"]["Fn::GetAtt"][0]]
    assert "VpcConfig" not in handler["Properties"], "a janitor inside the VPC would leave ENIs of its own"


def test_eni_janitor_may_delete_interfaces_only_in_its_own_vpc(dev):
    resources = dev["network"]["Resources"]
    statements = [s for r in resources.values() if r["Type"] == "AWS::IAM::Policy"
                  and "EniJanitor" in json.dumps(r["Properties"]["Roles"])
                  for s in r["Properties"]["PolicyDocument"]["Statement"]]
    [delete] = [s for s in statements if s["Action"] == "ec2:DeleteNetworkInterface"]
    vpc_id = next(k for k, r in resources.items() if r["Type"] == "AWS::EC2::VPC")
    assert json.dumps({"Ref": vpc_id}) in json.dumps(delete["Condition"]["ArnEquals"]["ec2:Vpc"])


def test_eni_janitor_may_delete_only_the_security_groups_eks_made_for_this_cluster(dev):
    """aws-cdk 18650: the janitor removes the cluster security group EKS leaves when the kubectl
    handler's ENIs still used it. It may delete a group only in its own VPC and only if EKS tagged
    it with this environment's cluster name."""
    from cdk_constructs.teardown import CLUSTER_TAG

    resources = dev["network"]["Resources"]
    [janitor] = [r for r in resources.values() if r["Type"] == "Custom::EniJanitor"]
    assert janitor["Properties"]["ClusterName"] == synth("dev").config.cluster_name
    statements = [s for r in resources.values() if r["Type"] == "AWS::IAM::Policy"
                  and "EniJanitor" in json.dumps(r["Properties"]["Roles"])
                  for s in r["Properties"]["PolicyDocument"]["Statement"]]
    [delete] = [s for s in statements if s["Action"] == "ec2:DeleteSecurityGroup"]
    assert delete["Condition"]["StringEquals"] == {f"ec2:ResourceTag/{CLUSTER_TAG}": synth("dev").config.cluster_name}
    vpc_id = next(k for k, r in resources.items() if r["Type"] == "AWS::EC2::VPC")
    assert json.dumps({"Ref": vpc_id}) in json.dumps(delete["Condition"]["ArnEquals"]["ec2:Vpc"])


def test_janitor_handler_and_construct_agree_on_the_eks_cluster_tag():
    import sys

    from cdk_constructs.teardown import CLUSTER_TAG, HANDLERS

    sys.path.insert(0, str(HANDLERS))
    import eni_janitor

    assert eni_janitor.CLUSTER_TAG == CLUSTER_TAG == "aws:eks:cluster-name"


def test_runs_leave_the_training_namespace_before_the_fsx_claim_is_deleted(dev):
    """aws-cdk 9970: pods that `ops submit` or `ops data` started hold the FSx claim (pvc-protection),
    and the kubectl handler's delete of the volume would wait on them until it times out. The drain
    depends on every manifest of the stack, so CloudFormation deletes it (and it deletes the runs
    and waits for their pods) first; it keeps its RBAC and access entry until it is done."""
    resources = dev["workloads"]["Resources"]
    [(drain_id, drain)] = [(k, r) for k, r in resources.items() if r["Type"] == "Custom::TrainingDrain"]
    manifests = {k for k, r in resources.items() if r["Type"] == KUBERNETES_RESOURCE}
    fsx_storage = next(k for k in manifests if k.startswith("FsxStorage"))
    access = next(k for k, r in resources.items() if r["Type"] == "AWS::EKS::AccessEntry")
    assert fsx_storage in drain["DependsOn"] and access in drain["DependsOn"]
    assert manifests <= set(drain["DependsOn"])
    assert (drain["Properties"]["Namespace"], drain["Properties"]["ClaimName"]) == ("training", "fsx-pvc")


def test_the_drain_may_delete_runs_and_pods_in_the_training_namespace_and_nothing_else(dev):
    from cdk_constructs.training_drain import DRAIN_GROUP

    resources = dev["workloads"]["Resources"]
    [access] = [r for r in resources.values() if r["Type"] == "AWS::EKS::AccessEntry"]
    assert access["Properties"]["KubernetesGroups"] == [DRAIN_GROUP] and "AccessPolicies" not in access["Properties"]
    [rbac] = [r for k, r in resources.items() if r["Type"] == KUBERNETES_RESOURCE and k.startswith("TrainingDrainRbac")]
    role, binding, cluster_role, cluster_binding = json.loads(rbac["Properties"]["Manifest"])
    assert (role["kind"], role["metadata"]["namespace"]) == ("Role", "training")
    # Cluster-wide only the list a trainingApi switch asks (tests/stacks/test_training_api_switch.py).
    assert cluster_role["kind"] == "ClusterRole" and cluster_role["rules"] == [
        {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs"], "verbs": ["list"]},
        {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": ["list"]}]
    assert cluster_binding["subjects"] == binding["subjects"]
    assert cluster_binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                          "name": cluster_role["metadata"]["name"]}
    verbs = {(group, resource): rule["verbs"] for rule in role["rules"]
             for group in rule["apiGroups"] for resource in rule["resources"]}
    assert verbs == {("trainer.kubeflow.org", "trainjobs"): ["deletecollection"],
                     ("jobset.x-k8s.io", "jobsets"): ["deletecollection"],
                     ("kubeflow.org", "pytorchjobs"): ["deletecollection"], ("kubeflow.org", "mpijobs"): ["deletecollection"],
                     ("batch", "jobs"): ["deletecollection"], ("", "pods"): ["list", "delete"]}
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": DRAIN_GROUP}]
    [function] = [r for r in resources.values() if r["Type"] == "AWS::Lambda::Function"
                  and r["Properties"]["Handler"] == "training_drain.handler"]
    [group] = function["Properties"]["VpcConfig"]["SecurityGroupIds"]
    assert "ClusterSecurityGroupId" in json.dumps(group)  # the cluster security group reaches the API


def test_an_environment_that_keeps_its_claim_has_no_drain(prod):
    """In a retain environment the claim's manifest is kept, so nothing waits on it; a drain would
    only stop runs when the Workloads stack alone goes."""
    assert not [r for r in prod["workloads"]["Resources"].values() if r["Type"] == "Custom::TrainingDrain"]
def test_the_final_backup_handler_has_lambdas_longest_time_to_wait_for_its_backup():
    """Lambda runs for at most 900 s; the handler waits for AVAILABLE within it, polling
    fsx:DescribeBackups, and may not restore or delete backups."""
    s = synth("prod")
    backup = s.stage.storage.final_backup
    resources = Template.from_stack(s.stage.storage).to_json()["Resources"]
    function = resources[s.stage.storage.get_logical_id(backup.function.node.default_child)]
    assert function["Properties"]["Timeout"] == 900
    role = {"Ref": s.stage.storage.get_logical_id(backup.role.node.default_child)}
    actions = {a for r in resources.values() if r["Type"] == "AWS::IAM::Policy" and role in r["Properties"]["Roles"]
               for st in r["Properties"]["PolicyDocument"]["Statement"]
               for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])}
    assert "fsx:DescribeBackups" in actions and "fsx:CreateBackup" in actions
    assert not {a for a in actions if a.startswith(("fsx:Delete", "fsx:Restore", "fsx:CreateFileSystemFromBackup"))}
