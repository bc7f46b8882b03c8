"""What a pod takes from its node: CPU, memory, /dev/shm, GPUs, EFA interfaces and huge pages, and
the GPU nodes' taint it tolerates to get there.

Two rules hold for every container we render: memory has a limit equal to its request (no OOM
surprises under node pressure), and CPU has no limit (CFS quotas throttle data loaders, NCCL's
proxy threads and control loops; throttling makes them slow, not safe).
"""

from __future__ import annotations

from config.instance_types import InstanceType
from config.kubernetes import (  # noqa: F401  (EFA_HUGEPAGES_2MI, NODE_*_SHARE re-exported)
    EFA_HUGEPAGES_2MI, EFA_RESOURCE, GPU_RESOURCE, GPU_TAINT_EFFECT, GPU_TAINT_KEY, GPU_TAINT_VALUE, HUGEPAGES_RESOURCE,
    NODE_CPU_SHARE, NODE_MEMORY_SHARE)
SHM_MAX_GIB = 128


def fixed_resources(cpu_milli: int, memory_mib: int) -> dict[str, dict[str, str]]:
    """requests and limits of a small service container (the add-ons' workloads)."""
    memory = f"{memory_mib}Mi"
    return {"limits": {"memory": memory}, "requests": {"cpu": f"{cpu_milli}m", "memory": memory}}


def node_share(instance: InstanceType) -> tuple[str, str]:
    """CPU and memory one node-filling pod requests on `instance`."""
    cpu = max(1, int(instance.vcpus * NODE_CPU_SHARE))
    memory_gib = max(1, int(instance.memory_gib * NODE_MEMORY_SHARE))
    return str(cpu), f"{memory_gib}Gi"


def shm_size(instance: InstanceType) -> str:
    """/dev/shm for data-loader workers and NCCL's shared-memory transport: a quarter of the
    pod's memory (it counts against the memory limit), capped."""
    memory_gib = max(1, int(instance.memory_gib * NODE_MEMORY_SHARE))
    return f"{max(1, min(memory_gib // 4, SHM_MAX_GIB))}Gi"


def accelerator_resources(instance: InstanceType) -> dict[str, str]:
    """Extended resources a node-filling pod takes: all GPUs, all EFA interfaces and the
    huge pages EFA needs. Requests must equal limits for these."""
    resources: dict[str, str] = {}
    if instance.is_gpu:
        resources[GPU_RESOURCE] = str(instance.gpus)
    if instance.supports_efa:
        resources[EFA_RESOURCE] = str(instance.efa_interfaces)
        resources[HUGEPAGES_RESOURCE] = EFA_HUGEPAGES_2MI
    return resources


def container_resources(instance: InstanceType, *, cpu: str, memory: str) -> dict[str, dict[str, str]]:
    """requests and limits of a container on `instance`: `cpu` and `memory`, plus every device a
    training pod on that node group takes (accelerator_resources). Training pods and the
    validation pods of a node group both call this, so a node that passes validation can
    schedule training pods."""
    extended = accelerator_resources(instance)
    return {"requests": {"cpu": cpu, "memory": memory, **extended}, "limits": {"memory": memory, **extended}}


def gpu_toleration() -> dict:
    return {"key": GPU_TAINT_KEY, "operator": "Equal", "value": GPU_TAINT_VALUE, "effect": GPU_TAINT_EFFECT}
