"""The node groups of an environment: the system group, the GPU and CPU training groups, and
the capacity each training group runs on."""

from __future__ import annotations

import re
from typing import Any

from config.environment import (
    CAPACITY_TYPES, EFA_ALLOCATIONS, GPU_ALLOCATIONS, RESERVATION_ID, Capacity, Nodegroup, SystemNodegroup,
)
from config.errors import ConfigError
from config.instance_types import CPU_TYPES, GPU_TYPES, INSTANCE_TYPES, PCIE_ROOT_LAYOUTS, InstanceType
from config.kubernetes import (
    DRA_MIN_KUBERNETES, LONGEST_DERIVED_NAME, MAX_NODEGROUP_NAME, RESERVED_NODEGROUP_NAMES,
)
from config.reader import ObjectReader, one_of

# EKS allows 1-63 letters, digits, '-' and '_' (CreateNodegroup), but Kubernetes object names are
# made from the name (config/kubernetes.py NODEGROUP_DERIVED_NAMES): a lowercase DNS label short
# enough for the longest of them.
_NODEGROUP_NAME = re.compile(rf"[a-z]([-a-z0-9]{{0,{MAX_NODEGROUP_NAME - 2}}}[a-z0-9])?")
_LONGEST_EXAMPLE = f"{LONGEST_DERIVED_NAME[0]('<name>')}, at most {LONGEST_DERIVED_NAME[1]}"


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


def parse_system_nodegroup(raw: dict, path: str) -> SystemNodegroup:
    r = ObjectReader(raw, path)
    instance_type = _instance_type(r, CPU_TYPES, "CPU")
    min_size, max_size, _ = _sizes(r, with_desired=False)
    r.finish()
    if min_size < 2:
        raise ConfigError(r.at("minSize"), f"must be at least 2 so cluster services survive a node loss, got {min_size}")
    return SystemNodegroup(instance_type, min_size, max_size)


def parse_nodegroup(raw: Any, path: str, *, gpu: bool) -> Nodegroup:
    r = ObjectReader(raw, path)
    name = r.required("name", str)
    if not _NODEGROUP_NAME.fullmatch(name):
        raise ConfigError(r.at("name"), f"must be 1-{MAX_NODEGROUP_NAME} lowercase letters, digits or '-', starting "
                                        "with a letter and ending with a letter or digit (Kubernetes names are made "
                                        f"from it: {_LONGEST_EXAMPLE} characters), got {name!r}")
    if name in RESERVED_NODEGROUP_NAMES:
        raise ConfigError(r.at("name"), f"{name!r} is reserved (the system node group carries it); choose another name")
    instance_type = _instance_type(r, GPU_TYPES if gpu else CPU_TYPES, "GPU" if gpu else "CPU")
    min_size, max_size, desired = _sizes(r, with_desired=True)
    capacity = Capacity()
    efa_allocation = gpu_allocation = "devicePlugin"
    if gpu:
        capacity = _parse_capacity(r.optional("capacity", dict, {"type": "onDemand"}), r.at("capacity"),
                                   INSTANCE_TYPES[instance_type])
        efa_allocation = _parse_efa_allocation(r, INSTANCE_TYPES[instance_type])
        gpu_allocation = _parse_gpu_allocation(r, INSTANCE_TYPES[instance_type], efa_allocation)
    auto_repair = r.optional("nodeAutoRepair", bool, True)
    r.finish()
    if capacity.type == "capacityBlock":
        _check_capacity_block_sizes(r, min_size, desired)
    return Nodegroup(name, instance_type, min_size, max_size, desired, capacity, auto_repair, efa_allocation,
                     gpu_allocation)


def _parse_efa_allocation(r: ObjectReader, instance_type: InstanceType) -> str:
    allocation = one_of(r.optional("efaAllocation", str, "devicePlugin"), EFA_ALLOCATIONS, r.at("efaAllocation"))
    if allocation == "dra" and not instance_type.supports_efa:
        raise ConfigError(r.at("efaAllocation"), f"dra needs an EFA instance type; {instance_type.name} has no "
                                                 "EFA interfaces")
    return allocation


