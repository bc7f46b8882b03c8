"""Rules for lists of CIDR blocks that admit callers (the API endpoint's publicCidrs)."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from config.errors import ConfigError

EVERY_IPV4_ADDRESS = ipaddress.IPv4Network("0.0.0.0/0")


def refuse_every_address(networks: Sequence[ipaddress.IPv4Network], path: str) -> None:
    """Blocks that together cover every IPv4 address (0.0.0.0/1 and 128.0.0.0/1, or any split of
    the space) open the endpoint to the internet as surely as 0.0.0.0/0 does."""
    if len(networks) > 1 and list(ipaddress.collapse_addresses(networks)) == [EVERY_IPV4_ADDRESS]:
        listed = ", ".join(str(n) for n in networks)
        raise ConfigError(path, f"{listed} together cover every IPv4 address, which opens the API to the internet "
                                "like 0.0.0.0/0; list your own ranges")
