"""The one-off Jobs `ops` creates per run that write onto FSx: the data-preparation Job
(k8s/pods/data_job.py) and the model-download Job (k8s/pods/model_download.py).

Pure Python (no cdk8s). Both are the same kind of pod: the CPU trainer image on a CPU node group,
the FSx claim at FSX_MOUNT_PATH and a scratch emptyDir at /tmp, hardened (non-root as the image's
numeric user, read-only root file system, no capabilities, RuntimeDefault seccomp), a new pod per
attempt so each attempt's log stays readable, and exit 2 (the trainer's "bad input or refused":
malformed dataset, prefix not listable, gated repository) failing the Job at once instead of
retrying what cannot succeed. Each pod template is checked against the strict PodSpec schema of
the environment's Kubernetes version.
"""

from __future__ import annotations

from typing import Any

from config.environment import Environment
from config.kubernetes import EXIT_USAGE, FSX_CLAIM_NAME, FSX_MOUNT_PATH, NODEGROUP_LABEL, TRAINING_NAMESPACE
from k8s.pods.podspec import validate_pod_templates
from k8s.pods.resources import container_resources
from k8s.pods.security import TRAINER_UID, container_security_context, pod_security_context


def fsx_job(config: Environment, *, metadata: dict, nodegroup: str, container: str, image: str,
            command: list[str], env: list[dict], cpu: str, memory: str, tmp_size: str, backoff_limit: int,
            ttl_after_finished_s: int | None = None, service_account: str | None = None) -> dict:
    """A batch/v1 Job in the training namespace. `metadata` gives its name (or generateName),
    labels and annotations; the pod carries the same labels. `service_account` names the
    ServiceAccount an EKS Pod Identity role is bound to; the pod mounts no Kubernetes API token
    either way (none of these Jobs calls the API, and Pod Identity projects its own token)."""
    instance = config.nodegroup(nodegroup).instance_type
    spec_container: dict[str, Any] = {
        "name": container,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}, *env],
        "resources": container_resources(instance, cpu=cpu, memory=memory),
        "securityContext": container_security_context(read_only_root_filesystem=True),
        "volumeMounts": [{"name": "fsx", "mountPath": FSX_MOUNT_PATH}, {"name": "tmp", "mountPath": "/tmp"}],
    }
    pod_spec: dict[str, Any] = {
        # A new pod per attempt (podFailurePolicy requires it), so each attempt's log stays readable.
        "restartPolicy": "Never",
        "securityContext": pod_security_context(TRAINER_UID),
        "nodeSelector": {NODEGROUP_LABEL: nodegroup},
        "containers": [spec_container],
        "volumes": [{"name": "fsx", "persistentVolumeClaim": {"claimName": FSX_CLAIM_NAME}},
                    {"name": "tmp", "emptyDir": {"sizeLimit": tmp_size}}],
    }
    if service_account:
        pod_spec["serviceAccountName"] = service_account
    # The Pod Identity webhook adds its own projected token (audience pods.eks.amazonaws.com) to a
    # pod whose ServiceAccount has an association, whatever this field says; this field only drops
    # the Kubernetes API credential (tests/k8s/pods/test_data_job.py cites both sources).
    pod_spec["automountServiceAccountToken"] = False
    job_spec: dict[str, Any] = {
        "backoffLimit": backoff_limit,
        "podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {
            "containerName": container, "operator": "In", "values": [EXIT_USAGE]}}]},
        "template": {"metadata": {"labels": dict(metadata.get("labels", {}))}, "spec": pod_spec},
    }
    if ttl_after_finished_s is not None:
        job_spec["ttlSecondsAfterFinished"] = ttl_after_finished_s
    manifest = {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {**metadata, "namespace": TRAINING_NAMESPACE}, "spec": job_spec}
    validate_pod_templates(manifest, config.kubernetes_version)
    return manifest
