"""A small evaluator of Kubernetes NetworkPolicy, as the Amazon VPC CNI enforces it, for tests.

Semantics of the NetworkPolicy API ("Network Policies", Kubernetes docs): a pod is isolated for a
direction when a policy of its namespace selects it with that policyType (policyTypes defaults to
Ingress, plus Egress when the policy has egress rules); an isolated pod accepts what the union of
its policies' rules allows. A rule allows a peer it lists (podSelector in the policy's namespace,
namespaceSelector, both, or ipBlock minus except; no peers: anyone) on a port it lists (protocol
default TCP, a number, a named container port, or a range up to endPort; no ports: every port). A
connection needs the source's egress and the destination's ingress.

VPC CNI specifics (aws/amazon-network-policy-controller-k8s pkg/resolvers/endpoints.go): an ipBlock
matches pod addresses too (pods have VPC addresses), and egress is filtered on the pod's own
interface before the node translates a Service address, so a connection to a Service is allowed by
an ipBlock holding its ClusterIP, or by a pod peer whose podSelector matches the Service's selector
(getMatchingServiceClusterIPs; headless Services resolve to pods directly).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Union


@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str
    ip: str
    labels: dict = field(default_factory=dict, hash=False)
    ports: dict = field(default_factory=dict, hash=False)  # named container ports: name -> (protocol, number)


@dataclass(frozen=True)
class Address:
    """Anything that is not a pod: the API server, S3, the node's agents."""

    name: str
    ip: str


@dataclass(frozen=True)
class Service:
    name: str
    namespace: str
    cluster_ip: str
    selector: dict = field(default_factory=dict, hash=False)
    ports: dict = field(default_factory=dict, hash=False)  # port -> targetPort


Endpoint = Union[Pod, Address, Service]


def selects(selector: dict | None, labels: dict) -> bool:
    """A LabelSelector: matchLabels and matchExpressions; empty or absent selects everything."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if (op == "In" and labels.get(key) not in values) or (op == "NotIn" and labels.get(key) in values) \
                or (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels):
            return False
    return True


def _in_block(ip: str, block: dict) -> bool:
    address = ipaddress.ip_address(ip)
    return address in ipaddress.ip_network(block["cidr"]) and \
        not any(address in ipaddress.ip_network(e) for e in block.get("except") or [])


class Cluster:
    def __init__(self, policies: list[dict], namespaces: dict[str, dict], services: list[Service] = (),
                 pods: list[Pod] = ()):
        """`namespaces`: name -> labels (kubernetes.io/metadata.name is added as the API server does)."""
        self.policies = policies
        self.namespaces = {n: {**labels, "kubernetes.io/metadata.name": n} for n, labels in namespaces.items()}
        self.services = list(services)
        self.pods = list(pods)

    @staticmethod
    def _types(policy: dict) -> list[str]:
        spec = policy["spec"]
        return spec.get("policyTypes") or (["Ingress"] + (["Egress"] if "egress" in spec else []))

    def _policies_for(self, pod: Pod, direction: str) -> list[dict]:
        return [p for p in self.policies if p["metadata"]["namespace"] == pod.namespace
                and direction in self._types(p) and selects(p["spec"].get("podSelector"), pod.labels)]

    def _peer(self, peer: dict, endpoint: Endpoint, policy_namespace: str) -> bool:
        """Whether a rule's peer covers `endpoint`; a Service is covered as the VPC CNI resolves it."""
        if isinstance(endpoint, Address):
            return "ipBlock" in peer and _in_block(endpoint.ip, peer["ipBlock"])
        service = isinstance(endpoint, Service)
        if "ipBlock" in peer:
            return _in_block(endpoint.cluster_ip if service else endpoint.ip, peer["ipBlock"])
        if "namespaceSelector" in peer:
            in_namespace = selects(peer["namespaceSelector"], self.namespaces.get(endpoint.namespace, {}))
        else:
            in_namespace = endpoint.namespace == policy_namespace
        labels = endpoint.selector if service else endpoint.labels
        return in_namespace and (bool(labels) or not service) and selects(peer.get("podSelector"), labels)

    @staticmethod
    def _port(rule: dict, port: int, protocol: str, named: dict) -> bool:
        entries = rule.get("ports")
        if not entries:
            return True
        for entry in entries:
            if entry.get("protocol", "TCP") != protocol:
                continue
            wanted = entry.get("port")
            if wanted is None:
                return True
            if isinstance(wanted, str):
                if named.get(wanted) == (protocol, port):
                    return True
            elif wanted <= port <= entry.get("endPort", wanted):
                return True
        return False

    def _permits(self, pod: Pod, direction: str, other: Endpoint, port: int, protocol: str, named: dict) -> bool:
        """Whether `pod`'s policies let it reach (Egress) or be reached by (Ingress) `other`."""
        policies = self._policies_for(pod, direction)
        if not policies:
            return True
        rules_key, peers_key = ("egress", "to") if direction == "Egress" else ("ingress", "from")
        for policy in policies:
            for rule in policy["spec"].get(rules_key) or []:
                if self._port(rule, port, protocol, named) and (
                        not rule.get(peers_key)
                        or any(self._peer(peer, other, policy["metadata"]["namespace"]) for peer in rule[peers_key])):
                    return True
        return False

    def allowed(self, src: Pod | Address, dst: Endpoint, port: int, protocol: str = "TCP") -> bool:
        """Whether `src` can open a connection to `dst` on `port`. To a Service: the source's egress
        as the VPC CNI sees it (the ClusterIP), then some backing pod's ingress on the target port."""
        named = dst.ports if isinstance(dst, Pod) else {}
        if isinstance(src, Pod) and not self._permits(src, "Egress", dst, port, protocol, named):
            return False
        if isinstance(dst, Pod):
            return self._permits(dst, "Ingress", src, port, protocol, dst.ports)
        if isinstance(dst, Service):
            backends = [p for p in self.pods if p.namespace == dst.namespace and dst.selector
                        and selects({"matchLabels": dst.selector}, p.labels)]
            return any(self._permits(p, "Ingress", src, dst.ports[port], protocol, p.ports) for p in backends)
        return True
