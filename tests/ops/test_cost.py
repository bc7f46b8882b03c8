"""The cost the synth summary and `ops plan` show, recomputed here from the dated price table."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ops import cost, prices
from ops.envconfig import load

P = prices


def money(value: float) -> str:
    return f"${value:,.2f}"


def base(zones: int, fsx_gib: int, per_tib: int) -> float:
    return (P.EKS_CLUSTER_HOURLY_USD + zones * P.NAT_GATEWAY_HOURLY_USD
            + fsx_gib * P.FSX_PERSISTENT_2_GB_MONTH_USD[per_tib] / P.HOURS_PER_MONTH)


I = P.INSTANCE_HOURLY_USD
# dev: 3 zones, FSx 1200 GiB at 250, system m5.xlarge 2..4, p4d 0/0/2, p5 0/0/2, cpu m5.2xlarge 0/2/4.
DEV = {"idle": base(3, 1200, 250) + 2 * I["m5.xlarge"],
       "at desiredSize": base(3, 1200, 250) + 2 * I["m5.xlarge"] + 2 * I["m5.2xlarge"],
       "at maxSize": base(3, 1200, 250) + 4 * I["m5.xlarge"] + 2 * I["p4d.24xlarge"] + 2 * I["p5.48xlarge"]
       + 4 * I["m5.2xlarge"]}
# prod: 3 zones, FSx 4800 GiB at 500, system m5.xlarge 2..6, p5 0/0/16 (reserved), cpu m5.2xlarge 0/0/4.
PROD = {"idle": base(3, 4800, 500) + 2 * I["m5.xlarge"],
        "at desiredSize": base(3, 4800, 500) + 2 * I["m5.xlarge"],
        "at maxSize": base(3, 4800, 500) + 6 * I["m5.xlarge"] + 16 * I["p5.48xlarge"] + 4 * I["m5.2xlarge"]}


@pytest.mark.parametrize("name, expected", [("dev", DEV), ("prod", PROD)])
def test_each_scenario_is_the_price_table_times_the_configured_sizes(name, expected):
    found = {s.name: s for s in cost.scenarios(load(name))}
    for scenario, hourly in expected.items():
        assert found[scenario].hourly == pytest.approx(hourly), scenario
        assert found[scenario].monthly == pytest.approx(hourly * 730), scenario
        assert not found[scenario].partial


@pytest.mark.parametrize("name, expected", [("dev", DEV), ("prod", PROD)])
def test_the_summary_section_prints_per_hour_and_per_month_with_the_table_date(name, expected):
    lines = cost.render(load(name))
    assert lines[0].startswith(f"Cost (On-Demand list prices of {P.PRICES_AS_OF}")
    for scenario, hourly in expected.items():
        row = next(line for line in lines if line.split("$")[0].strip() == scenario)
        assert row.split()[-2:] == [f"{money(hourly)}/hour", f"{money(hourly * 730)}/month"], row


def test_a_region_other_than_the_tables_is_said():
    assert "us-west-2 priced at us-east-1 rates" in cost.render(load("dev"))[0]


def test_extended_upgrade_policy_says_what_the_control_plane_costs_after_standard_support():
    """Amazon EKS pricing and kubernetes-versions.html: extended support bills a higher per-cluster
    hourly rate once standard support ends; STANDARD upgrades the cluster instead."""
    extended = replace(load("dev"), upgrade_policy="extended")
    line = next(line for line in cost.render(extended) if "control plane:" in line)
    extra = (P.EKS_EXTENDED_SUPPORT_CLUSTER_HOURLY_USD - P.EKS_CLUSTER_HOURLY_USD) * 730
    assert "until 2027-03-27, then $0.60/hour (upgrade policy extended)" in line and f"+{money(extra)}/month" in line
    standard = next(line for line in cost.render(load("dev")) if "control plane:" in line)
    assert "EKS upgrades the version when standard support ends" in standard


def test_a_reservation_is_named_as_billed_whether_nodes_run_or_not():
    assert any("reservation cr-0123456789abcdef0 (p5): EC2 bills it at the On-Demand rate" in line
               for line in cost.render(load("prod")))


def test_an_instance_type_without_a_list_price_makes_the_total_partial():
    dev = load("dev")
    group = replace(dev.gpu_nodegroups[0], instance_type_name="p5en.48xlarge")
    at_max = cost.scenarios(replace(dev, gpu_nodegroups=(group,)))[2]
    assert at_max.partial
    assert "(partial: p4d 2 x p5en.48xlarge not priced)" in "\n".join(cost.render(replace(dev, gpu_nodegroups=(group,))))
