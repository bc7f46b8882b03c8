"""The instance-type table: the one source of hardware facts.

The node-group construct (EFA interfaces, AMI, local NVMe), every run (k8s/pods/pytorchjob.py: GPU and EFA requests),
the trainer (MFU denominator), preflight (vCPU quotas) and the IP plan all read it. Figures come
from the EC2 instance-type pages, the EFA guide and the GPU vendors' data sheets (dense, not
sparse, bf16); vCPUs, GPUs, memory, EFA devices, network cards and instance storage are checked
against EC2's DescribeInstanceTypes answer (tests/config/test_instance_types.py).
Pod counts are the VPC CNI's per-type maxima, capped as the EKS AL2023 AMI caps kubelet's maxPods,
and on EFA types lowered to what card 0 has left after the EFA layout (InstanceType.max_pods).
"""

from __future__ import annotations

from dataclasses import dataclass


# "Maximize network bandwidth on Amazon EC2 instances with multiple network cards", Amazon EC2
# User Guide. Each EFA row of the table names the section of this page its layout follows.
EFA_GUIDE_URL = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html"
# The basic configuration at the top of the page: ENA primary (card 0, device 0), EFA-only on card 0
# device 1 where card 0 supports EFA, then EFA-only at device 0 of each further card.
EFA_BASIC = f"{EFA_GUIDE_URL}#efa-acc-inst-types (basic configuration)"
# "EFA configuration for a P5 and P5e instances", use case 1 ("Save IP addresses and avoid potential
# Linux IP issues"): the basic layout on all 32 cards; up to 3,200 Gbps EFA and 100 Gbps IP with one
# private address. Use case 2 adds seven ENA interfaces (cards 4, 8, ... 28, device 1) for up to
# 800 Gbps of IP traffic; the guide does not require it for EFA bandwidth, and the IP traffic here
# (FSx for Lustre at its provisioned throughput, image pulls) stays far below 100 Gbps a node.
EFA_P5 = f"{EFA_GUIDE_URL}#efa-for-p5 (use case 1)"


@dataclass(frozen=True)
class NetworkInterface:
    network_card_index: int
    device_index: int
    interface_type: str  # "interface" (ENA, carries the node's IP) or "efa-only" (no IP address)

    def as_tuple(self) -> tuple[int, int, str]:
        return (self.network_card_index, self.device_index, self.interface_type)


