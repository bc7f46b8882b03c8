"""Preflight: what a 30-minute deploy would trip over, checked in seconds with read-only calls.

Each check yields rows of pass / warn / fail with a reason. A call the API will not answer
(permissions, throttling, an operation the endpoint does not support) is a warn naming why:
preflight must never be the thing that crashes before a deploy.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

import jsonschema

from config import Environment
from config.addons import MANAGED_ADDONS, configuration_values
from config.outputs import CLUSTER_STACK_ID, stack_name
from ops import preflight_capacity as capacity
from ops.aws import AwsClients, api_failure_types, caller_account, explain, paginate
from ops.checks import FAIL, PASS, SKIP, WARN, Check
from ops.errors import OpsError
from ops.stacks import deployed_stack

LEFTOVER_LOG_GROUPS = "leftover log groups"
# A Cluster stack in these states owns no log group yet: one whose first create rolled back is deleted
# by `cdk deploy` and created afresh, and one still in review has a change set (the pipeline's Prepare
# action) that has not run.
_STACK_CREATED_AGAIN = ("ROLLBACK_COMPLETE", "REVIEW_IN_PROGRESS")
# The rows of `make deploy`'s preflight that the pipeline's preflight step skips, each with why. That step
# runs in CodeBuild in the pipeline account, outside every VPC, as the environment's CDK bootstrap lookup
# role (read-only). The names are those the rows have under `make deploy`; "trainingApi" is
# ops/api_switch.py's ROW, not imported: that module renders pods, which this step cannot import.
PIPELINE_SKIPS = (
    ("API endpoint", "whether this machine's public IP reaches the cluster's endpoint matters to whoever runs "
                     "kubectl; the pipeline calls no Kubernetes API from here (its validation runner works "
                     "inside the VPC)"),
    ("cluster admin", "the caller here is the CDK bootstrap lookup role, not someone who will use the cluster; "
                      "the admin roles an access entry names are checked above"),
    ("trainingApi", "counting the old API's runs needs the Kubernetes API, which this step has no access entry "
                    "for (and a private endpoint does not admit)"),
    ("Docker", "the pipeline builds the trainer images in its Assets stage, on a Docker-enabled CodeBuild project"),
    ("AWS CLI", "kubectl's tokens concern the machine that runs kubectl; the pipeline runs none here"),
    ("Node", "the pipeline's Synth step runs the CDK CLI on its own Node.js"),
)


def pipeline_skips(env: Environment) -> list[Check]:
    """PIPELINE_SKIPS as skip rows; the trainingApi row says what covers the switch in `env`'s deploy."""
    rows = []
    for name, why in PIPELINE_SKIPS:
        if name == "trainingApi":
            # stacks/workloads.py gives only a removalPolicy destroy environment the drain.
            why += ("; in the deploy the training drain refuses the switch while such runs exist, and rolls it "
                    "back (cdk_constructs/training_drain.py)" if not env.retain else
                    f"; a removalPolicy retain environment has no training drain, so nothing in the deploy "
                    f"refuses it: before you push a trainingApi change, run `python -m ops preflight --env "
                    f"{env.name}` where the cluster's API is reachable")
        rows.append(Check(name, SKIP, f"not checked in the pipeline: {why}"))
    return rows


def run(env: Environment, aws: AwsClients, now: datetime | None = None) -> list[Check]:
    """All checks in order. Raises OpsError only when there are no credentials at all."""
    account = caller_account(aws.sts)
    rows = [_account_row(env, account)]
    now = now or datetime.now(timezone.utc)
    zone_ids: dict[str, str] = {}
    blocks: dict[str, dict] = {}  # capacity-block group -> its reservation, as capacity.reservations reads it
    steps: list[tuple[str, Callable[[], Iterable[Check]]]] = [
        ("region", lambda: _region(env, aws)),
        ("training AZ", lambda: _zones(env, aws, zone_ids)),
        ("instance offerings", lambda: _offerings(env, aws)),
        ("On-Demand vCPU quotas", lambda: capacity.vcpu_quotas(env, aws)),
        ("capacity reservations", lambda: capacity.reservations(env, aws, zone_ids, blocks)),
        ("capacity blocks", lambda: capacity.capacity_blocks(env, blocks, now)),
        ("EKS quotas", lambda: capacity.eks_quotas(env, aws)),
        ("EKS add-ons", lambda: _addons(env, aws)),
        ("FSx quota", lambda: capacity.fsx_quota(env, aws)),
        ("VPC and EIP quotas", lambda: capacity.network_quotas(env, aws)),
        (LEFTOVER_LOG_GROUPS, lambda: _leftover_log_groups(env, aws)),
    ]
    return rows + guarded(steps)


def guarded(steps: list[tuple[str, Callable[[], Iterable[Check]]]]) -> list[Check]:
    """Each step's rows; a step the API will not answer is one warn row naming why."""
    rows: list[Check] = []
    for name, step in steps:
        try:
            rows.extend(step())
        except api_failure_types() as err:
            rows.append(Check(name, WARN, f"could not check: {explain(err)}"))
    return rows


