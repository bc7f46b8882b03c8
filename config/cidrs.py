"""Rules for lists of CIDR blocks that admit callers (the API endpoint's publicCidrs)."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from config.errors import ConfigError

EVERY_IPV4_ADDRESS = ipaddress.IPv4Network("0.0.0.0/0")

# Amazon EKS User Guide, service-quotas.html: "Public endpoint access CIDR ranges per cluster" is 40
# in each Region and cannot be adjusted.
MAX_PUBLIC_CIDRS = 40

# Amazon EKS User Guide, config-cluster-endpoint.html: a public access block "cannot include reserved
# addresses", linking Wikipedia's list of reserved IP addresses, whose IPv4 blocks these are.
# That list also holds the three documentation blocks (RFC 5737); they stay allowed, because the same
# sentence's example is 203.0.113.5/32 and examples, this project's dev environment among them, use
# them where a real range would go.
RESERVED_BLOCKS = tuple((ipaddress.IPv4Network(block), what) for block, what in (
    ("0.0.0.0/8", "this network"),
    ("10.0.0.0/8", "RFC 1918 private"),
    ("100.64.0.0/10", "carrier-grade NAT shared"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "RFC 1918 private"),
    ("192.0.0.0/24", "IETF protocol assignment"),
    ("192.88.99.0/24", "deprecated 6to4 relay"),
    ("192.168.0.0/16", "RFC 1918 private"),
    ("198.18.0.0/15", "benchmarking"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved for future use"),
))


def refuse_too_many(cidrs: Sequence[str], path: str) -> None:
    if len(cidrs) > MAX_PUBLIC_CIDRS:
        raise ConfigError(path, f"lists {len(cidrs)} CIDR blocks; EKS takes at most {MAX_PUBLIC_CIDRS} per cluster "
                                "(a quota that cannot be raised): merge neighbouring blocks")


def refuse_reserved(net: ipaddress.IPv4Network, path: str) -> None:
    for block, what in RESERVED_BLOCKS:
        if net.overlaps(block):
            raise ConfigError(path, f"{net} includes {block} ({what} addresses), which EKS does not take in "
                                    "publicAccessCidrs; list public ranges only")


def refuse_every_address(networks: Sequence[ipaddress.IPv4Network], path: str) -> None:
    """Blocks that together cover every IPv4 address (0.0.0.0/1 and 128.0.0.0/1, or any split of
    the space) open the endpoint to the internet as surely as 0.0.0.0/0 does."""
    if len(networks) > 1 and list(ipaddress.collapse_addresses(networks)) == [EVERY_IPV4_ADDRESS]:
        listed = ", ".join(str(n) for n in networks)
        raise ConfigError(path, f"{listed} together cover every IPv4 address, which opens the API to the internet "
                                "like 0.0.0.0/0; list your own ranges")
