"""The typed environment schema, parsed once from cdk.json context `environments.<name>`.

Every rule a user can break is checked here, before any construct exists. A bad value raises
ConfigError naming `environments.<env>.<path>`; app.py turns it into one line and exit code 2.
"""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from config.addons import ADDON_VERSION, ADDON_VERSION_EXAMPLE, MANAGED_ADDONS
from config.cidrs import refuse_every_address
from config.eks_versions import (
    BY_VERSION as EKS_VERSIONS, CALENDAR_AS_OF, DEFAULT_KUBERNETES_VERSION, SUPPORTED_KUBERNETES_VERSIONS,
    UPGRADE_POLICIES,
)
from config.data_sources import DataSource, parse_data_sources
from config.errors import ConfigError
from config.instance_types import CPU_TYPES, GPU_TYPES, INSTANCE_TYPES, InstanceType
from config.kubernetes import RESERVED_NODEGROUP_NAMES
from config.reader import ObjectReader, check_type, one_of, string_list
CAPACITY_TYPES = ("onDemand", "reserved", "capacityBlock")
REMOVAL_POLICIES = ("destroy", "retain")
ENDPOINT_ACCESS_TYPES = ("private", "public")
FSX_THROUGHPUTS = (125, 250, 500, 1000)

_ACCOUNT = re.compile(r"^\d{12}$")
_REGION = re.compile(r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d$")
_ROLE_ARN = re.compile(r"^arn:aws(-[a-z]+)*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")
_PRINCIPAL_ARN = re.compile(r"^arn:aws(-[a-z]+)*:iam::\d{12}:(role|user)/[\w+=,.@/-]{1,512}$")
_SESSION_ARN = re.compile(r"^arn:(?P<partition>aws(-[a-z]+)*):sts::(?P<account>\d{12}):assumed-role/(?P<role>[\w+=,.@-]+)/")
RESERVATION_ID = re.compile(r"^cr-[0-9a-f]{17}$")
_NODEGROUP_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_-]{0,62}$")
# The name prefixes the EKS cluster (CreateCluster: ^[0-9A-Za-z][A-Za-z0-9-_]*, 100 characters) and
# IAM role names (64 characters), so keep it short and plain.
_ENVIRONMENT_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9-]{0,31}$")
_S3_URL = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?P<prefix>/[^\s]*)?$")

# Addresses AWS keeps in every subnet.
AWS_RESERVED_IPS_PER_SUBNET = 5
PUBLIC_SUBNET_MASK = 24


@dataclass(frozen=True)
class Capacity:
    type: str = "onDemand"
    reservation_id: str | None = None

    @property
    def is_reserved(self) -> bool:
        """Capacity that lives in a reservation: it cannot be forced into a placement group."""
        return self.type in ("reserved", "capacityBlock")


@dataclass(frozen=True)
class Nodegroup:
    name: str
    instance_type_name: str
    min_size: int
    max_size: int
    desired_size: int
    capacity: Capacity = Capacity()
    # EKS node auto repair replaces nodes whose health conditions fail (node-health.html).
    auto_repair: bool = True

    @property
    def instance_type(self) -> InstanceType:
        return INSTANCE_TYPES[self.instance_type_name]


@dataclass(frozen=True)
class SystemNodegroup:
    instance_type_name: str
    min_size: int
    max_size: int

    @property
    def instance_type(self) -> InstanceType:
        return INSTANCE_TYPES[self.instance_type_name]


@dataclass(frozen=True)
class EndpointAccess:
    type: str
    public_cidrs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Fsx:
    storage_capacity_gib: int
    throughput_per_tib: int
    s3_import_path: str | None = None
    s3_export_path: str | None = None

    @property
    def throughput_mbps(self) -> float:
        """Aggregate baseline throughput of the file system in MB/s."""
        return self.storage_capacity_gib / 1024 * self.throughput_per_tib


