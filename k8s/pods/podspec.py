"""Every pod template we render, checked against the Kubernetes schema of the cluster's version.

Our structural CRDs (k8s/addons/training_operator_crds.py) keep the pod templates of PyTorchJobs
and MPIJobs open, and the upstream CRDs leave them open to unknown fields too. The operator decodes
a job into its typed Go structs and builds the pods from those, so a misspelt field in a template
(`imagePullPolice`, `volumeMount`) is not rejected by anyone: it silently disappears. This module
makes it an error here, before anything reaches a cluster: each template is validated as a
PodTemplate with kubernetes-validate's strict schemas (unknown fields rejected), by the pod
builders, which the charts and `ops` share.
"""

from __future__ import annotations

from typing import Iterator

import kubernetes_validate

from config.errors import ConfigError

_WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job")
_REPLICA_SPECS = {"PyTorchJob": "pytorchReplicaSpecs", "MPIJob": "mpiReplicaSpecs"}
_RUNTIMES = ("TrainingRuntime", "ClusterTrainingRuntime")  # Kubeflow Trainer v2: a JobSet template


def pod_templates(manifest: dict) -> Iterator[tuple[str, dict]]:
    """(where, pod template) for every pod template the object carries."""
    kind, spec = manifest["kind"], manifest.get("spec", {})
    metadata = manifest["metadata"]
    name = f"{kind}/{metadata.get('name') or metadata['generateName']}"
    if kind in _WORKLOADS:
        yield name, spec["template"]
    elif kind == "CronJob":
        yield name, spec["jobTemplate"]["spec"]["template"]
    elif kind in _REPLICA_SPECS:
        for role, replica in spec.get(_REPLICA_SPECS[kind], {}).items():
            yield f"{name} {role}", replica["template"]
    elif kind in _RUNTIMES:
        for job in spec["template"]["spec"].get("replicatedJobs", []):
            yield f"{name} {job['name']}", job["template"]["spec"]["template"]


def validate_pod_templates(manifest: dict, kubernetes_version: str) -> int:
    """Raise ConfigError (one line, naming the object, the replica and the field) unless every pod
    template of `manifest` is a valid PodTemplateSpec of `kubernetes_version` with no unknown
    field. Returns how many templates were checked."""
    checked = 0
    for where, template in pod_templates(manifest):
        wrapped = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "check"}, "template": template}
        try:
            kubernetes_validate.validate(wrapped, kubernetes_version, strict=True)
        except kubernetes_validate.ValidationError as err:
            path = ".".join(str(p) for p in list(err.path)[1:]) or "template"
            raise ConfigError(f"{where} pod template", f"{path}: {err.message} (Kubernetes "
                                                      f"{kubernetes_version} PodTemplateSpec)") from None
        except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.utils.VersionNotSupportedError):
            raise ConfigError("kubernetesVersion", f"no Kubernetes {kubernetes_version} schema to check pod "
                                                   f"templates against (kubernetes-validate knows up to "
                                                   f"{kubernetes_validate.latest_version()})") from None
        checked += 1
    return checked
