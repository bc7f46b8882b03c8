"""The Kubeflow Training Operator's pod (v1.9.4): the manager of PyTorchJob and MPIJob, which also
serves their validating webhook.

The operator rotates its own webhook certificate: it writes the Secret WEBHOOK_SECRET and injects
the CA into the webhook configuration (k8s/addons/training_operator.py). The kubelet projects that
Secret into CERT_DIR, where the webhook server reads tls.crt; until it appears /readyz fails and no
controller starts, so the mount must be the Secret itself, not a directory of our own.

Two replicas with leader election: only the Lease holder reconciles jobs, but every replica serves
the webhook (v1.9.4 pkg/cert/cert.go sets the certificate rotator's RequireLeaderElection to false
"so the webhook server will run in primary and secondary instance"), so admission survives one
pod's restart, eviction or node loss. The replicas prefer different nodes.
"""

from __future__ import annotations

from k8s.pods.images import IMAGES, KUBECTL_DELIVERY_IMAGE, placeholder
from k8s.pods.names import (
    CONTROL_PRIORITY_CLASS, KUBEFLOW_NAMESPACE, NAME_LABEL, TRAINING_OPERATOR, TRAINING_OPERATOR_WEBHOOK_PORT,
)
from k8s.pods.resources import fixed_resources
from k8s.pods.security import NONROOT_UID
from k8s.pods.workload import (
    container, control_plane_affinity, deployment, hardened_container_security_context, hardened_pod_security_context,
    http_probe, own_pods, pod_spec,
)

NAME = TRAINING_OPERATOR
WEBHOOK_SECRET = "training-operator-webhook-cert"
WEBHOOK_PORT = TRAINING_OPERATOR_WEBHOOK_PORT
METRICS_PORT = 8080
PROBE_PORT = 8081
# controller-runtime's default certificate directory, where the Secret is projected.
CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"
# Only the job kinds this project runs; the other controllers would wait on CRDs we never install.
SCHEMES = ("pytorchjob", "mpijob")
REPLICAS = 2
# The address label cdk8s-plus gave the operator's pods (k8s/pods/workload.py); its Service
# (k8s/addons/training_operator.py) still selects them by it.
POD_ADDRESS = "training-operator-Deployment-c8aa6462"
POD_LABELS = own_pods(NAME, POD_ADDRESS)


def environment_schemes(config) -> tuple[str, ...]:
    """The job kinds the operator runs for `config`. Under trainingApi v2, runs are TrainJobs and the
    operator stays for the NCCL validation's MPIJob only (k8s/pods/validation.py); no PyTorchJob CRD
    or webhook then exists, so nobody can create a v1 run beside the v2 ones."""
    return ("mpijob",) if config.training_api == "v2" else SCHEMES


def operator_deployment(*, image: str = IMAGES["training-operator"],
                        mpi_kubectl_delivery_image: str = placeholder(KUBECTL_DELIVERY_IMAGE),
                        schemes: tuple[str, ...] = SCHEMES, namespace: str = KUBEFLOW_NAMESPACE) -> dict:
    """`mpi_kubectl_delivery_image`: the release's kubectl-delivery image ships kubectl 1.30; each
    environment builds its own with a kubectl within one minor of its cluster
    (k8s/images/kubectl-delivery, stacks/workloads.py)."""
    unknown = set(schemes) - set(SCHEMES)
    if unknown:
        raise ValueError(f"unsupported job schemes {sorted(unknown)}; this operator serves {SCHEMES}")
    args = [
        # The first five restate the manager's defaults, which the Service, the Secret and the
        # probes rely on.
        f"--metrics-bind-address=:{METRICS_PORT}",
        f"--health-probe-bind-address=:{PROBE_PORT}",
        f"--webhook-server-port={WEBHOOK_PORT}",
        f"--webhook-service-name={NAME}",
        f"--webhook-secret-name={WEBHOOK_SECRET}",
        # Two replicas (and a rolling update's third); only the Lease holder reconciles.
        "--leader-elect",
        *(f"--enable-scheme={s}" for s in schemes),
        # The operator's default for the MPI launcher's init container is an unpinned :latest.
        f"--mpi-kubectl-delivery-image={mpi_kubectl_delivery_image}",
    ]
    manager = container(
        name=NAME, image=image, command=["/manager"], args=args, resources=fixed_resources(100, 512),
        # The image (distroless static:latest, no USER) would run as root; the manager needs
        # no root, so it runs as distroless's nonroot uid.
        security_context=hardened_container_security_context(NONROOT_UID),
        ports=[{"containerPort": METRICS_PORT}, {"containerPort": WEBHOOK_PORT, "name": "webhook-server"}],
        env=[{"name": "MY_POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
             {"name": "MY_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        livenessProbe=http_probe("/healthz", PROBE_PORT, initial_delay_s=15, period_s=20, timeout_s=3),
        # Ready only once certificates exist and the webhook server listens.
        readinessProbe=http_probe("/readyz", PROBE_PORT, initial_delay_s=10, period_s=15, timeout_s=3),
        volumeMounts=[{"name": "cert", "mountPath": CERT_DIR, "readOnly": True}],
    )
    pod = pod_spec(
        containers=[manager], security_context=hardened_pod_security_context(NONROOT_UID),
        # The operator is an API client.
        automount_token=True, serviceAccountName=NAME, terminationGracePeriodSeconds=10,
        volumes=[{"name": "cert", "secret": {"secretName": WEBHOOK_SECRET, "defaultMode": 0o644}}],
        affinity=control_plane_affinity(NAME),
        priorityClassName=CONTROL_PRIORITY_CLASS,
    )
    return deployment(name=NAME, namespace=namespace, replicas=REPLICAS, pod_labels=POD_LABELS, pod=pod,
                      pod_annotations={"sidecar.istio.io/inject": "false"})
