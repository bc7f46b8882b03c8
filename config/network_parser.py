"""Where an environment's network goes: its zones, its VPC CIDR and who reaches the EKS API."""

from __future__ import annotations

import ipaddress
import re

from config.cidrs import refuse_every_address, refuse_reserved, refuse_too_many
from config.environment import ENDPOINT_ACCESS_TYPES, PUBLIC_SUBNET_MASK, EndpointAccess, private_subnet_mask
from config.errors import ConfigError
from config.reader import ObjectReader, one_of, string_list


def parse_availability_zones(r: ObjectReader, region: str) -> tuple[tuple[str, ...], str]:
    """(availabilityZones, trainingAvailabilityZone) of the environment `r` reads."""
    azs = string_list(r.required("availabilityZones", list), r.at("availabilityZones"))
    if len(azs) < 2:
        raise ConfigError(r.at("availabilityZones"),
                          f"needs at least 2 zones (the EKS control plane spans two), got {len(azs)}")
    az_pattern = re.compile(rf"^{re.escape(region)}[a-z]$")
    for i, az in enumerate(azs):
        if not az_pattern.fullmatch(az):
            raise ConfigError(f"{r.at('availabilityZones')}[{i}]",
                              f"{az!r} is not a zone of region {region} (expected {region}a, {region}b, ...)")
    if len(set(azs)) != len(azs):
        raise ConfigError(r.at("availabilityZones"), "lists a zone twice")
    training_az = r.required("trainingAvailabilityZone", str)
    if training_az not in azs:
        raise ConfigError(r.at("trainingAvailabilityZone"),
                          f"{training_az!r} must be one of availabilityZones ({', '.join(azs)})")
    return azs, training_az


# RFC 1918's three blocks; ipaddress's is_private also holds loopback, link-local and reserved ones.
_RFC_1918 = tuple(ipaddress.IPv4Network(b) for b in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))


def _written_as_cidr(net: ipaddress.IPv4Network, value: str, path: str) -> None:
    """The value goes on as written, and EKS and CDK take address/prefix length only, where
    ipaddress also reads a netmask, a host mask, a zero-padded prefix or a bare address."""
    if str(net) != value:
        raise ConfigError(path, f"must be written as {net} (address/prefix length), got {value!r}")


def parse_vpc_cidr(value: str, path: str, az_count: int) -> str:
    try:
        net = ipaddress.IPv4Network(value, strict=True)
    except ValueError:
        raise ConfigError(path, f"must be an IPv4 CIDR block such as 10.0.0.0/16, got {value!r}") from None
    _written_as_cidr(net, value, path)
    if not 16 <= net.prefixlen <= 24:
        raise ConfigError(path, f"prefix must be between /16 and /24 (AWS VPC limits), got /{net.prefixlen}")
    if not any(net.subnet_of(block) for block in _RFC_1918):
        raise ConfigError(path, f"must be a private (RFC 1918) range, got {value}")
    # Public subnets take /24 each from the second half; both halves must fit.
    if private_subnet_mask(value, az_count) > 27 or az_count * 2 ** (32 - PUBLIC_SUBNET_MASK) > net.num_addresses // 2:
        raise ConfigError(path, f"/{net.prefixlen} is too small for {az_count} zones; use /20 or larger")
    return value


def parse_endpoint(raw: dict, path: str) -> EndpointAccess:
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
    refuse_too_many(cidrs, r.at("publicCidrs"))
    networks = []
    for i, cidr in enumerate(cidrs):
        try:
            net = ipaddress.IPv4Network(cidr, strict=True)
        except ValueError:
            raise ConfigError(f"{r.at('publicCidrs')}[{i}]", f"must be an IPv4 CIDR block, got {cidr!r}") from None
        _written_as_cidr(net, cidr, f"{r.at('publicCidrs')}[{i}]")
        if net.prefixlen == 0:
            raise ConfigError(f"{r.at('publicCidrs')}[{i}]", "0.0.0.0/0 opens the API to the internet; list your own ranges")
        if net in networks:
            raise ConfigError(f"{r.at('publicCidrs')}[{i}]",
                              f"{net} is already publicCidrs[{networks.index(net)}]; list each block once")
        networks.append(net)
    refuse_every_address(networks, r.at("publicCidrs"))
    # After the check above, so that blocks covering every address are named as that.
    for i, net in enumerate(networks):
        refuse_reserved(net, f"{r.at('publicCidrs')}[{i}]")
    return EndpointAccess(kind, cidrs)