@dataclass(frozen=True)
class Environment:
    name: str
    account: str
    region: str
    availability_zones: tuple[str, ...]
    training_availability_zone: str
    kubernetes_version: str
    vpc_cidr: str
    admin_role_arns: tuple[str, ...]
    endpoint_access: EndpointAccess
    system_nodegroup: SystemNodegroup
    gpu_nodegroups: tuple[Nodegroup, ...]
    cpu_nodegroups: tuple[Nodegroup, ...]
    fsx: Fsx
    removal_policy: str
    upgrade_policy: str = "standard"
    addon_versions: tuple[tuple[str, str], ...] = ()
    data_sources: tuple[DataSource, ...] = ()
    # The identity that runs `cdk deploy`, made a cluster admin too (IAM role or user ARN).
    deployer_principal_arn: str | None = None

    @property
    def admin_principal_arns(self) -> tuple[str, ...]:
        """Every principal the stack gives a cluster-admin access entry."""
        return self.admin_role_arns + ((self.deployer_principal_arn,) if self.deployer_principal_arn else ())

    @property
    def retain(self) -> bool:
        return self.removal_policy == "retain"

    @property
    def cluster_name(self) -> str:
        """The EKS cluster's name, fixed so its log groups can be created before it."""
        return f"{self.name}-training"

    def update_kubeconfig_command(self, role_arn: str | None = None) -> list[str]:
        """The AWS CLI command that writes this cluster's kubeconfig entry; with `role_arn`, kubectl
        assumes that role for each token."""
        command = ["aws", "eks", "update-kubeconfig", "--name", self.cluster_name, "--region", self.region]
        return command + (["--role-arn", role_arn] if role_arn else [])

    def addon_version(self, addon: str) -> str | None:
        """The pinned version of a managed add-on; None leaves the choice to EKS."""
        return dict(self.addon_versions).get(addon)

    @property
    def training_nodegroups(self) -> tuple[Nodegroup, ...]:
        return self.gpu_nodegroups + self.cpu_nodegroups

    def data_source(self, name: str) -> DataSource:
        for source in self.data_sources:
            if source.name == name:
                return source
        raise KeyError(name)

    def nodegroup(self, name: str) -> Nodegroup:
        for group in self.training_nodegroups:
            if group.name == name:
                return group
        raise KeyError(name)

    @property
    def private_subnet_mask(self) -> int:
        return private_subnet_mask(self.vpc_cidr, len(self.availability_zones))

    @property
    def private_subnet_capacity(self) -> int:
        """Usable addresses in one private subnet (the training AZ's)."""
        return 2 ** (32 - self.private_subnet_mask) - AWS_RESERVED_IPS_PER_SUBNET

    def training_subnet_ips_at_max(self) -> int:
        """Addresses the training subnet needs with every group at maxSize.

        The system group spans AZs but is counted whole here: all of it may land in one AZ.
        """
        system = self.system_nodegroup
        return system.max_size * system.instance_type.ips_per_node + sum(
            g.max_size * g.instance_type.ips_per_node for g in self.training_nodegroups
        )


def private_subnet_mask(vpc_cidr: str, az_count: int) -> int:
    """Private subnets share the first half of the VPC evenly, one per AZ."""
    prefix = ipaddress.ip_network(vpc_cidr).prefixlen
    return prefix + 1 + math.ceil(math.log2(az_count))


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
    if name not in environments:
        raise ConfigError(
            f"environments.{name}",
            f"unknown environment; defined environments are {', '.join(sorted(environments))}",
        )
    return parse_environment(name, environments[name])