# vCPUs per GPU left to the rank's own process, not to loader workers (loader_workers_per_gpu):
# its Python step loop and CUDA launches, DataLoader's pin-memory thread, and NCCL's proxy thread,
# which polls the EFA completion queues during each all-reduce. What was measured (bench/RESULTS.md,
# one H200 with 16 cores, 2026-11-26): beside 15 workers, a one-GPU ResNet-50 process left them
# 219-251 images/s each, against 236 at 8 workers, so without communication it takes about one
# vCPU. That run had no NCCL: the second vCPU is the proxy thread's, not measured, so it stays.
LOADER_RESERVED_VCPUS = 2


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
    # See NCCL_BUSBW_FLOOR_SHARE for how each EFA row's figure is chosen.
    nccl_busbw_floor_gbps: float | None = None
    capacity_blocks: bool = False
    # NVMe instance store: disk count and total GB (EC2's InstanceStorageInfo).
    local_nvme_disks: int = 0
    local_nvme_gb: int = 0
    efa_layout_source: str = ""  # the EFA guide section network_interfaces() follows
    # Network card 0's interface limit and the IPv4 addresses an interface holds (EC2
    # DescribeInstanceTypes: NetworkCards[0].MaximumNetworkInterfaces, Ipv4AddressesPerInterface).
    # Needed for EFA types only: see max_pods.
    card0_max_interfaces: int = 0
    ipv4_per_interface: int = 0

    def loader_workers_per_gpu(self, pod_cpu_share: float, reserved: int = LOADER_RESERVED_VCPUS) -> int:
        """Data-loader processes per GPU (per rank) that fill a node-filling pod's vCPUs: its share
        of the node (`pod_cpu_share`, config/kubernetes.py POD_CPU_SHARE) over the GPUs, less
        `reserved` vCPUs for the rank's own process (the Python step loop, the pin-memory thread,
        NCCL's proxy threads). At least 1. Sized on the pod's CPU request, which has no limit
        (k8s/pods/resources.py): workers may also run on the vCPUs the request leaves to kubelet and
        the DaemonSets while those idle, but the request is what the pod keeps under contention."""
        per_gpu = int(self.vcpus * pod_cpu_share) // max(1, self.gpus)
        return max(1, per_gpu - reserved)

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
    def pod_network_interfaces(self) -> int:
        """ENA interfaces the VPC CNI can give pod addresses from: it attaches them on network card 0
        only, and every EFA-only interface our layout puts on card 0 takes one of that card's slots."""
        efa_only_on_card0 = sum(1 for i in self.network_interfaces()
                                if i.network_card_index == 0 and i.interface_type == "efa-only")
        return self.card0_max_interfaces - efa_only_on_card0

    @property
    def max_pods(self) -> int:
        """Pods kubelet admits on a node. The VPC CNI's per-type figure (eni-max-pods) counts every
        slot of card 0; with our EFA layout fewer are left, so EFA types count what remains:
        ENIs x (addresses per ENI - 1) + 2 host-network pods, the same formula. On p5 that is
        1 x 49 + 2 = 51, not 100. The subnet plan counts this figure (ips_per_node). Kubelet's own
        maxPods is EKS's on managed nodes without a custom AMI (config/node_user_data.py):
        larger on p5, harmless while a training node runs one training pod and the DaemonSets.
        EKS caps maxPods at 110 below 30 vCPUs and 250 above."""
        cni = self.vpc_cni_max_pods
        if self.supports_efa:
            cni = min(cni, self.pod_network_interfaces * (self.ipv4_per_interface - 1) + 2)
        return min(cni, 110 if self.vcpus < 30 else 250)

    @property
    def ips_per_node(self) -> int:
        """Subnet addresses one node can take: its primary IP plus one per pod.

        EFA-only interfaces carry no IP address, so the EFA layout below costs one address per
        node however many interfaces it has.
        """
        return 1 + self.max_pods

    def network_interfaces(self) -> tuple[NetworkInterface, ...]:
        """The launch template's interfaces, as `efa_layout_source` lays them out; () without EFA
        (the node then gets EKS's default single ENA interface).

        The primary interface is ENA only (an EFA-only interface cannot be primary); one EFA-only
        interface per EFA device follows: card 0 at device 1, every further card at device 0.
        EFA-only interfaces take no IP address, so the whole layout costs one address per node.
        """
        if not self.supports_efa:
            return ()
        return (NetworkInterface(0, 0, "interface"), NetworkInterface(0, 1, "efa-only"),
                *(NetworkInterface(card, 0, "efa-only") for card in range(1, self.efa_interfaces)))


# The NCCL validation's bus-bandwidth floor: what a two-node all_reduce_perf must reach at every
# message size of 1 GiB and more (ops/nccl.py judges only there: smaller sizes are latency-bound).
# Each floor is a share of a published two-node figure at those sizes (NCCL_BUSBW_PUBLISHED, the
# lowest published row at >= 1 GiB): low enough that a healthy run with our newer NCCL and
# aws-ofi-nccl passes, high enough that NCCL on TCP sockets (the ENA primary's card, 100 Gbps =
# 12.5 GB/s) or EFA without GPUDirect RDMA cannot. tests/config/test_instance_types.py keeps every
# floor between NCCL_BUSBW_FLOOR_SHARE's bounds of its basis. Bus bandwidth of a 2 x 8 GPU
# all-reduce can exceed the network's own peak (p5's 3,200 Gbps = 400 GB/s; 487 GB/s published),
# so the network's peak is no ceiling for these figures; on the g types, for which nothing is
# published, the floor stays a share of the one card's peak (EC2), where a floor cannot tell EFA
# from sockets; the trainer's start-up check (trainer/nccl_net.py) does.
NCCL_BUSBW_FLOOR_SHARE = (0.5, 0.85)


@dataclass(frozen=True)
class PublishedBusbw:
    gbps: float  # the lowest two-node all-reduce bus bandwidth published at >= 1 GiB
    detail: str  # the rows it comes from
    source: str