def run_for_deploy(env: Environment, aws: AwsClients, *, checkip_url: str | None = None, path: str | None = None,
                   now: datetime | None = None, connect: Callable[[], Any] | None = None,
                   abandon_file_system: str | None = None) -> list[Check]:
    """What `make deploy` runs: the account checks above, then who can reach and administer the
    cluster (ops/access.py), whether the deploy would switch a live cluster's training API under
    its runs (ops/api_switch.py; `connect` builds the kubernetes ApiClient, None: not checked),
    whether the deployed file system, cluster and VPC can take the configuration (ops/redeploy.py;
    `abandon_file_system` the file system the user lets it replace), then the bootstrap and this
    machine's tools (ops/machine.py)."""
    from ops import access, api_switch, machine, redeploy

    rows = run(env, aws, now)
    account = caller_account(aws.sts)
    switch = [("training API", lambda: api_switch.rows(env, aws.eks, connect))] if connect else []
    return rows + guarded([
        ("cluster access", lambda: access.checks(env, aws, checkip_url)),
        *switch,
        *redeploy.steps(env, aws, abandon_file_system),
        ("CDK bootstrap", lambda: [machine.bootstrap_row(env, aws, account)]),
    ]) + machine.tool_rows(path)


def run_for_pipeline(env: Environment, aws: AwsClients, now: datetime | None = None) -> list[Check]:
    """What the pipeline's preflight step runs before it deploys the environment (stacks/pipeline.py):
    `run_for_deploy`'s rows that a read-only role in the environment's account can judge, then
    PIPELINE_SKIPS as skip rows. A file system replacement fails: nobody is there to acknowledge it."""
    from ops import access, machine, redeploy

    rows = run(env, aws, now)
    account = caller_account(aws.sts)
    return rows + guarded([
        ("admin roles", lambda: access.admin_role_rows(env, aws, access.caller(aws))),
        *redeploy.steps(env, aws, pipeline=True),
        ("CDK bootstrap", lambda: [machine.bootstrap_row(env, aws, account)]),
    ]) + pipeline_skips(env)


def _account_row(env: Environment, account: str) -> Check:
    if account == env.account:
        return Check("credentials", PASS, f"account {account} matches environments.{env.name}.account")
    return Check("credentials", FAIL,
                 f"credentials are for account {account}, but environments.{env.name}.account is {env.account}")


def _region(env: Environment, aws: AwsClients) -> list[Check]:
    regions = aws.ec2.describe_regions(AllRegions=True, RegionNames=[env.region])["Regions"]
    if not regions:
        return [Check("region", FAIL, f"{env.region} is not a region this account can see")]
    status = regions[0].get("OptInStatus", "opt-in-not-required")
    if status == "not-opted-in":
        return [Check("region", FAIL, f"{env.region} is an opt-in region this account has not enabled")]
    return [Check("region", PASS, f"{env.region} is enabled ({status})")]


def _zones(env: Environment, aws: AwsClients, zone_ids: dict[str, str]) -> list[Check]:
    zones = aws.ec2.describe_availability_zones(AllAvailabilityZones=True)["AvailabilityZones"]
    by_name = {z["ZoneName"]: z for z in zones}
    zone_ids.update({name: z["ZoneId"] for name, z in by_name.items()})
    missing = [az for az in env.availability_zones if az not in by_name]
    training = by_name.get(env.training_availability_zone)
    rows = []
    if training is None:
        rows.append(Check("training AZ", FAIL,
                          f"{env.training_availability_zone} does not exist in {env.region} for this account"))
    elif training.get("State") != "available":
        rows.append(Check("training AZ", FAIL,
                          f"{training['ZoneName']} ({training['ZoneId']}) is {training.get('State')}"))
    else:
        # AZ names are shuffled per account; capacity and reservations follow the ID.
        rows.append(Check("training AZ", PASS, f"{training['ZoneName']} is {training['ZoneId']} in this account"))
    if missing:
        rows.append(Check("availability zones", FAIL, f"not in this account's {env.region}: {', '.join(missing)}"))
    else:
        ids = ", ".join(f"{az}={by_name[az]['ZoneId']}" for az in env.availability_zones)
        rows.append(Check("availability zones", PASS, ids))
    return rows


def _offerings(env: Environment, aws: AwsClients) -> list[Check]:
    system = env.system_nodegroup
    # The system group spans every AZ; training groups live only in the training AZ.
    wanted = [("system", system.instance_type_name, env.availability_zones)] + [
        (g.name, g.instance_type_name, (env.training_availability_zone,)) for g in env.training_nodegroups
    ]
    types = sorted({t for _, t, _ in wanted})
    offers = paginate(aws.ec2, "describe_instance_type_offerings", "InstanceTypeOfferings",
                      LocationType="availability-zone",
                      Filters=[{"Name": "instance-type", "Values": types},
                               {"Name": "location", "Values": list(env.availability_zones)}])
    offered = {(o["InstanceType"], o["Location"]) for o in offers}
    rows = []
    for group, itype, zones in wanted:
        absent = [z for z in zones if (itype, z) not in offered]
        name = f"offering {group}"
        if absent:
            rows.append(Check(name, FAIL, f"{itype} is not offered in {', '.join(absent)}"))
        else:
            rows.append(Check(name, PASS, f"{itype} is offered in {', '.join(zones)}"))
    return rows


