"""preflight against a real moto server (STS, EC2 zones and offerings, EKS, FSx, VPC), with
Service Quotas and capacity reservations answered by botocore Stubbers."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timezone

import boto3
import pytest

from ops import aws as ops_aws
from ops import preflight
from ops import checks
from ops.checks import FAIL, PASS, WARN
from ops.envconfig import load
from ops_fakes import stubbed, write_context

PROD_RESERVATION = "cr-0123456789abcdef0"
# The order preflight asks Service Quotas in for prod: P and Standard vCPUs, EKS, FSx, VPC, EIP.
PROD_QUOTAS = [("ec2", "L-417A185B"), ("ec2", "L-1216C47A"), ("eks", "L-1194D53C"), ("eks", "L-6D54EA21"),
               ("eks", "L-BD136A63"), ("fsx", "L-8F1B9C74"), ("vpc", "L-F678F1CE"), ("ec2", "L-0263D0A3")]
GENEROUS = {"L-417A185B": 4096, "L-1216C47A": 1024, "L-1194D53C": 100, "L-6D54EA21": 30,
            "L-BD136A63": 450, "L-8F1B9C74": 100800, "L-F678F1CE": 5, "L-0263D0A3": 5}


def quotas_answering(values: dict[str, float], order=PROD_QUOTAS):
    client, stub = stubbed("service-quotas")
    for service, code in order:
        stub.add_response("get_service_quota",
                          {"Quota": {"ServiceCode": service, "QuotaCode": code, "Value": float(values[code])}},
                          {"ServiceCode": service, "QuotaCode": code})
    stub.activate()
    return client, stub


def reservation(**changes) -> dict:
    cr = {"CapacityReservationId": PROD_RESERVATION, "InstanceType": "p5.48xlarge",
          "AvailabilityZone": "us-east-1a", "AvailabilityZoneId": "use1-az6", "State": "active",
          "TotalInstanceCount": 16, "AvailableInstanceCount": 16, "ReservationType": "default"}
    cr.update(changes)
    return cr


def reservations_answering(*items: dict, error: str | None = None):
    """A Stubber answering one describe_capacity_reservations; with nothing to answer, it
    fails the test on any call."""
    client, stub = stubbed("ec2")
    if error:
        stub.add_client_error("describe_capacity_reservations", service_error_code=error,
                              service_message="stubbed", http_status_code=400)
    elif items:
        stub.add_response("describe_capacity_reservations", {"CapacityReservations": list(items)},
                          {"CapacityReservationIds": [PROD_RESERVATION]})
    stub.activate()
    return client, stub


@pytest.fixture(scope="module")
def moto_clients(moto_endpoint):
    """Clients on the moto server, made once: a boto3 session costs about a second to build."""
    return ops_aws.clients("us-east-1")


# What DescribeAddonVersions answers here: per add-on, versions offered for the cluster's
# Kubernetes version, the first being EKS's default. Test data, not attested versions.
OFFERED = ["v1.9.0-eksbuild.2", "v1.9.0-eksbuild.1", "v1.8.1-eksbuild.1"]
PERMISSIVE_SCHEMA = {"$schema": "https://json-schema.org/draft/2019-09/schema", "type": "object"}


def addons_answering(env, offered=None, schemas=None):
    """A Stubber answering DescribeAddonVersions for every managed add-on (in install order) and
    DescribeAddonConfiguration for those the stack configures, with the schemas given."""
    from config.addons import MANAGED_ADDONS, configuration_values

    offered, schemas = offered or {}, schemas or {}
    configured = configuration_values(env)
    client, stub = stubbed("eks")
    for name in MANAGED_ADDONS:
        versions = offered.get(name, OFFERED)
        stub.add_response("describe_addon_versions", {"addons": [{"addonName": name, "addonVersions": [
            {"addonVersion": v, "compatibilities": [
                {"clusterVersion": env.kubernetes_version, "defaultVersion": i == 0, "platformVersions": ["*"]}]}
            for i, v in enumerate(versions)]}] if versions else []},
            {"addonName": name, "kubernetesVersion": env.kubernetes_version})
        pin = env.addon_version(name)
        if name in configured and versions and (pin is None or pin in versions):
            checked = pin or versions[0]
            stub.add_response("describe_addon_configuration", {
                "addonName": name, "addonVersion": checked,
                "configurationSchema": json.dumps(schemas.get(name, PERMISSIVE_SCHEMA))},
                {"addonName": name, "addonVersion": checked})
    stub.activate()
    return client, stub


def run_prod(clients, quotas=None, reservations=None, env_name="prod", context=None, addons=None):
    env = load(env_name, context)
    clients = replace(clients)
    clients.quotas, quota_stub = quotas or quotas_answering(GENEROUS)
    clients.reservations, cr_stub = reservations or reservations_answering(reservation())
    clients.addons, addon_stub = addons or addons_answering(env)
    rows = preflight.run(env, clients)
    quota_stub.assert_no_pending_responses()
    cr_stub.assert_no_pending_responses()
    addon_stub.assert_no_pending_responses()
    return {r.name: r for r in rows}, rows


def test_prod_passes_every_check_when_account_zone_quotas_and_reservation_fit(aws, moto_clients):
    by_name, rows = run_prod(moto_clients)
    print(checks.render(rows))
    assert all(r.status == PASS for r in rows), checks.render(rows)
    assert by_name["training AZ"].reason == "us-east-1a is use1-az6 in this account"
    assert "p5.48xlarge is offered in us-east-1a" in by_name["offering p5"].reason
    assert "max sizes need 3072 vCPUs, quota 4096 (applied)" in by_name["vCPU quota P"].reason
    assert "16 x p5.48xlarge in us-east-1a" in by_name["reservation p5"].reason
    assert not checks.failed(rows)


def test_credentials_of_another_account_fail(aws, moto_clients, monkeypatch):
    monkeypatch.setenv("MOTO_ACCOUNT_ID", "123456789012")
    by_name, rows = run_prod(moto_clients)
    assert by_name["credentials"].status == FAIL
    assert "123456789012" in by_name["credentials"].reason and "222222222222" in by_name["credentials"].reason
    assert checks.failed(rows)


def test_p_vcpu_quota_below_the_groups_max_sizes_fails_with_the_shortfall(aws, moto_clients):
    by_name, _ = run_prod(moto_clients, quotas=quotas_answering(dict(GENEROUS, **{"L-417A185B": 384})))
    row = by_name["vCPU quota P"]
    assert row.status == FAIL
    assert "need 3072 vCPUs, quota 384" in row.reason and "increase of 2688" in row.reason


def test_running_instances_that_crowd_the_quota_warn(aws, moto_clients):
    ec2 = boto3.client("ec2", region_name="us-east-1")
    image = ec2.describe_images()["Images"][0]["ImageId"]
    ec2.run_instances(ImageId=image, InstanceType="p5.48xlarge", MinCount=6, MaxCount=6)
    by_name, _ = run_prod(moto_clients, quotas=quotas_answering(dict(GENEROUS, **{"L-417A185B": 3500})))
    row = by_name["vCPU quota P"]
    assert row.status == WARN
    assert "1152 already run" in row.reason


def test_unknown_service_quota_falls_back_to_the_aws_default(aws, moto_clients):
    client, stub = stubbed("service-quotas")
    stub.add_client_error("get_service_quota", "NoSuchResourceException", "not applied")
    stub.add_response("get_aws_default_service_quota",
                      {"Quota": {"ServiceCode": "ec2", "QuotaCode": "L-417A185B", "Value": 0.0}},
                      {"ServiceCode": "ec2", "QuotaCode": "L-417A185B"})
    for service, code in PROD_QUOTAS[1:]:
        stub.add_response("get_service_quota", {"Quota": {"Value": float(GENEROUS[code])}},
                          {"ServiceCode": service, "QuotaCode": code})
    stub.activate()
    by_name, _ = run_prod(moto_clients, quotas=(client, stub))
    assert by_name["vCPU quota P"].status == FAIL
    assert "quota 0 (AWS default)" in by_name["vCPU quota P"].reason


@pytest.mark.parametrize("code, words", [
    ("AccessDeniedException", "not permitted"),
    ("TooManyRequestsException", "throttled"),
])
def test_quota_calls_the_api_refuses_are_warnings_naming_the_reason(aws, moto_clients, code, words):
    client, stub = stubbed("service-quotas")
    for _ in PROD_QUOTAS:
        stub.add_client_error("get_service_quota", code, "stubbed refusal")
    stub.activate()
    by_name, rows = run_prod(moto_clients, quotas=(client, stub))
    for name in ("vCPU quota P", "vCPU quota Standard", "EKS clusters", "FSx Lustre storage", "Elastic IPs"):
        assert by_name[name].status == WARN
        assert words in by_name[name].reason and code in by_name[name].reason
    assert not checks.failed(rows)


def test_operations_moto_does_not_answer_become_warnings_not_a_crash(aws, moto_clients):
    """Service Quotas and capacity reservations straight from moto: 400s and HTML 500s."""
    env = load("prod")
    rows = preflight.run(env, moto_clients)
    by_name = {r.name: r for r in rows}
    assert by_name["reservation p5"].status == WARN
    assert by_name["vCPU quota P"].status == WARN
    assert not checks.failed(rows)


@pytest.mark.parametrize("changes, problem", [
    ({"AvailabilityZone": "us-east-1b", "AvailabilityZoneId": "use1-az1"},
     "it is in us-east-1b (use1-az1), the training AZ is us-east-1a (use1-az6)"),
    ({"State": "expired"}, "state is expired"),
    ({"TotalInstanceCount": 8}, "it holds 8 instances, maxSize is 16"),
    ({"InstanceType": "p4d.24xlarge"}, "it holds p4d.24xlarge, the group runs p5.48xlarge"),
    ({"ReservationType": "capacity-block"}, "it is a capacity block, configured as reserved"),
])
def test_a_reservation_that_cannot_hold_the_group_fails_saying_why(aws, moto_clients, changes, problem):
    by_name, _ = run_prod(moto_clients, reservations=reservations_answering(reservation(**changes)))
    assert by_name["reservation p5"].status == FAIL
    assert problem in by_name["reservation p5"].reason


def test_a_reservation_id_the_account_does_not_have_fails(aws, moto_clients):
    missing = reservations_answering(error="InvalidCapacityReservationId.NotFound")
    by_name, _ = run_prod(moto_clients, reservations=missing)
    assert by_name["reservation p5"].status == FAIL
    assert "does not exist" in by_name["reservation p5"].reason


def test_a_scheduled_capacity_block_in_the_training_az_passes(aws, moto_clients, tmp_path):
    prod = load("prod")
    groups = [{"name": "p5", "instanceType": "p5.48xlarge", "minSize": 0, "maxSize": 16, "desiredSize": 0,
               "capacity": {"type": "capacityBlock", "reservationId": PROD_RESERVATION}}]
    context = write_context(tmp_path, "prod", gpuNodegroups=groups)
    start = datetime(2026, 12, 1, 11, 30, tzinfo=timezone.utc)
    block = reservation(State="scheduled", ReservationType="capacity-block", StartDate=start,
                        AvailableInstanceCount=16)
    by_name, _ = run_prod(moto_clients, reservations=reservations_answering(block), context=context)
    assert prod.gpu_nodegroups[0].capacity.type == "reserved"  # the copy differs, not cdk.json
    assert by_name["reservation p5"].status == PASS
    assert "scheduled, starts 2026-12-01 11:30 UTC" in by_name["reservation p5"].reason


def test_a_type_not_offered_in_the_training_az_fails(aws, moto_clients, tmp_path):
    # moto's us-east-1e offers no p4d.24xlarge (as in the real us-east-1 catalogue it copies).
    groups = [{"name": "p4d", "instanceType": "p4d.24xlarge", "minSize": 0, "maxSize": 2, "desiredSize": 0}]
    context = write_context(tmp_path, "prod", availabilityZones=["us-east-1d", "us-east-1e"],
                            trainingAvailabilityZone="us-east-1e", gpuNodegroups=groups)
    order = [("ec2", "L-417A185B")] + PROD_QUOTAS[1:]
    by_name, _ = run_prod(moto_clients, quotas=quotas_answering(GENEROUS, order), context=context,
                          reservations=reservations_answering())
    assert by_name["offering p4d"].status == FAIL
    assert by_name["offering p4d"].reason == "p4d.24xlarge is not offered in us-east-1e"
    assert by_name["offering cpu"].status == FAIL  # m5.2xlarge is missing from us-east-1e too


def test_a_zone_the_account_does_not_have_fails(aws, moto_clients, tmp_path):
    context = write_context(tmp_path, "prod", availabilityZones=["us-east-1a", "us-east-1g"],
                            trainingAvailabilityZone="us-east-1g")
    env = load("prod", context)
    clients = replace(moto_clients)
    clients.quotas, _ = quotas_answering(GENEROUS)
    clients.reservations, _ = reservations_answering(reservation())
    by_name = {r.name: r for r in preflight.run(env, clients)}
    assert by_name["training AZ"].status == FAIL
    assert "us-east-1g does not exist in us-east-1" in by_name["training AZ"].reason
    assert by_name["availability zones"].status == FAIL


BLOCK_GROUPS = [{"name": "p5", "instanceType": "p5.48xlarge", "minSize": 0, "maxSize": 16, "desiredSize": 0,
                 "capacity": {"type": "capacityBlock", "reservationId": PROD_RESERVATION}}]
BLOCK_START = datetime(2026, 12, 1, 11, 30, tzinfo=timezone.utc)
BLOCK_END = datetime(2026, 12, 8, 11, 30, tzinfo=timezone.utc)


def run_block(moto_clients, tmp_path, now, **changes):
    """preflight of prod with its p5 group on a capacity block, the block answered by a Stubber."""
    env = load("prod", write_context(tmp_path, "prod", gpuNodegroups=BLOCK_GROUPS))
    clients = replace(moto_clients)
    clients.quotas, _ = quotas_answering(GENEROUS)
    clients.reservations, stub = reservations_answering(reservation(
        ReservationType="capacity-block", StartDate=BLOCK_START, EndDate=BLOCK_END, **changes))
    rows = preflight.run(env, clients, now=now)
    stub.assert_no_pending_responses()
    return {r.name: r for r in rows}


def test_preflight_says_when_a_capacity_block_starts_and_ends(aws, moto_clients, tmp_path):
    """"Create a managed node group with Capacity Blocks for ML" (EKS User Guide,
    https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html): instances launch
    only once the block is active, and EKS scales the group to 0 forty minutes before it ends."""
    by_name = run_block(moto_clients, tmp_path, datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc), State="scheduled")
    row = by_name["capacity block p5"]
    assert row.status == PASS
    assert row.reason.startswith(f"{PROD_RESERVATION}: starts 2026-12-01 11:30 UTC, ends 2026-12-08 11:30 UTC (7 d)")
    assert "EKS scales p5 to 0 at 2026-12-08 10:50 UTC" in row.reason
    assert "python -m ops capacity-block schedule --env prod" in row.reason


def test_a_capacity_block_that_has_ended_fails(aws, moto_clients, tmp_path):
    by_name = run_block(moto_clients, tmp_path, datetime(2026, 12, 9, tzinfo=timezone.utc), State="expired")
    row = by_name["capacity block p5"]
    assert row.status == FAIL and "ended 2026-12-08 11:30 UTC" in row.reason


def test_a_capacity_block_in_its_last_hour_warns(aws, moto_clients, tmp_path):
    by_name = run_block(moto_clients, tmp_path, datetime(2026, 12, 8, 11, 0, tzinfo=timezone.utc), State="active")
    row = by_name["capacity block p5"]
    assert row.status == WARN and "ends 2026-12-08 11:30 UTC, in 30 min" in row.reason


def test_each_addon_reports_the_version_eks_would_install_for_the_clusters_kubernetes(aws, moto_clients):
    """Amazon EKS API Reference, DescribeAddonVersions: per add-on version, `compatibilities` lists
    the cluster versions it runs on and whether it is the `defaultVersion` EKS installs for one."""
    by_name, _ = run_prod(moto_clients)
    for name in ("vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent", "aws-fsx-csi-driver",
                 "amazon-cloudwatch-observability", "eks-node-monitoring-agent"):
        row = by_name[f"add-on {name}"]
        assert row.status == PASS, row.reason
        assert row.reason.startswith("EKS installs v1.9.0-eksbuild.2 (its default for Kubernetes 1.35)"), row.reason
    assert "configuration accepted by its schema" in by_name["add-on aws-fsx-csi-driver"].reason


def test_a_pin_eks_offers_for_the_clusters_version_passes(aws, moto_clients, tmp_path):
    context = write_context(tmp_path, "prod", addonVersions={"coredns": "v1.8.1-eksbuild.1"})
    by_name, _ = run_prod(moto_clients, context=context, addons=addons_answering(load("prod", context)))
    row = by_name["add-on coredns"]
    assert row.status == PASS
    assert row.reason == "pinned v1.8.1-eksbuild.1 is offered for Kubernetes 1.35 (EKS default v1.9.0-eksbuild.2)"


def test_a_pin_eks_does_not_offer_for_the_clusters_version_fails_naming_what_it_offers(aws, moto_clients, tmp_path):
    context = write_context(tmp_path, "prod", addonVersions={"vpc-cni": "v1.7.0-eksbuild.1"})
    by_name, rows = run_prod(moto_clients, context=context, addons=addons_answering(load("prod", context)))
    row = by_name["add-on vpc-cni"]
    assert row.status == FAIL
    assert row.reason == ("pinned v1.7.0-eksbuild.1 is not offered for Kubernetes 1.35; offered: v1.9.0-eksbuild.2, "
                          "v1.9.0-eksbuild.1, v1.8.1-eksbuild.1 (EKS default v1.9.0-eksbuild.2)")
    assert checks.failed(rows)


def test_an_addon_not_offered_for_the_clusters_version_fails(aws, moto_clients):
    env = load("prod")
    by_name, _ = run_prod(moto_clients, addons=addons_answering(env, offered={"eks-node-monitoring-agent": []}))
    row = by_name["add-on eks-node-monitoring-agent"]
    assert row.status == FAIL and row.reason == "not offered for Kubernetes 1.35 in us-east-1"


def test_configuration_the_addons_schema_rejects_fails_naming_the_field(aws, moto_clients):
    """Amazon EKS API Reference, DescribeAddonConfiguration: `configurationSchema` is the JSON
    schema CreateAddon validates configurationValues against; a value outside it fails the deploy."""
    strict = {"$schema": "https://json-schema.org/draft/2019-09/schema", "type": "object",
              "additionalProperties": False, "properties": {
                  "controller": {"type": "object", "additionalProperties": False,
                                 "properties": {"tolerations": {"type": "array"}}},
                  "node": {"type": "object"}}}
    env = load("prod")
    by_name, _ = run_prod(moto_clients, addons=addons_answering(env, schemas={"aws-fsx-csi-driver": strict}))
    row = by_name["add-on aws-fsx-csi-driver"]
    assert row.status == FAIL
    assert row.reason == ("v1.9.0-eksbuild.2 rejects the configuration at controller: Additional properties are "
                          "not allowed ('region' was unexpected)")


def test_addon_calls_the_api_refuses_are_warnings(aws, moto_clients):
    env = load("prod")
    client, stub = stubbed("eks")
    from config.addons import MANAGED_ADDONS
    for _ in MANAGED_ADDONS:
        stub.add_client_error("describe_addon_versions", "AccessDeniedException", "stubbed refusal")
    stub.activate()
    by_name, rows = run_prod(moto_clients, addons=(client, stub))
    assert by_name["add-on coredns"].status == WARN
    assert "not permitted" in by_name["add-on coredns"].reason
    assert not checks.failed(rows)


CONTROL_PLANE_LOGS = "/aws/eks/prod-training/cluster"


def test_a_log_group_a_destroyed_cluster_left_fails_naming_the_command_that_deletes_it(aws, moto_clients):
    """The Cluster stack creates its log groups under fixed names; after `make destroy`, EKS (or
    Fluent Bit) can create one again, and CloudFormation cannot create a log group whose name
    exists: the next deploy would fail once the Network stack is up. A name that merely starts
    like one of them is no leftover."""
    logs = boto3.client("logs", region_name="us-east-1")
    logs.create_log_group(logGroupName=CONTROL_PLANE_LOGS)
    logs.create_log_group(logGroupName="/aws/containerinsights/prod-training/application-archive")
    by_name, rows = run_prod(moto_clients)
    row = by_name["leftover log groups"]
    assert row.status == FAIL, row
    assert CONTROL_PLANE_LOGS in row.reason and "application-archive" not in row.reason
    assert f"aws logs delete-log-group --region us-east-1 --log-group-name {CONTROL_PLANE_LOGS}" in row.reason
    assert checks.failed(rows)


def test_no_leftover_log_group_passes(aws, moto_clients):
    by_name, _ = run_prod(moto_clients)
    assert by_name["leftover log groups"].status == PASS


def test_two_stacks_that_could_be_the_clusters_are_a_warning_not_a_guess(aws, moto_clients):
    cloudformation = boto3.client("cloudformation", region_name="us-east-1")
    for stack in ("Pipeline-prod-Cluster", "Other-prod-Cluster"):
        cloudformation.create_stack(StackName=stack, TemplateBody=json.dumps(
            {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}))
    by_name, _ = run_prod(moto_clients)
    row = by_name["leftover log groups"]
    assert row.status == WARN and "several stacks end in -prod-Cluster" in row.reason, row


def test_a_cluster_stack_whose_change_set_was_never_executed_owns_no_log_group(aws, moto_clients):
    """Both paths deploy through change sets (the pipeline's Prepare, then Deploy; `cdk deploy`): one
    created for a new stack and never executed (a run stopped or superseded between the two, a
    `cdk deploy` that bailed) leaves the stack in REVIEW_IN_PROGRESS, with no template or resources
    (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-describing-stacks.html;
    aws-cdk#7731). Executing one creates the groups, so a leftover group still fails the deploy."""
    boto3.client("cloudformation", region_name="us-east-1").create_change_set(
        StackName="prod-Cluster", ChangeSetName="PipelineChange", ChangeSetType="CREATE",
        TemplateBody=json.dumps({"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}))
    boto3.client("logs", region_name="us-east-1").create_log_group(logGroupName=CONTROL_PLANE_LOGS)
    by_name, _ = run_prod(moto_clients)
    row = by_name["leftover log groups"]
    assert row.status == FAIL and CONTROL_PLANE_LOGS in row.reason, row


@pytest.mark.parametrize("stack", ["prod-Cluster", "Pipeline-prod-Cluster"])
def test_log_groups_of_a_deployed_cluster_stack_are_its_own_not_leftovers(aws, moto_clients, stack):
    """A deploy of a live environment updates the groups its Cluster stack owns, whichever path
    deployed it: the pipeline's stage names its stacks Pipeline-<env>-*, and a row that looked
    only for <env>-Cluster told the user to delete the live cluster's groups."""
    boto3.client("cloudformation", region_name="us-east-1").create_stack(
        StackName=stack, TemplateBody=json.dumps(
            {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}))
    boto3.client("logs", region_name="us-east-1").create_log_group(logGroupName=CONTROL_PLANE_LOGS)
    by_name, _ = run_prod(moto_clients)
    assert by_name["leftover log groups"].status == PASS, by_name["leftover log groups"]
    assert stack in by_name["leftover log groups"].reason