_AWSOME = ("aws-samples/awsome-distributed-training, micro-benchmarks/nccl-tests/README.md "
           "(\"All_reduce performance test ... on 2x p4de.24xlarge / 2x p5.48xlarge\")")
NCCL_BUSBW_PUBLISHED = {
    "p5.48xlarge": PublishedBusbw(436.95, "busbw 436.95 at 1 GiB, 443.72 at 2 GiB, 465.87 at 4 GiB, 479.28 at "
                                          "8 GiB, 487.09 at 16 GiB (2 x p5.48xlarge)", _AWSOME),
    "p4de.24xlarge": PublishedBusbw(76.79, "busbw 76.79 at 1 GiB, 78.33 at 2 GiB (2 x p4de.24xlarge)", _AWSOME),
    "p4d.24xlarge": PublishedBusbw(57.17, "busbw 57.17 at 1 GiB on 2 x p4d with NCCL 2.9.9 (written p4dn.24xlarge "
                                          "there; p4d and p4de share the 4 x 100 Gbps EFA network)",
                                   "NVIDIA/nccl issue #527, \"Slow bus bandwidth w/ nccl 2.9.9 on EC2 instances\""),
}
# Types with no published two-node figure take the floor basis of a type with the same network:
# p5e and p5en have p5's 3,200 Gbps of EFA (EC2 instance-type pages).
NCCL_BUSBW_BASIS = {"p5.48xlarge": "p5.48xlarge", "p5e.48xlarge": "p5.48xlarge", "p5en.48xlarge": "p5.48xlarge",
                    "p4d.24xlarge": "p4d.24xlarge", "p4de.24xlarge": "p4de.24xlarge"}
_G_BUSBW_SHARE = 0.6


def _g(name, vcpus, mem, gpus, model, gpu_mem, efa, pods, flops, disks, disk_gb, card0=0, ipv4=0, net_gbps=0):
    """A G-family row; `net_gbps` (the one network card's peak, EC2) sets the NCCL floor of EFA types."""
    return InstanceType(name, vcpus, mem, gpus, model, gpu_mem, efa, 1, flops, pods,
                        nccl_busbw_floor_gbps=round(_G_BUSBW_SHARE * net_gbps / 8, 3) if efa else None,
                        local_nvme_disks=disks, local_nvme_gb=disks * disk_gb,
                        efa_layout_source=EFA_BASIC if efa else "",
                        card0_max_interfaces=card0, ipv4_per_interface=ipv4)


_A100 = 312e12
_H100 = 989e12
_H200 = 989e12
_A10G = 70e12
_L4 = 121e12

