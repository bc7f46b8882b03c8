"""Kueue v0.19.2's controller manager pod and its configuration file, under `"queueing": "kueue"`.

Built as the release's config/default runs it (../shared/contracts/kueue-v0.19.2/: the manager with
its config, webhook, visibility and metrics patches), named as it installs it (namePrefix `kueue-`,
namespace kueue-system). Kueue gets a namespace of its own rather than kubeflow-system: it runs under
either training API (kubeflow-system exists under v2 only), its manager defaults its namespace,
certificate Secret and webhook Service to these names (apis/config/v1beta2/defaults.go), and its
namespaced Roles (Secrets, Leases) then reach nothing of the training controllers.

The manager rotates its own certificate into WEBHOOK_SECRET and injects the CA into the two webhook
configurations and into the conversion webhooks of five CRDs (pkg/util/cert/cert.go); it does not
serve admission until that injection succeeded, so those CRDs declare a conversion webhook even
though they serve one version (k8s/addons/kueue_crds.py). The visibility API server (pending
workloads and their positions, read by `ops status`) writes a self-signed certificate into
/visibility, an emptyDir.

Two replicas: the webhooks fail closed for our runs and for Workloads, so one manager pod's restart
must not block `ops start`. Leader election comes from the config file; the queue controllers keep
their caches on both replicas (they run without leader election and act only on the leader), so
either replica answers the visibility API.
"""

from __future__ import annotations

import yaml

from config.environment import Environment
from config.kubernetes import (
    EFA_DEVICE_CLASS, EFA_DRA, EFA_RESOURCE, GPU_DEVICE_CLASS, GPU_DRA, GPU_RESOURCE, TRAINING_NAMESPACE,
)
from config.queueing import queued_frameworks
from k8s.pods.images import IMAGES
from k8s.pods.names import CONTROL_PRIORITY_CLASS
from k8s.pods.security import NONROOT_UID
from k8s.pods.workload import (
    container, control_plane_affinity, deployment, hardened_container_security_context, hardened_pod_security_context,
    http_probe, own_pods, pod_spec,
)

NAMESPACE = "kueue-system"
NAME = "kueue-controller-manager"
CONFIG_MAP = "kueue-manager-config"
CONFIG_FILE = "controller_manager_config.yaml"
# The names the manager looks up (apis/config/v1beta2/defaults.go DefaultWebhookServiceName and
# DefaultWebhookSecretName), which the release's namePrefix produces.
WEBHOOK_SERVICE = "kueue-webhook-service"
WEBHOOK_SECRET = "kueue-webhook-server-cert"
VISIBILITY_SERVICE = "kueue-visibility-server"
METRICS_SERVICE = "kueue-controller-manager-metrics-service"
CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"
VISIBILITY_CERT_DIR = "/visibility"  # hard-coded in the manager (default/manager_visibility_patch.yaml)
WEBHOOK_PORT = 9443
VISIBILITY_PORT = 8082  # DefaultVisibilityBindPort
METRICS_PORT = 8443
PROBE_PORT = 8081
LEASE = "c1f6bfd2.kueue.x-k8s.io"  # DefaultLeaderElectionID; `ops doctor` reads this Lease
# The aggregated API `ops status` reads pending runs and their queue positions from
# (GET /apis/<group>/<version>/namespaces/training/localqueues/default/pendingworkloads).
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_VERSION = "v1beta2"
REPLICAS = 2
POD_LABELS = own_pods(NAME)

# All-or-nothing admission. A run admitted against quota whose pods are not all Ready within TIMEOUT
# is evicted: Kueue suspends it, its pods go, its quota is released, and it is requeued behind the
# runs waiting since before its eviction (timestamp Eviction), after a backoff of 60 s doubling to at
# most an hour, for as long as it is not stopped (backoffLimitCount unset). 30 minutes covers a GPU
# node's launch and the first pull of a multi-GB trainer image on it; the same time bounds how long a
# running gang may stay short of a pod (a JobSet restart, a replaced node) before it gives its quota
# back. blockAdmission stays off: our node groups do not scale with demand, so one run admitted onto a
# group at 0 nodes would otherwise hold every other admission of the ClusterQueue for the timeout.
WAIT_FOR_PODS_READY = {
    "timeout": "30m",
    "recoveryTimeout": "30m",
    "blockAdmission": False,
    "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 60, "backoffMaxSeconds": 3600},
}