def parse_environment(name: str, raw: Any) -> Environment:
    path = f"environments.{name}"
    if not _ENVIRONMENT_NAME.match(name):
        raise ConfigError(path, f"environment names must be 1-32 letters, digits or '-', starting with a letter, "
                                f"got {name!r}")
    r = ObjectReader(raw, path)

    account, region = read_account_and_region(r)

    azs = string_list(r.required("availabilityZones", list), r.at("availabilityZones"))
    if len(azs) < 2:
        raise ConfigError(r.at("availabilityZones"),
                          f"needs at least 2 zones (the EKS control plane spans two), got {len(azs)}")
    az_pattern = re.compile(rf"^{re.escape(region)}[a-z]$")
    for i, az in enumerate(azs):
        if not az_pattern.match(az):
            raise ConfigError(f"{r.at('availabilityZones')}[{i}]",
                              f"{az!r} is not a zone of region {region} (expected {region}a, {region}b, ...)")
    if len(set(azs)) != len(azs):
        raise ConfigError(r.at("availabilityZones"), "lists a zone twice")
    training_az = r.required("trainingAvailabilityZone", str)
    if training_az not in azs:
        raise ConfigError(r.at("trainingAvailabilityZone"),
                          f"{training_az!r} must be one of availabilityZones ({', '.join(azs)})")

    k8s_version = _parse_kubernetes_version(r.optional("kubernetesVersion", str, DEFAULT_KUBERNETES_VERSION),
                                            r.at("kubernetesVersion"))
    upgrade_policy = one_of(r.optional("upgradePolicy", str, "standard"), UPGRADE_POLICIES, r.at("upgradePolicy"))
    addon_versions = _parse_addon_versions(r.optional("addonVersions", dict, {}), r.at("addonVersions"))

    vpc_cidr = _parse_vpc_cidr(r.required("vpcCidr", str), r.at("vpcCidr"), len(azs))

    admin_roles = string_list(r.optional("adminRoleArns", list, []), r.at("adminRoleArns"))
    for i, arn in enumerate(admin_roles):
        if not _ROLE_ARN.match(arn):
            raise ConfigError(f"{r.at('adminRoleArns')}[{i}]",
                              f"must be an IAM role ARN (arn:aws:iam::<12 digits>:role/<name>), got {arn!r}")

    deployer = _parse_deployer(r.optional("deployerPrincipalArn", str), r.at("deployerPrincipalArn"), admin_roles)
    endpoint = _parse_endpoint(r.required("endpointAccess", dict), r.at("endpointAccess"))
    system = _parse_system_nodegroup(r.required("systemNodegroup", dict), r.at("systemNodegroup"))
    gpu_groups = tuple(
        _parse_nodegroup(g, f"{r.at('gpuNodegroups')}[{i}]", gpu=True)
        for i, g in enumerate(r.optional("gpuNodegroups", list, []))
    )
    cpu_groups = tuple(
        _parse_nodegroup(g, f"{r.at('cpuNodegroups')}[{i}]", gpu=False)
        for i, g in enumerate(r.optional("cpuNodegroups", list, []))
    )
    _check_unique_names(gpu_groups, cpu_groups, path)
    fsx = _parse_fsx(r.required("fsx", dict), r.at("fsx"))
    removal = one_of(r.required("removalPolicy", str), REMOVAL_POLICIES, r.at("removalPolicy"))
    data_sources = parse_data_sources(r.optional("dataSources", dict, {}), r.at("dataSources"), fsx=fsx,
                                      cpu_groups=cpu_groups)
    r.finish()

    env = Environment(
        name=name, account=account, region=region, availability_zones=azs,
        training_availability_zone=training_az, kubernetes_version=k8s_version, vpc_cidr=vpc_cidr,
        admin_role_arns=admin_roles, endpoint_access=endpoint, system_nodegroup=system,
        gpu_nodegroups=gpu_groups, cpu_nodegroups=cpu_groups, fsx=fsx, removal_policy=removal,
        upgrade_policy=upgrade_policy, addon_versions=addon_versions, deployer_principal_arn=deployer,
        data_sources=data_sources,
    )
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
        if not ADDON_VERSION.match(version):
            raise ConfigError(where, f"must be an EKS add-on version such as {ADDON_VERSION_EXAMPLE}, got {version!r}")
        pins.append((addon, version))
    return tuple(pins)


def _parse_vpc_cidr(value: str, path: str, az_count: int) -> str:
    try:
        net = ipaddress.IPv4Network(value, strict=True)
    except ValueError:
        raise ConfigError(path, f"must be an IPv4 CIDR block such as 10.0.0.0/16, got {value!r}") from None
    if not 16 <= net.prefixlen <= 24:
        raise ConfigError(path, f"prefix must be between /16 and /24 (AWS VPC limits), got /{net.prefixlen}")
    if not net.is_private:
        raise ConfigError(path, f"must be a private (RFC 1918) range, got {value}")
    # Public subnets take /24 each from the second half; both halves must fit.
    if private_subnet_mask(value, az_count) > 27 or az_count * 2 ** (32 - PUBLIC_SUBNET_MASK) > net.num_addresses // 2:
        raise ConfigError(path, f"/{net.prefixlen} is too small for {az_count} zones; use /20 or larger")
    return value


