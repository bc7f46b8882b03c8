"""The instance-type table against EC2's own description of each type.

moto ships a snapshot of EC2 DescribeInstanceTypes (moto/ec2/resources/instance_types.json.gz,
the API's answer copied from AWS); it is the offline stand-in for the "Amazon EC2 instance types"
specifications (https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html). Where the table and
the snapshot disagree, the table is wrong or the snapshot is stale: either way a person must look.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import moto
import pytest

from config.instance_types import EFA_GUIDE_URL, INSTANCE_TYPES, NCCL_BUSBW_FLOOR_SHARE

SNAPSHOT = Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz"


@pytest.fixture(scope="module")
def ec2_types() -> dict:
    return json.loads(gzip.open(SNAPSHOT).read())


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
def test_vcpus_gpus_and_efa_match_ec2(ec2_types, name):
    ours, theirs = INSTANCE_TYPES[name], ec2_types[name]
    assert ours.vcpus == theirs["VCpuInfo"]["DefaultVCpus"]
    assert ours.memory_gib * 1024 == theirs["MemoryInfo"]["SizeInMiB"]
    gpus = sum(g["Count"] for g in theirs.get("GpuInfo", {}).get("Gpus", []))
    assert ours.gpus == gpus
    network = theirs["NetworkInfo"]
    assert ours.efa_interfaces == network.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0)
    assert ours.network_cards == network["MaximumNetworkCards"]


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
def test_local_nvme_disks_match_ec2(ec2_types, name):
    """nodeadm's RAID0 local-storage strategy is set only where EC2 says NVMe instance storage exists."""
    ours, storage = INSTANCE_TYPES[name], ec2_types[name].get("InstanceStorageInfo")
    if storage is None:
        assert ours.local_nvme_disks == 0 and ours.local_nvme_gb == 0
        return
    [disks] = storage["Disks"]
    assert storage["NvmeSupport"] == "required"
    assert (ours.local_nvme_disks, ours.local_nvme_gb) == (disks["Count"], disks["Count"] * disks["SizeInGB"])


@pytest.mark.parametrize("name", sorted(n for n, t in INSTANCE_TYPES.items() if t.supports_efa))
def test_efa_layout_fits_every_network_card(ec2_types, name):
    """"Maximize network bandwidth on Amazon EC2 instances with multiple network cards"
    (efa-acc-inst-types.html): one ENA primary, then EFA-only interfaces; each card takes no more
    interfaces than EC2 allows it, of types it supports, and every EFA device is used."""
    ours = INSTANCE_TYPES[name]
    cards = {c["NetworkCardIndex"]: c for c in ec2_types[name]["NetworkInfo"]["NetworkCards"]}
    layout = ours.network_interfaces()
    assert layout[0].as_tuple() == (0, 0, "interface")
    per_card = Counter(i.network_card_index for i in layout)
    for card, count in per_card.items():
        assert count <= cards[card]["MaximumNetworkInterfaces"], card
    for i in layout:
        assert i.interface_type in cards[i.network_card_index]["InterfaceTypes"], i
    assert sum(i.interface_type == "efa-only" for i in layout) == ours.efa_interfaces
    assert len({(i.network_card_index, i.device_index) for i in layout}) == len(layout)


@pytest.mark.parametrize("name", sorted(n for n, t in INSTANCE_TYPES.items() if t.supports_efa))
def test_every_efa_row_names_the_guide_section_it_follows(name):
    source = INSTANCE_TYPES[name].efa_layout_source
    assert source.startswith(EFA_GUIDE_URL) and "#" in source, source


@pytest.mark.parametrize("name", sorted(n for n, t in INSTANCE_TYPES.items() if t.supports_efa))
def test_card0_limits_match_ec2(ec2_types, name):
    ours, network = INSTANCE_TYPES[name], ec2_types[name]["NetworkInfo"]
    card0 = next(c for c in network["NetworkCards"] if c["NetworkCardIndex"] == 0)
    assert ours.card0_max_interfaces == card0["MaximumNetworkInterfaces"]
    assert ours.ipv4_per_interface == network["Ipv4AddressesPerInterface"]


@pytest.mark.parametrize("name", sorted(n for n, t in INSTANCE_TYPES.items() if t.supports_efa))
def test_max_pods_never_exceeds_the_addresses_the_vpc_cni_can_hand_out(ec2_types, name):
    """"Amazon EKS recommended maximum Pods for each Amazon EC2 instance type"
    (https://docs.aws.amazon.com/eks/latest/userguide/choosing-instance-type.html#determine-max-pods):
    max pods = ENIs x (IPv4 addresses per ENI - 1) + 2. The VPC CNI attaches ENIs on network card 0
    only, and each EFA-only interface our layout puts there takes a slot an ENI would have had; a
    kubelet maxPods above what is left admits pods that never get an address."""
    ours, network = INSTANCE_TYPES[name], ec2_types[name]["NetworkInfo"]
    card0 = next(c for c in network["NetworkCards"] if c["NetworkCardIndex"] == 0)
    taken = sum(1 for i in ours.network_interfaces() if i.network_card_index == 0 and i.interface_type == "efa-only")
    enis = card0["MaximumNetworkInterfaces"] - taken
    assert ours.max_pods <= enis * (network["Ipv4AddressesPerInterface"] - 1) + 2


def test_p5_admits_51_pods_with_its_efa_layout():
    assert INSTANCE_TYPES["p5.48xlarge"].max_pods == 51
    assert INSTANCE_TYPES["p5.48xlarge"].ips_per_node == 52


@pytest.mark.parametrize("name", sorted(n for n, t in INSTANCE_TYPES.items() if t.supports_efa))
def test_nccl_busbw_floor_is_a_share_of_a_published_figure_or_of_the_card(ec2_types, name):
    """The floor sits below what a healthy pair of the type is published to reach at >= 1 GiB (or
    validation and `ops doctor` fail a healthy group) and well up towards it (or it proves nothing);
    where nothing is published and no type shares the network, a share of the card's peak (EC2)."""
    from config.instance_types import NCCL_BUSBW_BASIS, NCCL_BUSBW_PUBLISHED

    floor = INSTANCE_TYPES[name].nccl_busbw_floor_gbps
    assert floor is not None
    if name in NCCL_BUSBW_BASIS:
        basis = NCCL_BUSBW_PUBLISHED[NCCL_BUSBW_BASIS[name]]
        assert basis.source and basis.detail.startswith(f"busbw {basis.gbps:g} at 1 GiB")
        figure = basis.gbps
        # Same network as the basis: EC2 gives both the same peak.
        peak = sum(c["PeakBandwidthInGbps"] for c in ec2_types[name]["NetworkInfo"]["NetworkCards"])
        basis_peak = sum(c["PeakBandwidthInGbps"] for c in ec2_types[NCCL_BUSBW_BASIS[name]]["NetworkInfo"]["NetworkCards"])
        assert peak == basis_peak, (name, peak, basis_peak)
    else:
        assert name.startswith("g"), f"{name}: a P type needs a published figure or a basis type"
        figure = sum(c["PeakBandwidthInGbps"] for c in ec2_types[name]["NetworkInfo"]["NetworkCards"]) / 8
    low, high = NCCL_BUSBW_FLOOR_SHARE
    assert low * figure <= floor <= high * figure, (floor, figure)
    if name.startswith("p"):
        assert floor > 2 * 100 / 8, "NCCL on TCP sockets (the 100 Gbps ENA card) must not pass"