INSTANCE_TYPES: dict[str, InstanceType] = {
    t.name: t
    for t in (
        InstanceType("p4d.24xlarge", 96, 1152, 8, "A100", 40, 4, 4, _A100, 737, 40.0, True,
                     local_nvme_disks=8, local_nvme_gb=8 * 1000, efa_layout_source=EFA_BASIC,
                     card0_max_interfaces=15, ipv4_per_interface=50),
        InstanceType("p4de.24xlarge", 96, 1152, 8, "A100", 80, 4, 4, _A100, 737, 60.0, True,
                     local_nvme_disks=8, local_nvme_gb=8 * 1000, efa_layout_source=EFA_BASIC,
                     card0_max_interfaces=15, ipv4_per_interface=50),
        InstanceType("p5.48xlarge", 192, 2048, 8, "H100", 80, 32, 32, _H100, 100, 350.0, True,
                     local_nvme_disks=8, local_nvme_gb=8 * 3800, efa_layout_source=EFA_P5,
                     card0_max_interfaces=2, ipv4_per_interface=50),
        InstanceType("p5e.48xlarge", 192, 2048, 8, "H200", 141, 32, 32, _H200, 100, 350.0, True,
                     local_nvme_disks=8, local_nvme_gb=8 * 3800, efa_layout_source=EFA_P5,
                     card0_max_interfaces=2, ipv4_per_interface=50),
        InstanceType("p5en.48xlarge", 192, 2048, 8, "H200", 141, 16, 16, _H200, 100, 350.0, True,
                     local_nvme_disks=8, local_nvme_gb=8 * 3800, efa_layout_source=EFA_BASIC,
                     card0_max_interfaces=4, ipv4_per_interface=50),
        _g("g5.xlarge", 4, 16, 1, "A10G", 24, 0, 58, _A10G, 1, 250),
        _g("g5.2xlarge", 8, 32, 1, "A10G", 24, 0, 58, _A10G, 1, 450),
        _g("g5.4xlarge", 16, 64, 1, "A10G", 24, 0, 234, _A10G, 1, 600),
        _g("g5.8xlarge", 32, 128, 1, "A10G", 24, 1, 234, _A10G, 1, 900, 8, 30, net_gbps=25),
        _g("g5.12xlarge", 48, 192, 4, "A10G", 24, 1, 737, _A10G, 1, 3800, 15, 50, net_gbps=40),
        _g("g5.16xlarge", 64, 256, 1, "A10G", 24, 1, 234, _A10G, 1, 1900, 8, 30, net_gbps=25),
        _g("g5.24xlarge", 96, 384, 4, "A10G", 24, 1, 737, _A10G, 1, 3800, 15, 50, net_gbps=50),
        _g("g5.48xlarge", 192, 768, 8, "A10G", 24, 1, 345, _A10G, 2, 3800, 7, 50, net_gbps=100),
        _g("g6.xlarge", 4, 16, 1, "L4", 24, 0, 58, _L4, 1, 250),
        _g("g6.2xlarge", 8, 32, 1, "L4", 24, 0, 58, _L4, 1, 450),
        _g("g6.4xlarge", 16, 64, 1, "L4", 24, 0, 234, _L4, 1, 600),
        _g("g6.8xlarge", 32, 128, 1, "L4", 24, 1, 234, _L4, 2, 450, 8, 30, net_gbps=25),
        _g("g6.12xlarge", 48, 192, 4, "L4", 24, 1, 234, _L4, 4, 940, 8, 30, net_gbps=40),
        _g("g6.16xlarge", 64, 256, 1, "L4", 24, 1, 737, _L4, 2, 940, 15, 50, net_gbps=25),
        _g("g6.24xlarge", 96, 384, 4, "L4", 24, 1, 737, _L4, 4, 940, 15, 50, net_gbps=50),
        _g("g6.48xlarge", 192, 768, 8, "L4", 24, 1, 737, _L4, 8, 940, 15, 50, net_gbps=100),
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


# Peak dense bf16 FLOPs per GPU by the device name torch reports, for the trainer's MFU when
# it runs outside a node group (a workstation, a lent benchmark machine).
PEAK_BF16_BY_DEVICE_NAME = {"A100": _A100, "H100": _H100, "H200": _H200, "A10G": _A10G, "L4": _L4}


# The EKS User Guide's DRA section on topology-aware EFA allocation ("Manage EFA devices on Amazon
# EKS", https://docs.aws.amazon.com/eks/latest/userguide/device-management-efa.html): "on
# p5.48xlarge instances there are four EFA devices that share the same PCIe root with one GPU".
EKS_EFA_TOPOLOGY = ("https://docs.aws.amazon.com/eks/latest/userguide/device-management-efa.html "
                    "(\"four EFA devices that share the same PCIe root with one GPU\", p5.48xlarge)")


@dataclass(frozen=True)
class PcieRootLayout:
    """How many GPUs and EFA devices share one PCIe root of an instance type: what a whole-node
    ResourceClaim pairs per root (k8s/pods/devices.py). The number of roots is the type's GPUs over
    gpus_per_root; the type's EFA count must equal roots x efa_per_root (tests/config check it)."""

    gpus_per_root: int
    efa_per_root: int
    source: str


# Only layouts someone has verified. AWS states p5.48xlarge's ratio; 8 roots is its 8 GPUs at one per
# root, and 8 x 4 = 32 is its EFA count. p4d/p4de (8 GPUs, 4 EFA), p5e and p5en: no source here says
# how their GPUs and EFA devices share roots, so gpuAllocation dra refuses them rather than guess.
PCIE_ROOT_LAYOUTS: dict[str, PcieRootLayout] = {
    "p5.48xlarge": PcieRootLayout(gpus_per_root=1, efa_per_root=4, source=EKS_EFA_TOPOLOGY),
}