def _parse_deployer(arn: str | None, path: str, admin_roles: tuple[str, ...]) -> str | None:
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
    if not _PRINCIPAL_ARN.match(arn):
        raise ConfigError(path, f"must be an IAM role or user ARN (arn:aws:iam::<12 digits>:role/<name> or :user/<name>), "
                                f"got {arn!r}")
    if arn in admin_roles:
        raise ConfigError(path, f"{arn} is already in adminRoleArns (a principal can have only one access entry); "
                                "remove one of them")
    return arn


def _parse_endpoint(raw: dict, path: str) -> EndpointAccess:
    r = ObjectReader(raw, path)
    kind = one_of(r.required("type", str), ENDPOINT_ACCESS_TYPES, r.at("type"))
    cidrs = string_list(r.optional("publicCidrs", list, []), r.at("publicCidrs"))
    r.finish()
    if kind == "private" and cidrs:
        raise ConfigError(r.at("publicCidrs"), "is only allowed with type public")
    if kind == "public" and not cidrs:
        raise ConfigError(r.at("publicCidrs"),
                          "is required with type public: list the CIDR blocks allowed to reach the API "
                          "(0.0.0.0/0 is not accepted)")
    networks = []
    for i, cidr in enumerate(cidrs):
        try:
            net = ipaddress.IPv4Network(cidr, strict=True)
        except ValueError:
            raise ConfigError(f"{r.at('publicCidrs')}[{i}]", f"must be an IPv4 CIDR block, got {cidr!r}") from None
        if net.prefixlen == 0:
            raise ConfigError(f"{r.at('publicCidrs')}[{i}]", "0.0.0.0/0 opens the API to the internet; list your own ranges")
        networks.append(net)
    refuse_every_address(networks, r.at("publicCidrs"))
    return EndpointAccess(kind, cidrs)


def _sizes(r: ObjectReader, with_desired: bool) -> tuple[int, int, int]:
    min_size = r.required("minSize", int)
    max_size = r.required("maxSize", int)
    desired = r.optional("desiredSize", int, min_size) if with_desired else min_size
    for key, value in (("minSize", min_size), ("maxSize", max_size), ("desiredSize", desired)):
        if value < 0:
            raise ConfigError(r.at(key), f"must be 0 or more, got {value}")
    if max_size < 1:
        raise ConfigError(r.at("maxSize"), f"must be at least 1 (EKS node groups need maxSize >= 1), got {max_size}")
    if min_size > max_size:
        raise ConfigError(r.at("minSize"), f"must be <= maxSize ({max_size}), got {min_size}")
    if not min_size <= desired <= max_size:
        raise ConfigError(r.at("desiredSize"), f"must be between minSize ({min_size}) and maxSize ({max_size}), got {desired}")
    return min_size, max_size, desired


def _instance_type(r: ObjectReader, allowed: tuple[str, ...], what: str) -> str:
    name = r.required("instanceType", str)
    if name not in INSTANCE_TYPES:
        raise ConfigError(r.at("instanceType"),
                          f"unknown instance type {name!r}; known {what} types are {', '.join(allowed)}")
    if name not in allowed:
        raise ConfigError(r.at("instanceType"), f"{name} is not a {what} type; use one of {', '.join(allowed)}")
    return name


def _parse_system_nodegroup(raw: dict, path: str) -> SystemNodegroup:
    r = ObjectReader(raw, path)
    instance_type = _instance_type(r, CPU_TYPES, "CPU")
    min_size, max_size, _ = _sizes(r, with_desired=False)
    r.finish()
    if min_size < 2:
        raise ConfigError(r.at("minSize"), f"must be at least 2 so cluster services survive a node loss, got {min_size}")
    return SystemNodegroup(instance_type, min_size, max_size)


