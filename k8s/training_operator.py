"""Kubeflow Training Operator v1.9: the controller behind PyTorchJob and MPIJob (kubeflow.org/v1).

The namespace and the CRDs come from their own charts, applied first (see k8s/charts.py).
The operator runs its own certificate rotation: it fills the webhook Secret below and injects the
CA into the ValidatingWebhookConfiguration, so neither carries key material here.
"""

from __future__ import annotations

from dataclasses import dataclass

import cdk8s
import cdk8s_plus_27 as kplus
from constructs import Construct

from config.kubernetes import ROLE_LABEL
from k8s.base import (
    ProjectChart, drop_all_capabilities, hardened, raw_object, resources, select_own_pods,
)
from k8s.common import IMAGES, KUBEFLOW_NAMESPACE

NAME = "training-operator"
WEBHOOK_SECRET = "training-operator-webhook-cert"
# The name the operator's certificate rotator looks up to inject its CA bundle.
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"
WEBHOOK_PORT = 9443
METRICS_PORT = 8080
PROBE_PORT = 8081
# controller-runtime writes the rotated serving certificate here.
CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"
# The image's non-root user (distroless "nonroot").
OPERATOR_UID = 65532

# Only the job kinds this project runs; the other controllers would watch CRDs we never install.
SCHEMES = ("pytorchjob", "mpijob")


@dataclass(frozen=True)
class TrainingOperatorProps:
    image: str = IMAGES["training-operator"]
    mpi_kubectl_delivery_image: str = IMAGES["mpi-kubectl-delivery"]
    namespace: str = KUBEFLOW_NAMESPACE
    schemes: tuple[str, ...] = SCHEMES
    # Ignore: `cdk deploy` applies the jobs chart right after this one, before the operator's pod
    # is Ready; Fail would reject those creations and fail the deploy. The structural CRD schema
    # still rejects malformed jobs.
    webhook_failure_policy: str = "Ignore"


# (API group, resources, verbs) the PyTorchJob and MPIJob controllers, the certificate rotator and
# leader election use in v1.9.
RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("", ("pods", "services"), ("create", "delete", "get", "list", "patch", "update", "watch")),
    # The MPI launcher execs into workers; the operator grants that to the launcher's Role, and
    # RBAC only lets it grant what it holds itself.
    ("", ("pods/exec",), ("create",)),
    ("", ("configmaps",), ("create", "get", "list", "update", "watch")),
    ("", ("serviceaccounts",), ("create", "get", "list", "watch")),
    ("", ("events",), ("create", "patch", "update")),
    ("", ("secrets",), ("get", "list", "update", "watch")),
    ("rbac.authorization.k8s.io", ("roles", "rolebindings"), ("create", "get", "list", "update", "watch")),
    ("autoscaling", ("horizontalpodautoscalers",), ("create", "delete", "get", "list", "update", "watch")),
    ("admissionregistration.k8s.io", ("validatingwebhookconfigurations",), ("get", "list", "update", "watch")),
    ("coordination.k8s.io", ("leases",), ("create", "get", "list", "update", "watch")),
    ("kubeflow.org", ("pytorchjobs", "mpijobs"), ("create", "delete", "get", "list", "patch", "update", "watch")),
    ("kubeflow.org", ("pytorchjobs/status", "mpijobs/status"), ("get", "patch", "update")),
    ("kubeflow.org", ("pytorchjobs/finalizers", "mpijobs/finalizers"), ("update",)),
)