def _parse_gpu_allocation(r: ObjectReader, instance_type: InstanceType, efa_allocation: str) -> str:
    """GPUs through NVIDIA's DRA driver are worth their cost only aligned with the EFA claims by PCIe
    root, so "dra" needs the EFA devices through DRA too (a matchAttribute constraint spans one
    claim; EKS: topology-aware pairing needs "the NVIDIA or Neuron DRA drivers", device-management-efa)
    and a per-root layout someone verified (config/instance_types.py PCIE_ROOT_LAYOUTS)."""
    allocation = one_of(r.optional("gpuAllocation", str, "devicePlugin"), GPU_ALLOCATIONS, r.at("gpuAllocation"))
    if allocation != "dra":
        return allocation
    if efa_allocation != "dra":
        raise ConfigError(r.at("gpuAllocation"), "dra needs efaAllocation dra on the same group (GPUs and EFA "
                                                 "devices are aligned by PCIe root within one DRA claim)")
    if instance_type.name not in PCIE_ROOT_LAYOUTS:
        known = ", ".join(sorted(PCIE_ROOT_LAYOUTS))
        raise ConfigError(r.at("gpuAllocation"), f"dra needs a verified GPU/EFA-per-PCIe-root layout, known for "
                                                 f"{known}; nobody here has verified {instance_type.name}'s, so it "
                                                 "is refused rather than guessed (use devicePlugin)")
    return allocation


def check_dra_kubernetes_version(groups: tuple[Nodegroup, ...], kubernetes_version: str, path: str) -> None:
    """The EFA DRA driver needs resource.k8s.io/v1, served from Kubernetes 1.34 (EKS: "Minimum
    Kubernetes version 1.34", https://docs.aws.amazon.com/eks/latest/userguide/device-management-efa.html)."""
    def minor(version: str) -> tuple[int, ...]:
        return tuple(int(p) for p in version.split("."))

    for i, group in enumerate(groups):
        if group.efa_allocation == "dra" and minor(kubernetes_version) < minor(DRA_MIN_KUBERNETES):
            raise ConfigError(f"{path}[{i}].efaAllocation",
                              f"dra needs kubernetesVersion {DRA_MIN_KUBERNETES} or later, got {kubernetes_version} "
                              "(https://docs.aws.amazon.com/eks/latest/userguide/device-management-efa.html)")
        # "Minimum Kubernetes version 1.34" for the NVIDIA DRA driver too (device-management-nvidia-dra-device-plugin).
        if group.gpu_allocation == "dra" and minor(kubernetes_version) < minor(DRA_MIN_KUBERNETES):
            raise ConfigError(f"{path}[{i}].gpuAllocation",
                              f"dra needs kubernetesVersion {DRA_MIN_KUBERNETES} or later, got {kubernetes_version} "
                              "(https://docs.aws.amazon.com/eks/latest/userguide/"
                              "device-management-nvidia-dra-device-plugin.html)")


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
    if not RESERVATION_ID.fullmatch(reservation):
        raise ConfigError(r.at("reservationId"), f"must be cr- followed by 17 hex digits, got {reservation!r}")
    if kind == "capacityBlock" and not instance_type.capacity_blocks:
        blocks = ", ".join(n for n, t in INSTANCE_TYPES.items() if t.capacity_blocks)
        raise ConfigError(r.at("type"), f"capacity blocks are sold for {blocks}, not {instance_type.name}")
    return Capacity(kind, reservation)


def check_unique_names(gpu: tuple[Nodegroup, ...], cpu: tuple[Nodegroup, ...], path: str) -> None:
    seen: dict[str, str] = {}
    for key, groups in (("gpuNodegroups", gpu), ("cpuNodegroups", cpu)):
        for i, group in enumerate(groups):
            if group.name in seen:
                raise ConfigError(f"{path}.{key}[{i}].name",
                                  f"{group.name!r} is already used by {seen[group.name]}; names must be unique")
            seen[group.name] = f"{key}[{i}]"


def check_shared_reservations(gpu: tuple[Nodegroup, ...], path: str) -> None:
    """A capacity reservation holds one instance type and is an On-Demand Capacity Reservation or a
    capacity block (EC2 DescribeCapacityReservations: InstanceType, ReservationType); groups that
    share one must agree on both, or one of them never launches a node."""
    first: dict[str, int] = {}
    for i, group in enumerate(gpu):
        rid = group.capacity.reservation_id
        if rid is None:
            continue
        j = first.setdefault(rid, i)
        other = gpu[j]
        if (other.instance_type_name, other.capacity.type) != (group.instance_type_name, group.capacity.type):
            raise ConfigError(f"{path}.gpuNodegroups[{i}].capacity.reservationId",
                              f"{rid} is already the reservation of gpuNodegroups[{j}] ({other.capacity.type} "
                              f"{other.instance_type_name}); a reservation holds one instance type and is either "
                              f"reserved or a capacityBlock, so this group ({group.capacity.type} "
                              f"{group.instance_type_name}) could never launch from it")
