"""cdk.json context `environments.<name>` parsed into the schema of config/environment.py.

Every rule a user can break is checked here, before any construct exists. A bad value raises
ConfigError naming `environments.<env>.<path>`; app.py turns it into one line and exit code 2.
Node groups (config/nodegroup_parser.py), the network (config/network_parser.py) and data sources
(config/data_source_parser.py) have their own parsers; this module reads the rest and checks what
spans them.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from config.addons import ADDON_VERSION, ADDON_VERSION_EXAMPLE, MANAGED_ADDONS
from config.data_source_parser import parse_data_sources
from config.eks_versions import (
    BY_VERSION as EKS_VERSIONS, CALENDAR_AS_OF, DEFAULT_KUBERNETES_VERSION, SUPPORTED_KUBERNETES_VERSIONS,
    UPGRADE_POLICIES,
)
from config.environment import FSX_THROUGHPUTS, QUEUEING, REMOVAL_POLICIES, TRAINING_APIS, Environment, Fsx
from config.errors import ConfigError
from config.network_parser import parse_availability_zones, parse_endpoint, parse_vpc_cidr
from config.nodegroup_parser import (
    check_dra_kubernetes_version, check_shared_reservations, check_unique_names, parse_nodegroup,
    parse_system_nodegroup,
)
from config.queueing import check_queueing
from config.reader import ObjectReader, check_type, one_of, string_list

# ASCII: AWS ids and names take ASCII digits and letters, where \d and \w would take any script's.
_ACCOUNT = re.compile(r"^\d{12}$", re.ASCII)
_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d$", re.ASCII)
# IAM (CreateRole, CreateUser): a name is 1-64 of [\w+=,.@-] after an optional path that ends in '/'.
_IAM_NAME = r"(?P<path>[\w+=,.@/-]{0,510}/)?(?P<name>[\w+=,.@-]{1,64})"
ROLE_ARN = re.compile(rf"^arn:(?P<partition>aws(-[a-z]+)*):iam::(?P<account>\d{{12}}):(?P<kind>role)/{_IAM_NAME}$",
                      re.ASCII)
_PRINCIPAL_ARN = re.compile(
    rf"^arn:(?P<partition>aws(-[a-z]+)*):iam::(?P<account>\d{{12}}):(?P<kind>role|user)/{_IAM_NAME}$", re.ASCII)
_SESSION_ARN = re.compile(r"^arn:(?P<partition>aws(-[a-z]+)*):sts::(?P<account>\d{12}):assumed-role/(?P<role>[\w+=,.@-]+)/")
# The name prefixes the EKS cluster (CreateCluster: ^[0-9A-Za-z][A-Za-z0-9-_]*, 100 characters) and
# IAM role names (64 characters), so keep it short and plain.
_ENVIRONMENT_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9-]{0,31}$")
# The FSx API's BackupId (pattern ^(backup-[0-9a-f]{8,})$, at most 128 characters).
_BACKUP_ID = re.compile(r"^backup-[0-9a-f]{8,121}$", re.ASCII)
_S3_URL = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?P<prefix>/[^\s]*)?$")


def read_account_and_region(r: ObjectReader) -> tuple[str, str]:
    """Where something deploys: shared by environments and the pipeline."""
    return (r.required_match("account", _ACCOUNT, "a 12-digit AWS account id"),
            r.required_match("region", _REGION, "an AWS region such as us-west-2"))


def parse_environments(raw: Any) -> Mapping[str, Any]:
    if raw is None:
        raise ConfigError("environments", "is missing from cdk.json context")
    if not isinstance(raw, dict) or not raw:
        raise ConfigError("environments", "must be an object mapping environment names to settings")
    return raw


def load_environment(environments: Any, name: str) -> Environment:
    """Parse and validate `environments[name]`; the one way to get an Environment."""
    environments = parse_environments(environments)
    if not isinstance(name, str) or name not in environments:
        raise ConfigError(
            f"environments.{name}",
            f"unknown environment; defined environments are {', '.join(sorted(environments))}",
        )
    return parse_environment(name, environments[name])


def parse_environment(name: str, raw: Any) -> Environment:
    path = f"environments.{name}"
    if not _ENVIRONMENT_NAME.fullmatch(name):
        raise ConfigError(path, f"environment names must be 1-32 letters, digits or '-', starting with a letter, "
                                f"got {name!r}")
    r = ObjectReader(raw, path)

    account, region = read_account_and_region(r)
    azs, training_az = parse_availability_zones(r, region)

    k8s_version = _parse_kubernetes_version(r.optional("kubernetesVersion", str, DEFAULT_KUBERNETES_VERSION),
                                            r.at("kubernetesVersion"))
    upgrade_policy = one_of(r.optional("upgradePolicy", str, "standard"), UPGRADE_POLICIES, r.at("upgradePolicy"))
    addon_versions = _parse_addon_versions(r.optional("addonVersions", dict, {}), r.at("addonVersions"))

    vpc_cidr = parse_vpc_cidr(r.required("vpcCidr", str), r.at("vpcCidr"), len(azs))

    admin_roles = string_list(r.optional("adminRoleArns", list, []), r.at("adminRoleArns"))
    for i, arn in enumerate(admin_roles):
        if not ROLE_ARN.fullmatch(arn):
            raise ConfigError(f"{r.at('adminRoleArns')}[{i}]", f"{_ROLE_ARN_RULE}, got {arn!r}")
        _refuse_other_partition(arn, region, f"{r.at('adminRoleArns')}[{i}]")
        if arn in admin_roles[:i]:
            raise ConfigError(f"{r.at('adminRoleArns')}[{i}]",
                              f"{arn} is already adminRoleArns[{admin_roles.index(arn)}] (a principal can have "
                              "only one access entry); remove one of them")
        _refuse_same_principal(arn, admin_roles[:i], f"{r.at('adminRoleArns')}[{i}]")

    deployer = _parse_deployer(r.optional("deployerPrincipalArn", str), r.at("deployerPrincipalArn"), admin_roles,
                               region)
    endpoint = parse_endpoint(r.required("endpointAccess", dict), r.at("endpointAccess"))
    system = parse_system_nodegroup(r.required("systemNodegroup", dict), r.at("systemNodegroup"))
    gpu_groups = tuple(
        parse_nodegroup(g, f"{r.at('gpuNodegroups')}[{i}]", gpu=True)
        for i, g in enumerate(r.optional("gpuNodegroups", list, []))
    )
    cpu_groups = tuple(
        parse_nodegroup(g, f"{r.at('cpuNodegroups')}[{i}]", gpu=False)
        for i, g in enumerate(r.optional("cpuNodegroups", list, []))
    )
    check_unique_names(gpu_groups, cpu_groups, path)
    check_shared_reservations(gpu_groups, path)
    check_dra_kubernetes_version(gpu_groups, k8s_version, r.at("gpuNodegroups"))
    queueing = one_of(r.optional("queueing", str, "none"), QUEUEING, r.at("queueing"))
    fsx = parse_fsx(r.required("fsx", dict), r.at("fsx"))
    removal = one_of(r.required("removalPolicy", str), REMOVAL_POLICIES, r.at("removalPolicy"))
    data_sources = parse_data_sources(r.optional("dataSources", dict, {}), r.at("dataSources"), fsx=fsx,
                                      cpu_groups=cpu_groups)
    training_api = one_of(r.optional("trainingApi", str, "v1"), TRAINING_APIS, r.at("trainingApi"))
    r.finish()

    env = Environment(
        name=name, account=account, region=region, availability_zones=azs,
        training_availability_zone=training_az, kubernetes_version=k8s_version, vpc_cidr=vpc_cidr,
        admin_role_arns=admin_roles, endpoint_access=endpoint, system_nodegroup=system,
        gpu_nodegroups=gpu_groups, cpu_nodegroups=cpu_groups, fsx=fsx, removal_policy=removal,
        upgrade_policy=upgrade_policy, addon_versions=addon_versions, deployer_principal_arn=deployer,
        data_sources=data_sources, training_api=training_api, queueing=queueing,
    )
    check_queueing(env, r.at("queueing"), training_api=training_api)
    needed, available = env.training_subnet_ips_at_max(), env.private_subnet_capacity
    if needed > available:
        raise ConfigError(
            r.at("vpcCidr"),
            f"{vpc_cidr} gives each of {len(azs)} private subnets /{env.private_subnet_mask} "
            f"({available} usable addresses), but the training AZ needs {needed} with every node group "
            f"at maxSize (node and pod IPs); use a larger CIDR or lower maxSize",
        )
    return env


def _parse_kubernetes_version(version: str, path: str) -> str:
    allowed = ", ".join(SUPPORTED_KUBERNETES_VERSIONS)
    known = EKS_VERSIONS.get(version)
    if version not in SUPPORTED_KUBERNETES_VERSIONS and known and known.end_of_standard_support <= CALENDAR_AS_OF:
        raise ConfigError(path, f"{version} left EKS standard support on {known.end_of_standard_support} "
                                f"(a new cluster would pay extended-support rates); use one of {allowed}")
    if version not in SUPPORTED_KUBERNETES_VERSIONS:
        raise ConfigError(path, f"must be one of {allowed} (the versions in EKS standard support on "
                                f"{CALENDAR_AS_OF}), got {version!r}")
    return version


def _parse_addon_versions(raw: dict, path: str) -> tuple[tuple[str, str], ...]:
    pins = []
    for addon, version in raw.items():
        where = f"{path}.{addon}"
        if addon not in MANAGED_ADDONS:
            raise ConfigError(where, f"not an add-on this cluster installs; pin one of {', '.join(MANAGED_ADDONS)}")
        check_type(version, str, where)
        if not ADDON_VERSION.fullmatch(version):
            raise ConfigError(where, f"must be an EKS add-on version such as {ADDON_VERSION_EXAMPLE}, got {version!r}")
        pins.append((addon, version))
    return tuple(pins)


def _parse_deployer(arn: str | None, path: str, admin_roles: tuple[str, ...], region: str) -> str | None:
    """EKS access entries take an IAM role or user ARN, never an STS session (Amazon EKS API
    Reference, CreateAccessEntry: principalArn), and one principal belongs to one access entry
    (Amazon EKS User Guide, creating-access-entries.html)."""
    if arn is None:
        if not admin_roles:
            raise ConfigError(path, "is required when adminRoleArns is empty: without either, no one can administer "
                                    "the cluster")
        return None
    session = _SESSION_ARN.match(arn)
    if session:
        role = f"arn:{session['partition']}:iam::{session['account']}:role/{session['role']}"
        raise ConfigError(path, f"{arn!r} is an STS session; EKS access entries need the IAM role ARN: use {role} "
                                "(with the role's path, if it has one; `python -m ops whoami` prints it)")
    if not _PRINCIPAL_ARN.fullmatch(arn):
        raise ConfigError(path, f"must be an IAM role or user ARN (arn:aws:iam::<12 digits>:role/<name> or :user/<name>), "
                                f"got {arn!r}")
    _refuse_other_partition(arn, region, path)
    if arn in admin_roles:
        raise ConfigError(path, f"{arn} is already in adminRoleArns (a principal can have only one access entry); "
                                "remove one of them")
    _refuse_same_principal(arn, admin_roles, path)
    return arn


_ROLE_ARN_RULE = ("must be an IAM role ARN (arn:aws:iam::<12 digits>:role/<name> or :role/<path>/<name>, the name "
                  "1-64 letters, digits or +=,.@_-)")


def _region_partition(region: str) -> str | None:
    """The partition of `region`'s ARNs: aws-cn in the China Regions (AWS General Reference, "ARNs for
    Amazon Web Services in China"), aws-us-gov in GovCloud (US) (GovCloud User Guide,
    using-govcloud-arns.html), aws in the standard Regions; None for the isolated Regions, left
    unchecked."""
    if region.startswith("cn-"):
        return "aws-cn"
    if "-gov-" in region:
        return "aws-us-gov"
    return None if "-iso" in region else "aws"


def _refuse_other_partition(arn: str, region: str, path: str) -> None:
    """An IAM principal lives in one partition, and the cluster's access entries in the region's."""
    partition, expected = arn.split(":")[1], _region_partition(region)
    if expected and partition != expected:
        raise ConfigError(path, f"{arn} is in partition {partition}, but region {region} is in partition {expected}: "
                                f"use arn:{expected}:iam::... (an IAM principal belongs to one partition)")


def _principal_key(arn: str) -> tuple[str, ...]:
    """What IAM tells principals apart by: IAM names are unique per account and kind whatever their
    case, and the path is not part of the name (IAM User Guide, reference_iam-quotas.html and
    reference_identifiers.html)."""
    m = _PRINCIPAL_ARN.fullmatch(arn)
    return (m["partition"], m["account"], m["kind"], m["name"].lower()) if m else (arn,)


def _refuse_same_principal(arn: str, admin_roles: tuple[str, ...], path: str) -> None:
    """Two ARNs of one principal make two access entries for it, and EKS refuses the second at deploy
    ("An IAM principal can't be included in more than one access entry", creating-access-entries.html)."""
    for i, other in enumerate(admin_roles):
        if other != arn and _principal_key(other) == _principal_key(arn):
            raise ConfigError(path, f"{arn} names the same IAM role as adminRoleArns[{i}] ({other}): role names are "
                                    "unique in an account whatever their case or path, so both name one role at "
                                    "most, and a principal can have only one access entry; keep the ARN `aws iam "
                                    "get-role` prints, once")


def _parse_s3_path(value: str | None, path: str) -> str | None:
    if value is None:
        return None
    match = _S3_URL.fullmatch(value)
    if not match or ".." in match.group("bucket"):
        raise ConfigError(path, f"must be an s3:// URL such as s3://my-bucket/prefix, got {value!r}")
    return value.rstrip("/")


def parse_fsx(raw: dict, path: str) -> Fsx:
    r = ObjectReader(raw, path)
    capacity = r.required("storageCapacityGiB", int)
    if not (capacity == 1200 or (capacity > 0 and capacity % 2400 == 0)):
        raise ConfigError(r.at("storageCapacityGiB"),
                          f"PERSISTENT_2 needs 1200 or a multiple of 2400 GiB, got {capacity}")
    throughput = r.required("throughputPerTiB", int)
    if throughput not in FSX_THROUGHPUTS:
        raise ConfigError(r.at("throughputPerTiB"),
                          f"must be one of {', '.join(map(str, FSX_THROUGHPUTS))} MB/s/TiB, got {throughput}")
    import_path = _parse_s3_path(r.optional("s3ImportPath", str), r.at("s3ImportPath"))
    export_path = _parse_s3_path(r.optional("s3ExportPath", str), r.at("s3ExportPath"))
    backup_id = r.optional("backupId", str)
    if backup_id is not None and not _BACKUP_ID.fullmatch(backup_id):
        raise ConfigError(r.at("backupId"), "must be an FSx backup id: backup- and 8 to 121 lowercase hexadecimal "
                                            "digits, such as backup-0123456789abcdef0 (`aws fsx describe-backups` "
                                            f"lists them), got {backup_id!r}")
    r.finish()
    if import_path and export_path and import_path != export_path and (
        export_path.startswith(import_path + "/") or import_path.startswith(export_path + "/")
    ):
        raise ConfigError(r.at("s3ExportPath"),
                          "must equal s3ImportPath or not overlap it (FSx data repository paths cannot nest)")
    return Fsx(capacity, throughput, import_path, export_path, backup_id)