class TrainingOperatorChart(ProjectChart):
    component = NAME

    def __init__(self, scope: Construct, id: str, *, props: TrainingOperatorProps = TrainingOperatorProps()):
        super().__init__(scope, id, namespace=props.namespace)
        unknown = set(props.schemes) - set(SCHEMES)
        if unknown:
            raise ValueError(f"unsupported job schemes {sorted(unknown)}; this chart serves {SCHEMES}")
        if props.webhook_failure_policy not in ("Ignore", "Fail"):
            raise ValueError("webhook_failure_policy must be Ignore or Fail")

        self.service_account = kplus.ServiceAccount(self, "ServiceAccount", metadata=self.meta(NAME),
                                                    automount_token=True)
        self.cluster_role = kplus.ClusterRole(self, "ClusterRole", metadata=self.meta(NAME, cluster_scoped=True))
        for group, names, verbs in RULES:
            self.cluster_role.allow(list(verbs), *(kplus.ApiResource.custom(api_group=group, resource_type=n)
                                                   for n in names))
        self.binding = kplus.ClusterRoleBinding(self, "ClusterRoleBinding", metadata=self.meta(NAME, cluster_scoped=True),
                                                role=self.cluster_role)
        self.binding.add_subjects(self.service_account)

        # Created empty; the operator writes ca.crt, tls.crt and tls.key into it.
        self.webhook_secret = kplus.Secret(self, "WebhookCert", metadata=self.meta(WEBHOOK_SECRET),
                                           type="Opaque")

        self.deployment = self._deployment(props)
        self.service = kplus.Service(
            self, "Service", metadata=self.meta(NAME), selector=self.deployment,
            ports=[kplus.ServicePort(name="webhook-server", port=443, target_port=WEBHOOK_PORT),
                   kplus.ServicePort(name="monitoring-port", port=METRICS_PORT, target_port=METRICS_PORT)],
        )
        self.webhook = raw_object(self, "ValidatingWebhookConfiguration",
                                  webhook_configuration(props.namespace, props.webhook_failure_policy,
                                                        props.schemes))

    def _deployment(self, props: TrainingOperatorProps) -> kplus.Deployment:
        deployment = kplus.Deployment(
            self, "Deployment", metadata=self.meta(NAME), replicas=1,
            service_account=self.service_account,
            # cdk8s-plus defaults to no token; the operator is an API client.
            automount_service_account_token=True,
            security_context=kplus.PodSecurityContextProps(ensure_non_root=True, user=OPERATOR_UID,
                                                           group=OPERATOR_UID),
            select=False,
        )
        select_own_pods(deployment, NAME)
        args = [
            f"--metrics-bind-address=:{METRICS_PORT}",
            f"--health-probe-bind-address=:{PROBE_PORT}",
            f"--webhook-server-port={WEBHOOK_PORT}",
            f"--webhook-service-name={NAME}",
            f"--webhook-secret-name={WEBHOOK_SECRET}",
            # A rolling update briefly runs two pods; only the lease holder reconciles.
            "--leader-elect",
            *(f"--enable-scheme={s}" for s in props.schemes),
            # The operator's default for the MPI launcher's init container is an unpinned :latest.
            f"--mpi-kubectl-delivery-image={props.mpi_kubectl_delivery_image}",
        ]
        container = deployment.add_container(
            name=NAME, image=props.image, command=["/manager"], args=args,
            image_pull_policy=kplus.ImagePullPolicy.IF_NOT_PRESENT,
            ports=[kplus.ContainerPort(number=WEBHOOK_PORT, name="webhook-server"),
                   kplus.ContainerPort(number=METRICS_PORT, name="metrics"),
                   kplus.ContainerPort(number=PROBE_PORT, name="probes")],
            env_variables={
                "MY_POD_NAMESPACE": kplus.EnvValue.from_field_ref(kplus.EnvFieldPaths.POD_NAMESPACE),
                "MY_POD_NAME": kplus.EnvValue.from_field_ref(kplus.EnvFieldPaths.POD_NAME),
            },
            liveness=kplus.Probe.from_http_get("/healthz", port=PROBE_PORT,
                                               initial_delay_seconds=cdk8s.Duration.seconds(15),
                                               period_seconds=cdk8s.Duration.seconds(20)),
            # Ready only once certificates exist and the webhook server listens.
            readiness=kplus.Probe.from_http_get("/readyz", port=PROBE_PORT,
                                                initial_delay_seconds=cdk8s.Duration.seconds(10),
                                                period_seconds=cdk8s.Duration.seconds(15)),
            resources=resources(100, 512),
            security_context=hardened(ensure_non_root=True, user=OPERATOR_UID, group=OPERATOR_UID),
        )
        # The root file system is read-only; the rotated certificate needs a writable directory.
        container.mount(CERT_DIR, kplus.Volume.from_empty_dir(self, "Certs", "cert",
                                                              medium=kplus.EmptyDirMedium.MEMORY))
        drop_all_capabilities(deployment)
        # Keep the control plane off the GPU nodes: prefer the system node group.
        deployment.scheduling.attract(kplus.Node.labeled(kplus.NodeLabelQuery.is_(ROLE_LABEL, "system")),
                                      weight=100)
        return deployment


def webhook_configuration(namespace: str, failure_policy: str, schemes: tuple[str, ...] = SCHEMES) -> dict:
    """One validating webhook per enabled job kind, at the paths the operator's webhook server
    registers (/validate-kubeflow-org-v1-<kind>)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION},
        "webhooks": [{
            "name": f"validate-kubeflow-org-v1-{scheme}.kubeflow.org",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"service": {"name": NAME, "namespace": namespace, "port": 443,
                                         "path": f"/validate-kubeflow-org-v1-{scheme}"}},
            "failurePolicy": failure_policy,
            "sideEffects": "None",
            "timeoutSeconds": 10,
            "rules": [{"apiGroups": ["kubeflow.org"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                       "resources": [f"{scheme}s"], "scope": "Namespaced"}],
        } for scheme in schemes],
    }
