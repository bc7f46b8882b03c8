"""Kubeflow Trainer v2.3.0's controller pod, under `trainingApi: v2`: it admits TrainJobs and
runtimes and turns each TrainJob into a JobSet (k8s/pods/jobset.py runs that controller).

Built as the release's base/manager with its config patch (../shared/contracts/kubeflow-trainer-v2.3.0/).
The manager rotates its webhook certificate into WEBHOOK_SECRET (certManagement in its config) and
the kubelet projects it into CERT_DIR. Two replicas: leader election is on in the config file, and
every replica serves the webhooks (pkg/util/cert/cert.go: RequireLeaderElection false), so admission
of runs survives one pod's restart.
"""

from __future__ import annotations

import yaml

from config.kubernetes import KUBEFLOW_SYSTEM_NAMESPACE, TRAINER_CONTROLLER
from k8s.pods.images import IMAGES
from k8s.pods.names import CONTROL_PRIORITY_CLASS
from k8s.pods.security import NONROOT_UID
from k8s.pods.workload import (
    container, control_plane_affinity, deployment, hardened_container_security_context, hardened_pod_security_context,
    http_probe, own_pods, pod_spec,
)

NAME = TRAINER_CONTROLLER
NAMESPACE = KUBEFLOW_SYSTEM_NAMESPACE
WEBHOOK_SECRET = "kubeflow-trainer-webhook-cert"
CONFIG_MAP = "kubeflow-trainer-config"
CONFIG_FILE = "controller_manager_config.yaml"
CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"
# Named ports the Service and the probes refer to (base/manager/manager.yaml).
PORTS = {"health": 8081, "metrics": 8443, "webhook": 9443, "status-server": 10443}
LEASE = "trainer.kubeflow.org"
REPLICAS = 2
POD_LABELS = own_pods(NAME)

# base/manager/controller_manager_config.yaml, as the release ships it; the Service and Secret
# names here are the ones this add-on creates.
MANAGER_CONFIG = {
    "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
    "kind": "Configuration",
    "health": {"healthProbeBindAddress": f":{PORTS['health']}", "readinessEndpointName": "readyz",
               "livenessEndpointName": "healthz"},
    "metrics": {"bindAddress": f":{PORTS['metrics']}", "secureServing": True},
    "webhook": {"port": PORTS["webhook"], "host": ""},
    "leaderElection": {"leaderElect": True, "resourceName": LEASE, "resourceNamespace": "", "leaseDuration": "15s",
                       "renewDeadline": "10s", "retryPeriod": "2s"},
    "controller": {"groupKindConcurrency": {"TrainJob.trainer.kubeflow.org": 5,
                                            "TrainingRuntime.trainer.kubeflow.org": 1,
                                            "ClusterTrainingRuntime.trainer.kubeflow.org": 1}},
    "certManagement": {"enable": True, "webhookServiceName": NAME, "webhookSecretName": WEBHOOK_SECRET},
    "clientConnection": {"qps": 50, "burst": 100},
    "statusServer": {"port": PORTS["status-server"], "qps": 5, "burst": 10},
}


def manager_config_map() -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG_MAP, "namespace": NAMESPACE},
            "data": {CONFIG_FILE: yaml.safe_dump(MANAGER_CONFIG, sort_keys=False)}}


def trainer_deployment(*, image: str = IMAGES["trainer-controller-manager"]) -> dict:
    manager = container(
        name="manager", image=image, args=[f"--config=/{CONFIG_FILE}", "--zap-log-level=2"],
        # Upstream sets no requests; these keep the two replicas schedulable beside the others on
        # the system nodes. The memory limit bounds a leak, as JobSet's release sets one.
        resources={"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}},
        # No USER in the image is promised; distroless's nonroot uid, as for the other controllers.
        security_context=hardened_container_security_context(NONROOT_UID),
        ports=[{"name": name, "containerPort": port, "protocol": "TCP"} for name, port in PORTS.items()],
        livenessProbe=http_probe("/healthz", "health", initial_delay_s=15, period_s=20, timeout_s=3),
        readinessProbe=http_probe("/readyz", "health", initial_delay_s=10, period_s=15, timeout_s=3),
        volumeMounts=[{"name": "cert", "mountPath": CERT_DIR, "readOnly": True},
                      {"name": CONFIG_MAP, "mountPath": f"/{CONFIG_FILE}", "subPath": CONFIG_FILE, "readOnly": True}],
    )
    pod = pod_spec(
        containers=[manager], security_context=hardened_pod_security_context(NONROOT_UID),
        automount_token=True, serviceAccountName=NAME,
        volumes=[{"name": "cert", "secret": {"secretName": WEBHOOK_SECRET, "defaultMode": 0o644}},
                 {"name": CONFIG_MAP, "configMap": {"name": CONFIG_MAP}}],
        affinity=control_plane_affinity(NAME), priorityClassName=CONTROL_PRIORITY_CLASS,
    )
    return deployment(name=NAME, namespace=NAMESPACE, replicas=REPLICAS, pod_labels=POD_LABELS, pod=pod)
