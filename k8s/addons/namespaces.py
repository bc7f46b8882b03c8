"""Namespaces: created first, because every other add-on puts objects in them.

Each namespace we create carries Pod Security Admission labels ("Pod Security Admission",
https://kubernetes.io/docs/concepts/security/pod-security-admission/): the level the API server
enforces, and the levels it warns the client about and records in the audit log, each pinned to the
cluster's Kubernetes minor so an upgrade does not change what is admitted. The device plugins run in
kube-system, which EKS owns; we label no namespace we do not create.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from config.kubernetes import KUBEFLOW_SYSTEM_NAMESPACE, TRAINING_NAMESPACE
from k8s.addons import AddOn
from k8s.pods.names import KUBEFLOW_NAMESPACE

PSA_PREFIX = "pod-security.kubernetes.io"
PSA_MODES = ("enforce", "warn", "audit")
PSA_LEVELS = ("privileged", "baseline", "restricted")


@dataclass(frozen=True)
class PodSecurity:
    """The Pod Security Standards level enforced in a namespace, and the one warned about and audited."""

    enforce: str
    report: str  # warn and audit

    def levels(self) -> dict[str, str]:
        return {"enforce": self.enforce, "warn": self.report, "audit": self.report}


# kubeflow runs only the Training Operator, which meets restricted. training enforces baseline: the
# MPIJob launcher pod the v1.9.4 operator builds gets an init container (kubectl-delivery) with no
# securityContext at all (pkg/controller.v1/mpi/mpijob_controller.go newLauncher), which restricted
# rejects. Every pod template we render meets restricted, and warn/audit at restricted say so of
# every pod that does not. baseline still refuses privileged containers, host namespaces, host paths
# and added capabilities; EFA needs none of them (k8s/pods/security.py container_security_context).
POD_SECURITY: Mapping[str, PodSecurity] = {
    KUBEFLOW_NAMESPACE: PodSecurity(enforce="restricted", report="restricted"),
    TRAINING_NAMESPACE: PodSecurity(enforce="baseline", report="restricted"),
}


# trainingApi v2's controllers (Kubeflow Trainer, JobSet) meet restricted as the Training Operator does.
V2_POD_SECURITY: Mapping[str, PodSecurity] = {
    KUBEFLOW_SYSTEM_NAMESPACE: PodSecurity(enforce="restricted", report="restricted"),
}


def pod_security_labels(levels: PodSecurity, kubernetes_version: str) -> dict[str, str]:
    """The namespace labels for `levels`, each version pinned to `kubernetes_version`'s minor."""
    version = "v" + ".".join(kubernetes_version.split(".")[:2])
    labels = {}
    for mode, level in levels.levels().items():
        if level not in PSA_LEVELS:
            raise ValueError(f"pod security level {level!r} for {mode}: must be one of {', '.join(PSA_LEVELS)}")
        labels[f"{PSA_PREFIX}/{mode}"] = level
        labels[f"{PSA_PREFIX}/{mode}-version"] = version
    return labels


def namespaces(kubernetes_version: str, pod_security: Mapping[str, PodSecurity] = POD_SECURITY) -> list[dict]:
    return [{"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": name, "labels": pod_security_labels(levels, kubernetes_version)}, "spec": {}}
            for name, levels in pod_security.items()]


def environment_namespaces(config) -> list[dict]:
    extra = V2_POD_SECURITY if config.training_api == "v2" else {}
    return namespaces(config.kubernetes_version, {**POD_SECURITY, **extra})


ADDON = AddOn(name="namespaces", objects=lambda config, values: environment_namespaces(config))
