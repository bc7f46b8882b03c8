"""The pods of the add-ons' own workloads (the device plugins' DaemonSets, the etcd and Training
Operator Deployments) and of the GPU check Jobs: long-lived or cluster-level services, each selected
by a readable name label, hardened unless its upstream manifest needs otherwise.

These objects were built with cdk8s-plus before, which writes every default it knows and sorts
keys. They keep that text (`rendered`): a changed pod template restarts the pods on the next
deploy, and a restarted etcd forgets the rendezvous rounds of running jobs.
"""

from __future__ import annotations

from typing import Any

from config.kubernetes import ROLE_LABEL, SYSTEM_ROLE
from k8s.pods.names import NAME_LABEL
from k8s.pods.security import container_security_context, pod_security_context

# Defaults cdk8s-plus wrote into every pod it built.
POD_DEFAULTS = {"dnsPolicy": "ClusterFirst", "hostNetwork": False, "restartPolicy": "Always",
                "setHostnameAsFQDN": False, "terminationGracePeriodSeconds": 30}
# cdk8s-plus labelled each pod with its construct's address, and selected some of them by it
# (a Service, a NetworkPolicy); the label stays for the reason above.
ADDRESS_LABEL = "cdk8s.io/metadata.addr"


def rendered(value: Any) -> Any:
    """`value` with the keys of every mapping sorted, as cdk8s-plus rendered these objects."""
    if isinstance(value, dict):
        return {key: rendered(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [rendered(item) for item in value]
    return value


def own_pods(name: str, address: str | None = None) -> dict[str, str]:
    """The labels of a workload's pods: its readable name, and the address label its pods had."""
    return {NAME_LABEL: name, **({ADDRESS_LABEL: address} if address else {})}


def hardened_pod_security_context(uid: int, *, fs_group: bool = False) -> dict:
    """The one hardened pod context (k8s/pods/security.py), with cdk8s-plus's fsGroupChangePolicy."""
    return {**pod_security_context(uid, fs_group=fs_group), "fsGroupChangePolicy": "Always"}


def hardened_container_security_context(uid: int) -> dict:
    """The one hardened container context (k8s/pods/security.py) with a read-only root file system,
    and the pod's user restated on the container, as cdk8s-plus wrote it."""
    return {**container_security_context(read_only_root_filesystem=True), "privileged": False,
            "runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid}


def container(*, name: str, image: str, resources: dict, security_context: dict, **fields) -> dict:
    # Images are pinned by tag: IfNotPresent saves a registry round-trip per pod.
    return {"name": name, "image": image, "imagePullPolicy": "IfNotPresent", "resources": resources,
            "securityContext": security_context, **fields}


def pod_spec(*, containers: list[dict], security_context: dict, automount_token: bool = False, **fields) -> dict:
    """A pod of these workloads; no API token unless it calls the API server."""
    return {**POD_DEFAULTS, "automountServiceAccountToken": automount_token, "containers": containers,
            "securityContext": security_context, **fields}


def required_node_affinity(key: str, values: list[str]) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}]}}}


def control_plane_affinity(name: str) -> dict:
    """Keep a controller off the GPU nodes: prefer the system node group, and a node without another
    replica of `name`. Preferred, not required: a rolling update adds a third pod, and the system
    group may have only two nodes."""
    return {
        "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {
            "matchExpressions": [{"key": ROLE_LABEL, "operator": "In", "values": [SYSTEM_ROLE]}]}}]},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
            "labelSelector": {"matchLabels": {NAME_LABEL: name}}, "topologyKey": "kubernetes.io/hostname"}}]},
    }


def host_path_volume(name: str, path: str, type: str = "") -> dict:
    return {"name": name, "hostPath": {"path": path, "type": type}}


def exec_probe(command: list[str], *, period_s: int, timeout_s: int, initial_delay_s: int | None = None) -> dict:
    probe = {"exec": {"command": command}, "failureThreshold": 3, "periodSeconds": period_s,
             "timeoutSeconds": timeout_s}
    if initial_delay_s is not None:
        probe["initialDelaySeconds"] = initial_delay_s
    return probe


def http_probe(path: str, port: int | str, *, initial_delay_s: int, period_s: int, timeout_s: int) -> dict:
    return {"httpGet": {"path": path, "port": port, "scheme": "HTTP"}, "failureThreshold": 3,
            "initialDelaySeconds": initial_delay_s, "periodSeconds": period_s, "timeoutSeconds": timeout_s}


def _template(labels: dict, spec: dict, annotations: dict | None) -> dict:
    metadata: dict = {"labels": labels}
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": spec}


def daemon_set(*, name: str, namespace: str, pod_labels: dict, pod: dict) -> dict:
    return rendered({
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": namespace},
        "spec": {"minReadySeconds": 0, "selector": {"matchLabels": {NAME_LABEL: pod_labels[NAME_LABEL]}},
                 "template": _template(pod_labels, pod, None)}})


def deployment(*, name: str, namespace: str, replicas: int, pod_labels: dict, pod: dict, recreate: bool = False,
               pod_annotations: dict | None = None) -> dict:
    """`recreate`: the old pods go before new ones start (else a rolling update, 25% surge)."""
    strategy = {"type": "Recreate"} if recreate else {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}
    return rendered({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
        "spec": {"minReadySeconds": 0, "progressDeadlineSeconds": 600, "replicas": replicas,
                 "selector": {"matchLabels": {NAME_LABEL: pod_labels[NAME_LABEL]}}, "strategy": strategy,
                 "template": _template(pod_labels, pod, pod_annotations)}})


def cluster_identity(account: str, namespace: str, rules: list[dict], *, role: str | None = None,
                     binding: str | None = None) -> list[dict]:
    """A node agent's ServiceAccount and the ClusterRole (`rules`) bound to it; role and binding are
    named after the account unless upstream names them otherwise."""
    role, binding = role or account, binding or account
    rbac = "rbac.authorization.k8s.io/v1"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": namespace}},
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": role}, "rules": rules},
        {"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": binding},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
         "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]},
    ]
