"""What an environment costs while it exists, from the dated price table (ops/prices.py).

Three scenarios: idle (the control plane, NAT gateways, system nodes at minSize, FSx, and any
training group whose minSize is above 0), every group at desiredSize, and every group at maxSize.
The control plane is priced at the standard-support rate; with upgrade policy extended the
summary says what it costs once standard support ends. Data transfer, NAT data processing, EBS
root volumes, CloudWatch logs and ECR storage are not included, and the summary says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from config import Environment
from config.eks_versions import BY_VERSION as EKS_VERSIONS
from ops import prices


@dataclass(frozen=True)
class Item:
    label: str
    hourly: float | None  # None: no list price in the table


@dataclass(frozen=True)
class Scenario:
    name: str
    items: tuple[Item, ...]

    @property
    def hourly(self) -> float:
        """The sum of the priced items (see `partial`)."""
        return sum(i.hourly for i in self.items if i.hourly is not None)

    @property
    def monthly(self) -> float:
        return self.hourly * prices.HOURS_PER_MONTH

    @property
    def partial(self) -> bool:
        return any(i.hourly is None for i in self.items)


def _nodes(label: str, count: int, instance_type: str) -> Item:
    price = prices.instance_hourly(instance_type)
    return Item(f"{label} {count} x {instance_type}", None if price is None else count * price)


def base_items(env: Environment) -> list[Item]:
    """What runs whatever the node groups do."""
    zones = len(env.availability_zones)
    return [Item("EKS control plane", prices.EKS_CLUSTER_HOURLY_USD),
            Item(f"{zones} NAT gateways", zones * prices.NAT_GATEWAY_HOURLY_USD),
            Item(f"FSx {env.fsx.storage_capacity_gib} GiB",
                 prices.fsx_hourly(env.fsx.storage_capacity_gib, env.fsx.throughput_per_tib))]


def scenarios(env: Environment) -> list[Scenario]:
    system = env.system_nodegroup
    groups = env.training_nodegroups
    base = base_items(env)
    # The stack starts the system group at minSize (its desired size).
    idle = base + [_nodes("system", system.min_size, system.instance_type_name)] + [
        _nodes(g.name, g.min_size, g.instance_type_name) for g in groups if g.min_size]
    desired = base + [_nodes("system", system.min_size, system.instance_type_name)] + [
        _nodes(g.name, g.desired_size, g.instance_type_name) for g in groups if g.desired_size]
    at_max = base + [_nodes("system", system.max_size, system.instance_type_name)] + [
        _nodes(g.name, g.max_size, g.instance_type_name) for g in groups]
    return [Scenario("idle", tuple(idle)), Scenario("at desiredSize", tuple(desired)),
            Scenario("at maxSize", tuple(at_max))]


def idle(env: Environment) -> Scenario:
    return scenarios(env)[0]


def _money(value: float) -> str:
    return f"${value:,.2f}"


def price_note(env: Environment) -> str:
    where = "" if env.region == prices.PRICES_REGION else f"; {env.region} priced at {prices.PRICES_REGION} rates"
    return f"On-Demand list prices of {prices.PRICES_AS_OF}{where}"


def upgrade_policy_line(env: Environment) -> str:
    standard = f"{_money(prices.EKS_CLUSTER_HOURLY_USD)}/hour in standard support"
    row = EKS_VERSIONS.get(env.kubernetes_version)
    if env.upgrade_policy == "standard" or row is None:
        return (f"control plane: {standard}; upgrade policy {env.upgrade_policy}: EKS upgrades the version when "
                "standard support ends, so the rate stays")
    extra = (prices.EKS_EXTENDED_SUPPORT_CLUSTER_HOURLY_USD - prices.EKS_CLUSTER_HOURLY_USD) * prices.HOURS_PER_MONTH
    return (f"control plane: {standard} until {row.end_of_standard_support}, then "
            f"{_money(prices.EKS_EXTENDED_SUPPORT_CLUSTER_HOURLY_USD)}/hour (upgrade policy extended): "
            f"+{_money(extra)}/month")


def render(env: Environment) -> list[str]:
    """The cost section of the synth summary."""
    lines = [f"Cost ({price_note(env)}; {prices.HOURS_PER_MONTH} hours a month)"]
    rows = scenarios(env)
    width = max(len(s.name) for s in rows)
    for s in rows:
        partial = "  (partial: " + ", ".join(i.label for i in s.items if i.hourly is None) + " not priced)" \
            if s.partial else ""
        lines.append(f"  {s.name:<{width}}  {_money(s.hourly):>11}/hour  {_money(s.monthly):>12}/month{partial}")
    lines.append("  idle = " + " + ".join(f"{i.label} {_money(i.hourly) if i.hourly is not None else '?'}"
                                          for i in rows[0].items))
    lines.append(f"  {upgrade_policy_line(env)}")
    for g in env.gpu_nodegroups:
        if g.capacity.type == "reserved":
            # EC2 bills an On-Demand Capacity Reservation at the On-Demand rate whether instances run in it or not.
            lines.append(f"  reservation {g.capacity.reservation_id} ({g.name}): EC2 bills it at the On-Demand rate "
                         "while it is active, whether nodes run or not; not counted above")
    lines.append("  not included: data transfer and NAT data processing, EBS root volumes, logs, ECR storage")
    return lines
