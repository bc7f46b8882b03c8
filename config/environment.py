"""The typed environment schema: what cdk.json context `environments.<name>` becomes.

Frozen dataclasses and what follows from their values (the cluster's name, subnet sizes), no
parsing: config/environment_parser.py builds them from the JSON and checks every rule a user can
break, before any construct exists.
"""

from __future__ import annotations

import ipaddress
import itertools
import math
import re
from dataclasses import dataclass

from config.data_sources import DataSource
from config.instance_types import INSTANCE_TYPES, InstanceType

CAPACITY_TYPES = ("onDemand", "reserved", "capacityBlock")
# How an EFA node group's pods get their EFA interfaces: the EFA device plugin (an extended
# resource) or the EFA DRA driver (aws-dranet: a ResourceClaim). Never both on one node.
EFA_ALLOCATIONS = ("devicePlugin", "dra")
# How a GPU node group's pods get their GPUs: the NVIDIA device plugin (nvidia.com/gpu) or NVIDIA's
# GPU DRA driver (a ResourceClaim, aligned with the EFA claims by PCIe root). Never both on one node.
GPU_ALLOCATIONS = ("devicePlugin", "dra")
# Whether runs wait in a Kueue queue for quota before their pods are created.
QUEUEING = ("none", "kueue")
REMOVAL_POLICIES = ("destroy", "retain")
ENDPOINT_ACCESS_TYPES = ("private", "public")
FSX_THROUGHPUTS = (125, 250, 500, 1000)
# Construct ids of the cluster-admin access entries: ADMIN_ENTRY plus the role's place in
# adminRoleArns, and DEPLOYER_ENTRY for deployerPrincipalArn (Environment.admin_access_entries).
ADMIN_ENTRY = "Admin"
DEPLOYER_ENTRY = "Deployer"
# The file system's deployment type; another one is a new file system (ops/redeploy.py).
FSX_DEPLOYMENT_TYPE = "PERSISTENT_2"
# Which Kubeflow training API runs the presets: v1 is Training Operator 1.9.4 (PyTorchJob), v2 is
# Kubeflow Trainer 2.3.0 (TrainJob on JobSet). README "Training API: v1 or v2" says how to choose.
TRAINING_APIS = ("v1", "v2")
RESERVATION_ID = re.compile(r"^cr-[0-9a-f]{17}$")
# Where Fluent Bit (application, dataplane, host) and the CloudWatch agent (performance) of the
# amazon-cloudwatch-observability add-on write; they create these groups, without expiry or key,
# unless they exist.
CONTAINER_INSIGHTS_LOG_GROUPS = ("application", "dataplane", "host", "performance")

# An environment's EKS cluster is named <env>-training (Environment.cluster_name).
CLUSTER_NAME_SUFFIX = "-training"

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
    efa_allocation: str = "devicePlugin"  # one of EFA_ALLOCATIONS; "dra" only on EFA types
    # One of GPU_ALLOCATIONS; "dra" only with efa_allocation "dra" on a type with a known PCIe layout.
    gpu_allocation: str = "devicePlugin"

    @property
    def instance_type(self) -> InstanceType:
        return INSTANCE_TYPES[self.instance_type_name]

    @property
    def efa_path(self) -> str | None:
        """How this group's pods get EFA interfaces, or None where the type has none."""
        return self.efa_allocation if self.instance_type.supports_efa else None


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
    # The FSx backup the file system is created from (AWS::FSx::FileSystem BackupId, create-only:
    # ops/redeploy.py fails a deploy that changes it under a deployed file system).
    backup_id: str | None = None

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
    training_api: str = "v1"
    queueing: str = "none"  # one of QUEUEING

    def efa_groups(self, path: str) -> tuple[Nodegroup, ...]:
        """The GPU groups whose pods get EFA through `path` ("devicePlugin" or "dra")."""
        return tuple(g for g in self.gpu_nodegroups if g.efa_path == path)

    def gpu_groups(self, path: str) -> tuple[Nodegroup, ...]:
        """The GPU groups whose pods get GPUs through `path` ("devicePlugin" or "dra")."""
        return tuple(g for g in self.gpu_nodegroups if g.gpu_allocation == path)

    @property
    def admin_principal_arns(self) -> tuple[str, ...]:
        """Every principal the stack gives a cluster-admin access entry."""
        return self.admin_role_arns + ((self.deployer_principal_arn,) if self.deployer_principal_arn else ())

    @property
    def admin_access_entries(self) -> tuple[tuple[str, str], ...]:
        """(construct id, principal ARN) of each cluster-admin access entry, as the Cluster stack
        creates them and preflight (ops/redeploy.py) compares them with the deployed ones. The ids
        are positions, so every deployed cluster keeps its logical ids: a principal that moves to
        another id cannot be deployed in one step (ops/redeploy.py says why and how instead)."""
        ids = [f"{ADMIN_ENTRY}{i}" for i in range(len(self.admin_role_arns))]
        ids += [DEPLOYER_ENTRY] if self.deployer_principal_arn else []
        return tuple(zip(ids, self.admin_principal_arns))

    @property
    def retain(self) -> bool:
        return self.removal_policy == "retain"

    @property
    def cluster_name(self) -> str:
        """The EKS cluster's name, fixed so its log groups can be created before it."""
        return f"{self.name}{CLUSTER_NAME_SUFFIX}"

    @property
    def control_plane_log_group_name(self) -> str:
        # Amazon EKS User Guide, "Send control plane logs to CloudWatch Logs".
        return f"/aws/eks/{self.cluster_name}/cluster"

    def container_insights_log_group_name(self, kind: str) -> str:
        return f"/aws/containerinsights/{self.cluster_name}/{kind}"

    @property
    def cluster_log_group_names(self) -> tuple[str, ...]:
        """The log groups the Cluster stack creates under fixed names, before EKS and the CloudWatch
        add-on would; a leftover of one stops the next deploy (ops preflight looks for them)."""
        return (self.control_plane_log_group_name,
                *(self.container_insights_log_group_name(kind) for kind in CONTAINER_INSIGHTS_LOG_GROUPS))

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
    def training_subnet_cidr(self) -> str:
        """The training subnet's block: private subnets take the first half of the VPC in zone
        order (stacks/network.py), so another zone list or vpcCidr moves it, and with it FSx."""
        blocks = ipaddress.ip_network(self.vpc_cidr).subnets(new_prefix=self.private_subnet_mask)
        index = self.availability_zones.index(self.training_availability_zone)
        return str(next(itertools.islice(blocks, index, None)))

    @property
    def fsx_backups(self) -> bool:
        """Whether the file system is backed up: only in a retain environment, and FSx backs up no
        file system linked to S3 (FSx for Lustre User Guide, using-backups-fsx.html)."""
        return self.retain and not (self.fsx.s3_import_path or self.fsx.s3_export_path)

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