def _parse_nodegroup(raw: Any, path: str, *, gpu: bool) -> Nodegroup:
    r = ObjectReader(raw, path)
    name = r.required("name", str)
    if not _NODEGROUP_NAME.match(name):
        raise ConfigError(r.at("name"), f"must be 1-63 letters, digits, '-' or '_', starting with a letter or digit, got {name!r}")
    if name in RESERVED_NODEGROUP_NAMES:
        raise ConfigError(r.at("name"), f"{name!r} is reserved (the system node group carries it); choose another name")
    instance_type = _instance_type(r, GPU_TYPES if gpu else CPU_TYPES, "GPU" if gpu else "CPU")
    min_size, max_size, desired = _sizes(r, with_desired=True)
    capacity = Capacity()
    if gpu:
        capacity = _parse_capacity(r.optional("capacity", dict, {"type": "onDemand"}), r.at("capacity"),
                                   INSTANCE_TYPES[instance_type])
    auto_repair = r.optional("nodeAutoRepair", bool, True)
    r.finish()
    if capacity.type == "capacityBlock":
        _check_capacity_block_sizes(r, min_size, desired)
    return Nodegroup(name, instance_type, min_size, max_size, desired, capacity, auto_repair)


def _check_capacity_block_sizes(r: ObjectReader, min_size: int, desired: int) -> None:
    """A capacity block launches nothing before it starts, EKS updates the group only at desired
    size 0 (capacity-blocks-mng.html), and EKS itself scales it to 0 before the block ends; so the
    template holds 0 and `ops capacity-block schedule` brings nodes up at the start."""
    if min_size != 0:
        raise ConfigError(r.at("minSize"), "must be 0 with capacity type capacityBlock (the group must be able to "
                                           f"rest at 0 before an update and after the block ends), got {min_size}")
    if desired != 0:
        raise ConfigError(r.at("desiredSize"), "must be 0 with capacity type capacityBlock (EKS updates such groups "
                                               "only at desired size 0; `ops capacity-block schedule` brings nodes up "
                                               f"when the block starts), got {desired}")


def _parse_capacity(raw: dict, path: str, instance_type: InstanceType) -> Capacity:
    r = ObjectReader(raw, path)
    kind = one_of(r.required("type", str), CAPACITY_TYPES, r.at("type"))
    reservation = r.optional("reservationId", str)
    r.finish()
    if kind == "onDemand":
        if reservation is not None:
            raise ConfigError(r.at("reservationId"), "is only allowed with type reserved or capacityBlock")
        return Capacity(kind)
    if reservation is None:
        raise ConfigError(r.at("reservationId"), f"is required with type {kind} (cr- followed by 17 hex digits)")
    if not RESERVATION_ID.match(reservation):
        raise ConfigError(r.at("reservationId"), f"must be cr- followed by 17 hex digits, got {reservation!r}")
    if kind == "capacityBlock" and not instance_type.capacity_blocks:
        blocks = ", ".join(n for n, t in INSTANCE_TYPES.items() if t.capacity_blocks)
        raise ConfigError(r.at("type"), f"capacity blocks are sold for {blocks}, not {instance_type.name}")
    return Capacity(kind, reservation)


def _check_unique_names(gpu: tuple[Nodegroup, ...], cpu: tuple[Nodegroup, ...], path: str) -> None:
    seen: dict[str, str] = {}
    for key, groups in (("gpuNodegroups", gpu), ("cpuNodegroups", cpu)):
        for i, group in enumerate(groups):
            where = f"{path}.{key}[{i}].name"
            if group.name in seen:
                raise ConfigError(where, f"{group.name!r} is already used by {seen[group.name]}; names must be unique")
            seen[group.name] = f"{key}[{i}]"


def _parse_s3_path(value: str | None, path: str) -> str | None:
    if value is None:
        return None
    match = _S3_URL.match(value)
    if not match or ".." in match.group("bucket"):
        raise ConfigError(path, f"must be an s3:// URL such as s3://my-bucket/prefix, got {value!r}")
    return value.rstrip("/")


def _parse_fsx(raw: dict, path: str) -> Fsx:
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
    r.finish()
    if import_path and export_path and import_path != export_path and (
        export_path.startswith(import_path + "/") or import_path.startswith(export_path + "/")
    ):
        raise ConfigError(r.at("s3ExportPath"),
                          "must equal s3ImportPath or not overlap it (FSx data repository paths cannot nest)")
    return Fsx(capacity, throughput, import_path, export_path)
