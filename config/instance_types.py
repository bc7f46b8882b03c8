"""The instance-type table: the one source of hardware facts.

The node-group construct (EFA interfaces, AMI), the job chart (GPU and EFA requests), the trainer
(MFU denominator), preflight (vCPU quotas) and the IP plan all read it. Figures come from the EC2
instance-type pages, the EFA guide and the GPU vendors' data sheets (dense, not sparse, bf16).
Pod counts are the VPC CNI's per-type maxima, capped as the EKS AL2023 AMI caps kubelet's maxPods.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EfaInterface:
    network_card_index: int
    device_index: int
    interface_type: str  # "efa" (EFA with ENA, carries the node's IP) or "efa-only"


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int
    memory_gib: int
    gpus: int = 0
    gpu_model: str | None = None
    gpu_memory_gib: int = 0
    efa_interfaces: int = 0
    network_cards: int = 1
    peak_bf16_flops: float | None = None  # per GPU, dense
    vpc_cni_max_pods: int = 110
    # Bus bandwidth an NCCL all-reduce across two nodes must reach (GB/s); None: no NCCL gate.
    nccl_busbw_floor_gbps: float | None = None
    capacity_blocks: bool = False

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def is_gpu(self) -> bool:
        return self.gpus > 0

    @property
    def supports_efa(self) -> bool:
        return self.efa_interfaces > 0

    @property
    def quota_class(self) -> str:
        """The On-Demand vCPU quota bucket the type draws from: P, G or Standard."""
        if self.family.startswith("p"):
            return "P"
        if self.family.startswith("g"):
            return "G"
        return "Standard"

    @property
    def max_pods(self) -> int:
        # AL2023 nodeadm caps maxPods at 110 below 30 vCPUs and 250 above.
        return min(self.vpc_cni_max_pods, 110 if self.vcpus < 30 else 250)

    @property
    def ips_per_node(self) -> int:
        """Subnet addresses one node can take: its primary IP plus one per pod.

        EFA-only interfaces carry no IP address, so the EFA layout below costs one address per
        node however many interfaces it has.
        """
        return 1 + self.max_pods

    def efa_layout(self) -> tuple[EfaInterface, ...]:
        """Interfaces as the EC2 EFA guide lays them out for multi-card instances.

        The primary interface (card 0, device 0) is EFA with ENA; every further card gets one
        EFA-only interface at device index 1, which saves an IP address per card.
        """
        if not self.supports_efa:
            return ()
        primary = EfaInterface(0, 0, "efa")
        rest = tuple(EfaInterface(card, 1, "efa-only") for card in range(1, self.efa_interfaces))
        return (primary, *rest)


def _g(name, vcpus, mem, gpus, model, gpu_mem, efa, pods, flops):
    return InstanceType(name, vcpus, mem, gpus, model, gpu_mem, efa, 1, flops, pods,
                        nccl_busbw_floor_gbps=8.0 if efa else None)


_A100 = 312e12
_H100 = 989e12
_H200 = 989e12
_A10G = 70e12
_L4 = 121e12

INSTANCE_TYPES: dict[str, InstanceType] = {
    t.name: t
    for t in (
        InstanceType("p4d.24xlarge", 96, 1152, 8, "A100", 40, 4, 4, _A100, 737, 40.0, True),
        InstanceType("p4de.24xlarge", 96, 1152, 8, "A100", 80, 4, 4, _A100, 737, 40.0, True),
        InstanceType("p5.48xlarge", 192, 2048, 8, "H100", 80, 32, 32, _H100, 100, 250.0, True),
        InstanceType("p5e.48xlarge", 192, 2048, 8, "H200", 141, 32, 32, _H200, 100, 250.0, True),
        InstanceType("p5en.48xlarge", 192, 2048, 8, "H200", 141, 16, 16, _H200, 100, 250.0, True),
        _g("g5.xlarge", 4, 16, 1, "A10G", 24, 0, 58, _A10G),
        _g("g5.2xlarge", 8, 32, 1, "A10G", 24, 0, 58, _A10G),
        _g("g5.4xlarge", 16, 64, 1, "A10G", 24, 0, 234, _A10G),
        _g("g5.8xlarge", 32, 128, 1, "A10G", 24, 1, 234, _A10G),
        _g("g5.12xlarge", 48, 192, 4, "A10G", 24, 1, 737, _A10G),
        _g("g5.16xlarge", 64, 256, 1, "A10G", 24, 1, 234, _A10G),
        _g("g5.24xlarge", 96, 384, 4, "A10G", 24, 1, 737, _A10G),
        _g("g5.48xlarge", 192, 768, 8, "A10G", 24, 1, 345, _A10G),
        _g("g6.xlarge", 4, 16, 1, "L4", 24, 0, 58, _L4),
        _g("g6.2xlarge", 8, 32, 1, "L4", 24, 0, 58, _L4),
        _g("g6.4xlarge", 16, 64, 1, "L4", 24, 0, 234, _L4),
        _g("g6.8xlarge", 32, 128, 1, "L4", 24, 1, 234, _L4),
        _g("g6.12xlarge", 48, 192, 4, "L4", 24, 1, 234, _L4),
        _g("g6.16xlarge", 64, 256, 1, "L4", 24, 1, 737, _L4),
        _g("g6.24xlarge", 96, 384, 4, "L4", 24, 1, 737, _L4),
        _g("g6.48xlarge", 192, 768, 8, "L4", 24, 1, 737, _L4),
        InstanceType("m5.large", 2, 8, vpc_cni_max_pods=29),
        InstanceType("m5.xlarge", 4, 16, vpc_cni_max_pods=58),
        InstanceType("m5.2xlarge", 8, 32, vpc_cni_max_pods=58),
        InstanceType("m5.4xlarge", 16, 64, vpc_cni_max_pods=234),
        InstanceType("m5.8xlarge", 32, 128, vpc_cni_max_pods=234),
        InstanceType("m6i.large", 2, 8, vpc_cni_max_pods=29),
        InstanceType("m6i.xlarge", 4, 16, vpc_cni_max_pods=58),
        InstanceType("m6i.2xlarge", 8, 32, vpc_cni_max_pods=58),
        InstanceType("m6i.4xlarge", 16, 64, vpc_cni_max_pods=234),
        InstanceType("c5.2xlarge", 8, 16, vpc_cni_max_pods=58),
        InstanceType("c5.4xlarge", 16, 32, vpc_cni_max_pods=234),
    )
}

GPU_TYPES = tuple(n for n, t in INSTANCE_TYPES.items() if t.is_gpu)
CPU_TYPES = tuple(n for n, t in INSTANCE_TYPES.items() if not t.is_gpu)


def lookup(name: str) -> InstanceType:
    """The table entry for `name`; KeyError for a type we have no facts for."""
    return INSTANCE_TYPES[name]


# Peak dense bf16 FLOPs per GPU by the device name torch reports, for the trainer's MFU when
# it runs outside a node group (a workstation, a lent benchmark machine).
PEAK_BF16_BY_DEVICE_NAME = {"A100": _A100, "H100": _H100, "H200": _H200, "A10G": _A10G, "L4": _L4}
