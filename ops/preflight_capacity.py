"""Preflight's rows for what the account can run the environment on: On-Demand vCPU quotas per
instance family, capacity reservations and capacity blocks in the training AZ, and the EKS, FSx,
VPC and Elastic IP quotas a deploy consumes. ops/preflight.py runs them in order, guarded.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from config import Environment
from config.environment import FSX_DEPLOYMENT_TYPE
from config.instance_types import INSTANCE_TYPES
from ops.aws import AwsClients, api_failure_types, error_code, explain, paginate
from ops.capacity_blocks import EKS_SCALEDOWN_BEFORE_END, utc
from ops.checks import FAIL, PASS, WARN, Check
from ops.quotas import QuotaReading, quota_row, read_quota

# Service Quotas codes (service code, quota code). On-Demand vCPU buckets are per instance family.
VCPU_QUOTA_CODES = {"P": "L-417A185B", "G": "L-DB2E81BA", "Standard": "L-1216C47A"}
EKS_CLUSTERS = ("eks", "L-1194D53C")
EKS_NODEGROUPS_PER_CLUSTER = ("eks", "L-6D54EA21")
EKS_NODES_PER_NODEGROUP = ("eks", "L-BD136A63")
FSX_PERSISTENT_2_STORAGE = ("fsx", "L-8F1B9C74")
VPCS_PER_REGION = ("vpc", "L-F678F1CE")
EIPS_PER_REGION = ("ec2", "L-0263D0A3")
# The network stack runs one NAT gateway per AZ, each holding one Elastic IP.
NAT_GATEWAYS_PER_AZ = 1
USABLE_RESERVATION_STATES = ("active", "scheduled")
# A block this close to its end leaves no time for a deploy and a job (EKS scales it to 0 forty
# minutes before the end, EC2 stops instances thirty minutes before).
BLOCK_ENDING_SOON = timedelta(hours=1)


def vcpu_quotas(env: Environment, aws: AwsClients) -> list[Check]:
    needed: dict[str, int] = {}
    groups = [(env.system_nodegroup.instance_type, env.system_nodegroup.max_size)] + [
        (g.instance_type, g.max_size) for g in env.training_nodegroups
    ]
    for itype, max_size in groups:
        needed[itype.quota_class] = needed.get(itype.quota_class, 0) + itype.vcpus * max_size
    in_use, usage_note = _running_vcpus(aws)
    rows = []
    for klass in ("P", "G", "Standard"):
        if klass not in needed:
            continue
        name = f"vCPU quota {klass}"
        try:
            reading = read_quota(aws.quotas, "ec2", VCPU_QUOTA_CODES[klass])
        except api_failure_types() as err:
            rows.append(Check(name, WARN, f"could not read quota: {explain(err)}"))
            continue
        rows.append(_vcpu_row(name, needed[klass], reading, in_use.get(klass, 0) if in_use is not None else None,
                              usage_note))
    return rows


def _vcpu_row(name: str, need: int, quota: QuotaReading, in_use: int | None, usage_note: str) -> Check:
    base = f"max sizes need {need} vCPUs, quota {quota.value:g} ({quota.source})"
    if need > quota.value:
        return Check(name, FAIL, f"{base}: request an increase of {need - quota.value:g}")
    if in_use is None:
        return Check(name, WARN, f"{base}; running vCPUs unknown ({usage_note})")
    # Running instances (this environment's own nodes included, on a re-deploy) share the quota.
    if need + in_use > quota.value:
        return Check(name, WARN, f"{base}, but {in_use} already run: the groups cannot all reach maxSize")
    return Check(name, PASS, f"{base}, {in_use} in use")


def _running_vcpus(aws: AwsClients) -> tuple[dict[str, int] | None, str]:
    try:
        reservations = paginate(aws.ec2, "describe_instances", "Reservations",
                                Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
    except api_failure_types() as err:
        return None, explain(err)
    used: dict[str, int] = {}
    for instance in (i for r in reservations for i in r.get("Instances", [])):
        klass = _quota_class_of(instance["InstanceType"])
        cpu = instance.get("CpuOptions") or {}
        vcpus = cpu.get("CoreCount", 0) * cpu.get("ThreadsPerCore", 1)
        if not vcpus and instance["InstanceType"] in INSTANCE_TYPES:
            vcpus = INSTANCE_TYPES[instance["InstanceType"]].vcpus
        if klass:
            used[klass] = used.get(klass, 0) + vcpus
    return used, ""


def _quota_class_of(instance_type: str) -> str | None:
    """The On-Demand bucket of any EC2 type, ours or not; None for buckets we do not check."""
    family = instance_type.split(".", 1)[0]
    if family.startswith(("inf", "trn", "dl", "hpc", "vt", "u-")):
        return None
    if family[0] == "p":
        return "P"
    if family[0] == "g":
        return "G"
    return "Standard" if family[0] in "acdhimrtz" else None


def reservations(env: Environment, aws: AwsClients, zone_ids: dict[str, str], blocks: dict[str, dict]) -> list[Check]:
    rows = []
    for group in env.gpu_nodegroups:
        if not group.capacity.is_reserved:
            continue
        name = f"reservation {group.name}"
        rid = group.capacity.reservation_id
        try:
            found = aws.reservations.describe_capacity_reservations(CapacityReservationIds=[rid])
        except api_failure_types() as err:
            if (error_code(err) or "").startswith("InvalidCapacityReservationId"):
                rows.append(Check(name, FAIL, f"{rid} does not exist in {env.region} for this account"))
            else:
                rows.append(Check(name, WARN, f"could not check {rid}: {explain(err)}"))
            continue
        items = found.get("CapacityReservations", [])
        if not items:
            rows.append(Check(name, FAIL, f"{rid} does not exist in {env.region} for this account"))
            continue
        rows.append(_reservation_row(name, env, group, items[0], zone_ids))
        if group.capacity.type == "capacityBlock":
            blocks[group.name] = items[0]
    return rows


def capacity_blocks(env: Environment, blocks: dict[str, dict], now: datetime) -> list[Check]:
    """When each capacity block starts and ends, and what brings its group's nodes up (EKS User
    Guide, capacity-blocks-mng.html: nothing launches before the start; EKS scales the group to 0
    forty minutes before the end)."""
    return [_capacity_block_row(env, name, cr, now) for name, cr in blocks.items()]


def _capacity_block_row(env: Environment, group: str, cr: dict, now: datetime) -> Check:
    name, rid = f"capacity block {group}", cr["CapacityReservationId"]
    start, end = cr.get("StartDate"), cr.get("EndDate")
    if not start or not end:
        return Check(name, WARN, f"{rid}: the API gave no start and end date")
    if end <= now:
        return Check(name, FAIL, f"{rid}: ended {utc(end)}; buy a new block and put its id in capacity.reservationId")
    if end - now <= BLOCK_ENDING_SOON:
        return Check(name, WARN, f"{rid}: ends {utc(end)}, in {int((end - now).total_seconds() // 60)} min; "
                                 "too late to start a job")
    started = "started" if start <= now else "starts"
    return Check(name, PASS, f"{rid}: {started} {utc(start)}, ends {utc(end)} ({_duration(end - start)}); "
                             f"EKS scales {group} to 0 at {utc(end - EKS_SCALEDOWN_BEFORE_END)}; after the deploy run "
                             f"`python -m ops capacity-block schedule --env {env.name}` so nodes join at the start")


def _duration(span: timedelta) -> str:
    hours = int(span.total_seconds() // 3600)
    days, hours = divmod(hours, 24)
    return " ".join(part for part in (f"{days} d" if days else "", f"{hours} h" if hours else "") if part) or "< 1 h"


def _reservation_row(name: str, env: Environment, group: Any, cr: dict, zone_ids: dict[str, str]) -> Check:
    rid, state = cr["CapacityReservationId"], cr.get("State", "unknown")
    problems = []
    if state not in USABLE_RESERVATION_STATES:
        problems.append(f"state is {state} (needs active or scheduled)")
    training_az = env.training_availability_zone
    training_id = zone_ids.get(training_az)
    in_zone = cr.get("AvailabilityZone") == training_az or (
        training_id is not None and cr.get("AvailabilityZoneId") == training_id)
    if not in_zone:
        problems.append(f"it is in {cr.get('AvailabilityZone')} ({cr.get('AvailabilityZoneId', '?')}), "
                        f"the training AZ is {training_az} ({training_id or '?'})")
    if cr.get("InstanceType") != group.instance_type_name:
        problems.append(f"it holds {cr.get('InstanceType')}, the group runs {group.instance_type_name}")
    is_block = cr.get("ReservationType") == "capacity-block"
    if group.capacity.type == "capacityBlock" and not is_block:
        problems.append("it is an On-Demand Capacity Reservation, configured as capacityBlock")
    if group.capacity.type == "reserved" and is_block:
        problems.append("it is a capacity block, configured as reserved")
    total = cr.get("TotalInstanceCount", 0)
    if total < group.max_size:
        problems.append(f"it holds {total} instances, maxSize is {group.max_size}")
    if problems:
        return Check(name, FAIL, f"{rid}: " + "; ".join(problems))
    when = f", starts {cr['StartDate']:%Y-%m-%d %H:%M} UTC" if state == "scheduled" and cr.get("StartDate") else ""
    return Check(name, PASS, f"{rid} {state}{when}, {total} x {cr['InstanceType']} in {training_az} "
                             f"({cr.get('AvailableInstanceCount', '?')} available)")


def eks_quotas(env: Environment, aws: AwsClients) -> list[Check]:
    clusters = len(paginate(aws.eks, "list_clusters", "clusters"))
    groups = 1 + len(env.training_nodegroups)
    largest = max([env.system_nodegroup.max_size] + [g.max_size for g in env.training_nodegroups])
    return [
        quota_row("EKS clusters", aws.quotas, EKS_CLUSTERS, need=1, in_use=clusters,
                  what="cluster", note="a re-deploy needs none"),
        quota_row("EKS node groups", aws.quotas, EKS_NODEGROUPS_PER_CLUSTER, need=groups, in_use=0,
                  what="node groups in the cluster"),
        quota_row("EKS nodes/group", aws.quotas, EKS_NODES_PER_NODEGROUP, need=largest, in_use=0,
                  what="nodes in the largest group"),
    ]


def fsx_quota(env: Environment, aws: AwsClients) -> list[Check]:
    systems = paginate(aws.fsx, "describe_file_systems", "FileSystems")
    used = sum(fs.get("StorageCapacity", 0) for fs in systems
               if (fs.get("LustreConfiguration") or {}).get("DeploymentType") == FSX_DEPLOYMENT_TYPE)
    return [quota_row("FSx Lustre storage", aws.quotas, FSX_PERSISTENT_2_STORAGE,
                      need=env.fsx.storage_capacity_gib, in_use=used, what=f"GiB of {FSX_DEPLOYMENT_TYPE}")]


def network_quotas(env: Environment, aws: AwsClients) -> list[Check]:
    vpcs = len(paginate(aws.ec2, "describe_vpcs", "Vpcs"))
    eips = len(aws.ec2.describe_addresses().get("Addresses", []))
    nat = NAT_GATEWAYS_PER_AZ * len(env.availability_zones)
    return [
        quota_row("VPCs", aws.quotas, VPCS_PER_REGION, need=1, in_use=vpcs, what="VPC"),
        quota_row("Elastic IPs", aws.quotas, EIPS_PER_REGION, need=nat, in_use=eips,
                  what="EIPs (one per NAT gateway)"),
    ]
