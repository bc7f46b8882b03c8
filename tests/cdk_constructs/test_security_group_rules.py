"""Rules between security groups named by their place in the stack, never by a peer's construct path."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template

from cdk_constructs.security_group_rules import allow_from, allow_to, pin_rule, port_id


def groups(stage_id: str):
    app = cdk.App()
    stack = cdk.Stack(cdk.Stage(app, stage_id), "Stack")
    vpc = ec2.Vpc(stack, "Vpc", max_azs=1, nat_gateways=0, subnet_configuration=[])
    a = ec2.SecurityGroup(stack, "A", vpc=vpc, allow_all_outbound=False)
    b = ec2.SecurityGroup(stack, "B", vpc=vpc, allow_all_outbound=False)
    return stack, a, b


def rules(stack: cdk.Stack) -> dict[str, dict]:
    return {k: r for k, r in Template.from_stack(stack).to_json()["Resources"].items()
            if r["Type"].startswith("AWS::EC2::SecurityGroupIngress") or r["Type"].startswith("AWS::EC2::SecurityGroupE")}


@pytest.mark.parametrize("port, expected", [(ec2.Port.tcp(988), "Tcp988"), (ec2.Port.tcp_range(1018, 1023), "Tcp1018To1023"),
                                            (ec2.Port.all_traffic(), "AllTraffic"), (ec2.Port.udp(53), "Udp53")])
def test_port_ids_read_as_the_port(port, expected):
    assert port_id(port) == expected


def test_a_rule_has_the_same_logical_id_in_any_stage():
    ids = []
    for stage_id in ("dev", "Pipelinedev"):
        stack, a, b = groups(stage_id)
        allow_from(a, "FromB", group=a, source=b, port=ec2.Port.tcp(988), description="from b")
        allow_to(a, "ToB", group=a, destination=b, port=ec2.Port.tcp(988), description="to b")
        ids.append(sorted(rules(stack)))
    assert ids[0] == ids[1] and len(ids[0]) == 2


def test_the_library_call_it_replaces_differs_by_stage():
    """Why the module exists: add_ingress_rule names the rule after the peer's path."""
    ids = []
    for stage_id in ("dev", "Pipelinedev"):
        stack, a, b = groups(stage_id)
        a.add_ingress_rule(b, ec2.Port.tcp(988))
        ids.append(sorted(rules(stack)))
    assert ids[0] != ids[1]


def test_an_egress_rule_closes_the_groups_default_egress_without_a_placeholder():
    stack, a, b = groups("dev")
    allow_to(a, "ToB", group=a, destination=b, port=ec2.Port.tcp(988), description="to b")
    template = Template.from_stack(stack).to_json()["Resources"]
    group = next(r for k, r in template.items() if k.startswith("A") and r["Type"] == "AWS::EC2::SecurityGroup")
    assert "SecurityGroupEgress" not in group["Properties"]
    [egress] = [r for r in template.values() if r["Type"] == "AWS::EC2::SecurityGroupEgress"]
    assert egress["Properties"]["FromPort"] == egress["Properties"]["ToPort"] == 988


def test_an_egress_rule_on_a_group_that_allows_all_outbound_is_refused():
    stack, _, b = groups("dev")
    open_group = ec2.SecurityGroup(stack, "Open", vpc=b.node.scope.node.find_child("Vpc"))
    with pytest.raises(ValueError, match="allows all outbound traffic"):
        allow_to(open_group, "ToB", group=open_group, destination=b, port=ec2.Port.tcp(988), description="to b")


def test_pin_renames_a_library_rule_and_drops_the_path_from_its_description():
    stack, a, _ = groups("dev")
    a.add_ingress_rule(a, ec2.Port.tcp_range(988, 1023))
    pin_rule(a, peer=a, port=ec2.Port.tcp_range(988, 1023), direction="ingress", logical_id="AFromItself",
             description="between servers")
    found = rules(stack)
    assert list(found) == ["AFromItself"] and found["AFromItself"]["Properties"]["Description"] == "between servers"
    with pytest.raises(AssertionError, match="no rule"):
        pin_rule(a, peer=a, port=ec2.Port.tcp(22), direction="ingress", logical_id="X", description="x")
