"""The JobSet controller's pod (v0.12.0), under `trainingApi: v2`: Kubeflow Trainer turns every
TrainJob into a JobSet, and this manager turns the JobSet into Jobs, Services and restarts.

Built as the release's config/default runs it (../shared/contracts/jobset-v0.12.0/: the manager,
with its config, webhook and metrics patches), named as Trainer's overlay names it (namePrefix
`jobset-`, namespace kubeflow-system). The manager rotates its own webhook certificate into
WEBHOOK_SECRET (internalCertManagement in its config), which the kubelet projects into CERT_DIR.

Two replicas: the manager serves a pod webhook that fails closed for every pod of a JobSet, and a
JobSet restart recreates all of them at once, so one manager pod's restart must not block a run's
restart. Leader election comes from the config file (leaderElection.leaderElect), so only the Lease
holder reconciles.
"""

from __future__ import annotations

import yaml

from config.kubernetes import JOBSET_CONTROLLER, KUBEFLOW_SYSTEM_NAMESPACE
from k8s.pods.images import IMAGES
from k8s.pods.names import CONTROL_PRIORITY_CLASS
from k8s.pods.security import NONROOT_UID
from k8s.pods.workload import (
    container, control_plane_affinity, deployment, hardened_container_security_context, hardened_pod_security_context,
    http_probe, own_pods, pod_spec,
)

NAME = JOBSET_CONTROLLER
NAMESPACE = KUBEFLOW_SYSTEM_NAMESPACE
# The names the manager looks up (api/config/v1alpha1/defaults.go DefaultWebhookServiceName and
# DefaultWebhookSecretName at v0.12.0), which the release's namePrefix produces.
WEBHOOK_SERVICE = "jobset-webhook-service"
WEBHOOK_SECRET = "jobset-webhook-server-cert"
METRICS_SERVICE = "jobset-controller-manager-metrics-service"
CONFIG_MAP = "jobset-manager-config"
CONFIG_FILE = "controller_manager_config.yaml"
WEBHOOK_PORT = 9443
METRICS_PORT = 8443
PROBE_PORT = 8081
CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"
REPLICAS = 2
POD_LABELS = own_pods(NAME)

# components/manager/controller_manager_config.yaml, as the release ships it.
MANAGER_CONFIG = {
    "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
    "kind": "Configuration",
    "leaderElection": {"leaderElect": True},
    "internalCertManagement": {"enable": True},
}


def manager_config_map() -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG_MAP, "namespace": NAMESPACE},
            "data": {CONFIG_FILE: yaml.safe_dump(MANAGER_CONFIG, sort_keys=False)}}


def jobset_deployment(*, image: str = IMAGES["jobset"]) -> dict:
    manager = container(
        name="manager", image=image, command=["/manager"],
        # default/manager_config_patch.yaml's args replace the base's --leader-elect; the config
        # file turns leader election on.
        args=[f"--config=/{CONFIG_FILE}", "--zap-log-level=2"],
        resources={"requests": {"cpu": "500m", "memory": "128Mi"}, "limits": {"memory": "4Gi"}},
        # The image runs as distroless's nonroot user; restated so the restricted profile admits it.
        security_context=hardened_container_security_context(NONROOT_UID),
        ports=[{"containerPort": WEBHOOK_PORT, "name": "webhook-server", "protocol": "TCP"},
               {"containerPort": METRICS_PORT, "name": "metrics", "protocol": "TCP"}],
        livenessProbe=http_probe("/healthz", PROBE_PORT, initial_delay_s=15, period_s=20, timeout_s=1),
        readinessProbe=http_probe("/readyz", PROBE_PORT, initial_delay_s=5, period_s=10, timeout_s=1),
        volumeMounts=[{"name": "cert", "mountPath": CERT_DIR, "readOnly": True},
                      {"name": "manager-config", "mountPath": f"/{CONFIG_FILE}", "subPath": CONFIG_FILE}],
    )
    pod = pod_spec(
        containers=[manager], security_context=hardened_pod_security_context(NONROOT_UID),
        automount_token=True, serviceAccountName=NAME, terminationGracePeriodSeconds=10,
        volumes=[{"name": "cert", "secret": {"secretName": WEBHOOK_SECRET, "defaultMode": 0o644}},
                 {"name": "manager-config", "configMap": {"name": CONFIG_MAP}}],
        affinity=control_plane_affinity(NAME),
        priorityClassName=CONTROL_PRIORITY_CLASS,
    )
    return deployment(name=NAME, namespace=NAMESPACE, replicas=REPLICAS, pod_labels=POD_LABELS, pod=pod,
                      pod_annotations={"kubectl.kubernetes.io/default-container": "manager"})
