"""etcd for torch's etcd-v2 rendezvous: one member (k8s/pods/etcd.py), its Service, and a
NetworkPolicy that lets in only the pods that declare themselves rendezvous clients."""

from __future__ import annotations

from config.kubernetes import TRAINING_NAMESPACE
from k8s.addons import AddOn
from k8s.pods.etcd import POD_ADDRESS, POD_LABELS, etcd_deployment
from k8s.pods.names import ETCD_CLIENT_LABEL, ETCD_CLIENT_PORT, ETCD_SERVICE, NAME_LABEL
from k8s.pods.network_policy import match_labels, network_policy, tcp_ports
from k8s.pods.workload import ADDRESS_LABEL, rendered


def etcd_service() -> dict:
    """Selected by the readable name label, the one k8s/pods/network_policy.py's egress rule for
    etcd clients names: the VPC CNI allows egress to a Service's ClusterIP only when a rule's
    podSelector matches the Service's own selector (aws/amazon-network-policy-controller-k8s,
    getMatchingServiceClusterIPs)."""
    return rendered({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": ETCD_SERVICE, "namespace": TRAINING_NAMESPACE},
        "spec": {"externalIPs": [], "type": "ClusterIP", "selector": {NAME_LABEL: POD_LABELS[NAME_LABEL]},
                 "ports": [{"name": "client", "port": ETCD_CLIENT_PORT, "targetPort": ETCD_CLIENT_PORT}]}})


def clients_only_policy() -> dict:
    """Only pods that declare themselves rendezvous clients (the PyTorchJob workers) get in."""
    return rendered(network_policy(
        f"{ETCD_SERVICE}-clients-only", TRAINING_NAMESPACE, match_labels(**{ADDRESS_LABEL: POD_ADDRESS}),
        ingress=[{"from": [{"podSelector": match_labels(**{ETCD_CLIENT_LABEL: "true"})}],
                  "ports": tcp_ports(ETCD_CLIENT_PORT)}]))


ADDON = AddOn(
    name="etcd", component="rendezvous", depends_on=("namespaces", "priority-classes"),
    objects=lambda config, values: [etcd_deployment(), etcd_service(), clients_only_policy()])