def _addons(env: Environment, aws: AwsClients) -> list[Check]:
    """Per add-on: the version EKS would install for the cluster's Kubernetes version, whether a
    pin is offered for it, and whether the add-on's configuration schema accepts our values."""
    configured = configuration_values(env)
    rows = []
    for name in MANAGED_ADDONS:
        row = f"add-on {name}"
        try:
            rows.append(_addon_row(row, env, aws, name, configured.get(name)))
        except api_failure_types() as err:
            rows.append(Check(row, WARN, f"could not check: {explain(err)}"))
    return rows


def _addon_row(row: str, env: Environment, aws: AwsClients, name: str, configuration: dict | None) -> Check:
    k8s = env.kubernetes_version
    # Amazon EKS API Reference, DescribeAddonVersions: each version lists the cluster versions it
    # is compatible with, and whether it is the default EKS installs for each.
    found = paginate(aws.addons, "describe_addon_versions", "addons", addonName=name, kubernetesVersion=k8s)
    offered: list[str] = []
    default = None
    for version in (v for addon in found for v in addon.get("addonVersions", [])):
        for compatibility in version.get("compatibilities", []):
            if compatibility.get("clusterVersion") == k8s:
                offered.append(version["addonVersion"])
                if compatibility.get("defaultVersion"):
                    default = version["addonVersion"]
    if not offered:
        return Check(row, FAIL, f"not offered for Kubernetes {k8s} in {env.region}")
    default = default or offered[0]
    pin = env.addon_version(name)
    if pin and pin not in offered:
        return Check(row, FAIL, f"pinned {pin} is not offered for Kubernetes {k8s}; offered: {', '.join(offered)} "
                                f"(EKS default {default})")
    reason = (f"pinned {pin} is offered for Kubernetes {k8s} (EKS default {default})" if pin
              else f"EKS installs {default} (its default for Kubernetes {k8s})")
    if configuration is None:
        return Check(row, PASS, reason)
    installed = pin or default
    schema = aws.addons.describe_addon_configuration(addonName=name, addonVersion=installed)["configurationSchema"]
    problem = _schema_problem(json.loads(schema), configuration)
    if problem:
        return Check(row, FAIL, f"{installed} rejects the configuration at {problem}")
    return Check(row, PASS, f"{reason}; configuration accepted by its schema")


def _schema_problem(schema: dict, values: dict) -> str | None:
    """Where and why `values` break `schema` (the JSON schema CreateAddon validates them against)."""
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(values))
    if error is None:
        return None
    where = ".".join(str(p) for p in error.absolute_path) or "the top level"
    return f"{where}: {error.message}"


def _leftover_log_groups(env: Environment, aws: AwsClients) -> list[Check]:
    """The Cluster stack creates the cluster's log groups under fixed names, and CloudFormation
    cannot create a log group whose name exists. After a destroy, EKS's service-linked role can
    create the control plane's group again for its last events, and Fluent Bit its Container
    Insights groups: the next deploy would fail on them once the Network stack is up. While the
    Cluster stack exists they are its own."""
    try:  # <env>-Cluster on both deploy paths, or an older release's name that ends in it
        stack = deployed_stack(aws.cloudformation, env, CLUSTER_STACK_ID)
    except OpsError as err:
        return [Check(LEFTOVER_LOG_GROUPS, WARN, f"could not tell which stack is the cluster's ({err})")]
    if stack is not None and stack["StackStatus"] not in _STACK_CREATED_AGAIN:
        return [Check(LEFTOVER_LOG_GROUPS, PASS, f"the cluster's log groups are stack {stack['StackName']}'s own")]
    creator = stack["StackName"] if stack is not None else stack_name(env.name, CLUSTER_STACK_ID)
    left = [name for name in env.cluster_log_group_names
            if any(g["logGroupName"] == name
                   for g in paginate(aws.logs, "describe_log_groups", "logGroups", logGroupNamePrefix=name))]
    if not left:
        return [Check(LEFTOVER_LOG_GROUPS, PASS, f"none of the {len(env.cluster_log_group_names)} log groups "
                                                 f"stack {creator} creates exists yet")]
    deletes = "; ".join(f"aws logs delete-log-group --region {env.region} --log-group-name {name}" for name in left)
    return [Check(LEFTOVER_LOG_GROUPS, FAIL,
                  f"{', '.join(left)} left by an earlier cluster {env.cluster_name}: CloudFormation cannot create "
                  f"a log group that exists, so the deploy would fail there; export what you need, then: {deletes}")]