def manager_config(config: Environment) -> dict:
    """components/manager/controller_manager_config.yaml as the release ships it, with what we queue:
    only the run kind of the environment's training API, only in the training namespace, and EFA
    claims of DRA groups (EFA, and GPUs on gpuAllocation dra) counted as the resources the
    ClusterQueue's quota names."""
    settings: dict = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": f":{PROBE_PORT}"},
        "metrics": {"bindAddress": f":{METRICS_PORT}"},
        "webhook": {"port": WEBHOOK_PORT},
        "leaderElection": {"leaderElect": True, "resourceName": LEASE},
        "controller": {"groupKindConcurrency": {
            "Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 10, "LocalQueue.kueue.x-k8s.io": 5,
            "Cohort.kueue.x-k8s.io": 1, "ClusterQueue.kueue.x-k8s.io": 5, "ResourceFlavor.kueue.x-k8s.io": 1}},
        "clientConnection": {"qps": 300, "burst": 500},
        "waitForPodsReady": WAIT_FOR_PODS_READY,
        # Our LocalQueue is named "default": Kueue's webhook labels a run created without a queue
        # name with it, so nothing in the training namespace bypasses the queue anyway.
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": TRAINING_NAMESPACE}},
        "integrations": {"frameworks": list(queued_frameworks(config.training_api))},
    }
    mappings = []
    # GPUs of gpuAllocation dra groups, counted as the nvidia.com/gpu the quota names (their pods
    # request no nvidia.com/gpu, so without the mapping they would pass the GPU quota unseen).
    if config.gpu_groups(GPU_DRA):
        mappings.append({"name": GPU_RESOURCE, "deviceClassNames": [GPU_DEVICE_CLASS]})
    if any(g.efa_path == EFA_DRA for g in config.gpu_nodegroups):
        mappings.append({"name": EFA_RESOURCE, "deviceClassNames": [EFA_DEVICE_CLASS]})
    if mappings:
        settings["resources"] = {"deviceClassMappings": mappings}
    return settings


def manager_config_map(config: Environment) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG_MAP, "namespace": NAMESPACE},
            "data": {CONFIG_FILE: yaml.safe_dump(manager_config(config), sort_keys=False)}}


def kueue_deployment(*, image: str = IMAGES["kueue"]) -> dict:
    manager = container(
        name="manager", image=image, command=["/manager"],
        args=[f"--config=/{CONFIG_FILE}", "--zap-log-level=2"],
        resources={"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "2", "memory": "512Mi"}},
        # No USER in the image is promised; distroless's nonroot uid, as for the other controllers.
        security_context=hardened_container_security_context(NONROOT_UID),
        ports=[{"containerPort": WEBHOOK_PORT, "name": "webhook-server", "protocol": "TCP"},
               {"containerPort": VISIBILITY_PORT, "name": "visibility", "protocol": "TCP"},
               {"containerPort": METRICS_PORT, "name": "metrics", "protocol": "TCP"}],
        livenessProbe=http_probe("/healthz", PROBE_PORT, initial_delay_s=15, period_s=20, timeout_s=1),
        readinessProbe=http_probe("/readyz", PROBE_PORT, initial_delay_s=5, period_s=10, timeout_s=1),
        volumeMounts=[{"name": "cert", "mountPath": CERT_DIR, "readOnly": True},
                      {"name": "manager-config", "mountPath": f"/{CONFIG_FILE}", "subPath": CONFIG_FILE},
                      {"name": "visibility", "mountPath": VISIBILITY_CERT_DIR}],
    )
    pod = pod_spec(
        containers=[manager], security_context=hardened_pod_security_context(NONROOT_UID),
        automount_token=True, serviceAccountName=NAME, terminationGracePeriodSeconds=10,
        volumes=[{"name": "cert", "secret": {"secretName": WEBHOOK_SECRET, "defaultMode": 0o644}},
                 {"name": "manager-config", "configMap": {"name": CONFIG_MAP}},
                 {"name": "visibility", "emptyDir": {}}],
        affinity=control_plane_affinity(NAME), priorityClassName=CONTROL_PRIORITY_CLASS,
    )
    return deployment(name=NAME, namespace=NAMESPACE, replicas=REPLICAS, pod_labels=POD_LABELS, pod=pod,
                      pod_annotations={"kubectl.kubernetes.io/default-container": "manager"})
