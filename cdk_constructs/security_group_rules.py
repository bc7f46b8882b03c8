"""Security-group rules between groups, with logical ids that do not depend on where the stage sits.

`SecurityGroup.add_ingress_rule(peer_group, ...)` names the rule after the peer's unique id, which
is the peer's whole construct path: `dev/Cluster/EfaSecurityGroup` when app.py builds the stage,
`Pipeline/dev/Cluster/EfaSecurityGroup` when the pipeline does. The same environment then gets two
sets of logical ids, and deploying one path after the other replaces every such rule: CloudFormation
creates the new resource (EC2 already has that rule) and then deletes the old one, which revokes
the rule both stand for. The rules here are named by their caller and so by their place in the
stack only, the same under any stage.

A group given an egress rule here must have `allow_all_outbound=False` and no other inline egress
rule: CloudFormation drops a VPC group's default allow-all egress as soon as the group has an egress
rule of its own, so the placeholder rule SecurityGroup keeps inline while it has none goes, as
SecurityGroup.add_egress_rule does it.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from constructs import Construct


def _ports(port: ec2.Port) -> dict:
    rule = port.to_rule_json()
    return {"ip_protocol": rule["ipProtocol"], "from_port": rule.get("fromPort"), "to_port": rule.get("toPort")}


def port_id(port: ec2.Port) -> str:
    """A construct-id fragment for a port: "Tcp988", "Tcp1018To1023", "AllTraffic"."""
    rule = port.to_rule_json()
    if rule["ipProtocol"] == "-1":
        return "AllTraffic"
    low, high = rule["fromPort"], rule["toPort"]
    return f"{rule['ipProtocol'].capitalize()}{low}" + (f"To{high}" if high != low else "")


def allow_from(scope: Construct, id: str, *, group: ec2.ISecurityGroup, source: ec2.ISecurityGroup,
               port: ec2.Port, description: str) -> ec2.CfnSecurityGroupIngress:
    """Let `source` into `group` on `port`; the rule is the construct `scope/id`."""
    return ec2.CfnSecurityGroupIngress(
        scope, id, group_id=group.security_group_id, source_security_group_id=source.security_group_id,
        description=description, **_ports(port))


def allow_to(scope: Construct, id: str, *, group: ec2.SecurityGroup, destination: ec2.ISecurityGroup,
             port: ec2.Port, description: str) -> ec2.CfnSecurityGroupEgress:
    """Let `group` out to `destination` on `port`; the rule is the construct `scope/id`."""
    if group.allow_all_outbound:
        raise ValueError(f"{group.node.path}: allows all outbound traffic; an egress rule would only narrow it "
                         f"(create it with allow_all_outbound=False)")
    # The group's own rules now close its default egress: drop SecurityGroup's placeholder.
    group.node.default_child.add_property_deletion_override("SecurityGroupEgress")
    return ec2.CfnSecurityGroupEgress(
        scope, id, group_id=group.security_group_id, destination_security_group_id=destination.security_group_id,
        description=description, **_ports(port))


def pin_rule(group: ec2.SecurityGroup, *, peer: ec2.ISecurityGroup, port: ec2.Port, direction: str,
             logical_id: str, description: str | None = None) -> cdk.CfnResource:
    """Give a rule that a library construct added with add_ingress_rule/add_egress_rule (named after the
    peer's path) a fixed logical id and, if given, a description (the library's names the path)."""
    word = {"ingress": "from", "egress": "to"}[direction]
    construct_id = f"{word} {cdk.Names.unique_id(peer)}:{port.to_string()}".replace("/", "_")
    rule = group.node.try_find_child(construct_id)
    if rule is None:
        raise AssertionError(f"{group.node.path}: no rule {construct_id!r} to pin")
    rule.override_logical_id(logical_id)
    if description is not None:
        rule.add_property_override("Description", description)
    return rule
