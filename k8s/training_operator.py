"""Kubeflow Training Operator v1.9.4: the controller behind PyTorchJob and MPIJob (kubeflow.org/v1).

Built as the release's own manifests run it (kubeflow/trainer tag v1.9.4: manifests/base and the
standalone overlay, ../shared/contracts/kubeflow-training-v1.9.4/operator/); every difference is
declared, with its reason, in tests/k8s/test_conformance_training_operator.py.

The operator rotates its own webhook certificate: it writes the Secret below and injects the CA
into the ValidatingWebhookConfiguration named WEBHOOK_CONFIGURATION. The kubelet projects that
Secret into CERT_DIR, where the webhook server reads tls.crt; until it appears /readyz fails and no
controller starts, so the mount must be the Secret itself, not a directory of our own.

Two replicas with leader election: only the Lease holder reconciles jobs, but every replica serves
the webhook (v1.9.4 pkg/cert/cert.go sets the certificate rotator's RequireLeaderElection to false
"so the webhook server will run in primary and secondary instance"), so admission survives one
pod's restart, eviction or node loss. A PodDisruptionBudget keeps one Ready during drains, and the
replicas prefer different nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import cdk8s
import cdk8s_plus_27 as kplus
from constructs import Construct

from cdk8s_plus_27 import k8s

from config.kubernetes import ROLE_LABEL, SYSTEM_ROLE
from k8s.base import (
    ProjectChart, Readiness, drop_all_capabilities, hardened, patch_pod_spec, raw_object, resources,
    runtime_default_seccomp, select_own_pods,
)
from k8s.common import (
    CONTROL_PRIORITY_CLASS, IMAGES, KUBEFLOW_NAMESPACE, NONROOT_UID, TRAINING_OPERATOR, TRAINING_OPERATOR_WEBHOOK_PORT,
)
from k8s.values import KUBECTL_DELIVERY_IMAGE

NAME = TRAINING_OPERATOR
WEBHOOK_SECRET = "training-operator-webhook-cert"
# The name the operator's certificate rotator looks up to inject its CA bundle (main.go).
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"
WEBHOOK_PORT = TRAINING_OPERATOR_WEBHOOK_PORT
METRICS_PORT = 8080
PROBE_PORT = 8081
# controller-runtime's default certificate directory, where the Secret is projected.
CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"

# Only the job kinds this project runs; the other controllers would wait on CRDs we never install.
SCHEMES = ("pytorchjob", "mpijob")
# Kinds whose validating webhook the v1.9.4 manager serves (pkg/webhooks/webhooks.go: MPIJob maps
# to a no-op). A hook registered for a path nobody serves would, with failurePolicy Fail, reject
# every job of that kind.
VALIDATED = ("pytorchjob",)

FULL = ("create", "delete", "get", "list", "patch", "update", "watch")

REPLICAS = 2
# The Deployment controller sets its Progressing condition's reason to NewReplicaSetAvailable only
# once a rollout is complete (every replica updated and available); during a rollout the reason is
# ReplicaSetUpdated or NewReplicaSetCreated. So this path yields output only for a finished
# rollout: availableReplicas, which the old pods keep non-empty while the new ones start, would let
# a deploy whose new operator never becomes Ready pass.
ROLLOUT_COMPLETE = '.status.conditions[?(@.reason=="NewReplicaSetAvailable")].status'


@dataclass(frozen=True)
class TrainingOperatorProps:
    image: str = IMAGES["training-operator"]
    # The release's kubectl-delivery image ships kubectl 1.30; each environment builds its own with a
    # kubectl within one minor of its cluster (k8s/images/kubectl-delivery, stacks/workloads.py).
    mpi_kubectl_delivery_image: str = f"${{{KUBECTL_DELIVERY_IMAGE}}}"
    namespace: str = KUBEFLOW_NAMESPACE
    schemes: tuple[str, ...] = SCHEMES


Rule = tuple[str, tuple[str, ...], tuple[str, ...]]  # API group, resources, verbs


def rules(schemes: tuple[str, ...]) -> tuple[Rule, ...]:
    """The cluster-wide rules: upstream's ClusterRole (manifests/base/rbac/role.yaml) for the
    enabled kinds, without what only the operator's own namespace needs (own_namespace_rules)."""
    kinds = tuple(f"{s}s" for s in schemes)
    return (
        ("", ("configmaps",), ("create", "list", "update", "watch")),
        ("", ("events", "pods"), FULL),
        # The MPI launcher execs into workers; the operator grants that to the launcher's Role, and
        # RBAC only lets it grant what it holds itself.
        ("", ("pods/exec",), ("create",)),
        ("", ("serviceaccounts",), ("create", "get", "list", "watch")),
        ("", ("services",), ("create", "delete", "get", "list", "watch")),
        ("admissionregistration.k8s.io", ("validatingwebhookconfigurations",), ("get", "list", "update", "watch")),
        ("autoscaling", ("horizontalpodautoscalers",), FULL),
        ("kubeflow.org", kinds, FULL),
        ("kubeflow.org", tuple(f"{k}/finalizers" for k in kinds), ("update",)),
        ("kubeflow.org", tuple(f"{k}/status" for k in kinds), ("get", "patch", "update")),
        ("rbac.authorization.k8s.io", ("rolebindings", "roles"), ("create", "list", "update", "watch")),
        # The controllers watch PodGroups whenever these CRDs exist (gang scheduling); without the
        # grant their caches never sync.
        ("scheduling.volcano.sh", ("podgroups",), FULL),
        ("scheduling.x-k8s.io", ("podgroups",), FULL),
    )


def own_namespace_rules() -> tuple[Rule, ...]:
    """What the operator needs only in its own namespace. Secrets: the certificate rotator reads and
    rewrites the webhook Secret through a cache limited to that namespace (open-policy-agent/
    cert-controller v0.16.0, the v1.9.4 go.mod's: rotator.go addNamespacedCache), and no PyTorchJob or
    MPIJob v1 controller reads a Secret (kubeflow/trainer v1.9.4 pkg/controller.v1). Leases: the
    manager's leader election lives where the pod runs."""
    return (
        ("", ("secrets",), ("get", "list", "update", "watch")),
        ("coordination.k8s.io", ("leases",), ("create", "get", "list", "update", "watch")),
    )


class TrainingOperatorChart(ProjectChart):
    component = NAME
    addon = NAME
    depends_on = ("namespaces", "training-operator-crds", "priority-classes")
    # A deploy that changes the operator is done when its rollout is: `ops start`, `ops submit`
    # and the validation create PyTorchJobs and MPIJobs right after a deploy, and the webhook
    # (failurePolicy Fail) rejects them while no replica serves it. stacks/workloads.py names the
    # waiter after a digest of this chart, so every change of the chart is waited for again.
    ready_when = Readiness(object_type="deployment", name=NAME, namespace=KUBEFLOW_NAMESPACE,
                           json_path=ROLLOUT_COMPLETE,
                           dist_wait=f"kubectl rollout status -n {KUBEFLOW_NAMESPACE} deployment/{NAME} --timeout=10m",
                           timeout_minutes=10)

    @classmethod
    def for_environment(cls, scope, config, values) -> "TrainingOperatorChart":
        return cls(scope, cls.addon, props=TrainingOperatorProps(mpi_kubectl_delivery_image=values.kubectl_delivery_image))

    def __init__(self, scope: Construct, id: str, *, props: TrainingOperatorProps = TrainingOperatorProps()):
        super().__init__(scope, id, namespace=props.namespace)
        unknown = set(props.schemes) - set(SCHEMES)
        if unknown:
            raise ValueError(f"unsupported job schemes {sorted(unknown)}; this chart serves {SCHEMES}")

        self.service_account = kplus.ServiceAccount(self, "ServiceAccount", metadata=self.meta(NAME),
                                                    automount_token=True)
        self.cluster_role = kplus.ClusterRole(self, "ClusterRole", metadata=self.meta(NAME, cluster_scoped=True))
        for group, names, verbs in rules(props.schemes):
            self.cluster_role.allow(list(verbs), *(kplus.ApiResource.custom(api_group=group, resource_type=n)
                                                   for n in names))
        self.binding = kplus.ClusterRoleBinding(self, "ClusterRoleBinding", metadata=self.meta(NAME, cluster_scoped=True),
                                                role=self.cluster_role)
        self.binding.add_subjects(self.service_account)
        self.role = kplus.Role(self, "Role", metadata=self.meta(NAME))
        for group, names, verbs in own_namespace_rules():
            self.role.allow(list(verbs), *(kplus.ApiResource.custom(api_group=group, resource_type=n) for n in names))
        self.role_binding = kplus.RoleBinding(self, "RoleBinding", metadata=self.meta(NAME), role=self.role)
        self.role_binding.add_subjects(self.service_account)

        # Created empty (the standalone overlay's secretGenerator does the same); the operator
        # writes ca.crt, tls.crt and tls.key into it.
        self.webhook_secret = kplus.Secret(self, "WebhookCert", metadata=self.meta(WEBHOOK_SECRET),
                                           type="Opaque")

        self.deployment = self._deployment(props)
        self.service = kplus.Service(
            self, "Service", metadata=self.meta(NAME), selector=self.deployment,
            ports=[kplus.ServicePort(name="monitoring-port", port=METRICS_PORT, target_port=METRICS_PORT),
                   kplus.ServicePort(name="webhook-server", port=443, target_port=WEBHOOK_PORT)],
        )
        self.webhook = raw_object(self, "ValidatingWebhookConfiguration",
                                  webhook_configuration(props.namespace, props.schemes))
        # Voluntary disruptions (node drains, managed node group updates) take one replica at a time.
        self.disruption_budget = k8s.KubePodDisruptionBudget(
            self, "DisruptionBudget", metadata=k8s.ObjectMeta(**self.meta(NAME)),
            spec=k8s.PodDisruptionBudgetSpec(
                min_available=k8s.IntOrString.from_number(REPLICAS - 1),
                selector=k8s.LabelSelector(match_labels=self.pod_labels)))

    def _deployment(self, props: TrainingOperatorProps) -> kplus.Deployment:
        deployment = kplus.Deployment(
            self, "Deployment", metadata=self.meta(NAME), replicas=REPLICAS,
            service_account=self.service_account,
            # cdk8s-plus defaults to no token; the operator is an API client.
            automount_service_account_token=True,
            # The image (distroless static:latest, no USER) would run as root; the manager needs
            # no root, so it runs as distroless's nonroot uid.
            security_context=kplus.PodSecurityContextProps(ensure_non_root=True, user=NONROOT_UID,
                                                           group=NONROOT_UID),
            termination_grace_period=cdk8s.Duration.seconds(10),
            select=False,
        )
        self.pod_labels = select_own_pods(deployment, NAME)
        deployment.pod_metadata.add_annotation("sidecar.istio.io/inject", "false")
        args = [
            # The first five restate the manager's defaults, which the Service, the Secret and the
            # probes below rely on.
            f"--metrics-bind-address=:{METRICS_PORT}",
            f"--health-probe-bind-address=:{PROBE_PORT}",
            f"--webhook-server-port={WEBHOOK_PORT}",
            f"--webhook-service-name={NAME}",
            f"--webhook-secret-name={WEBHOOK_SECRET}",
            # Two replicas (and a rolling update's third); only the Lease holder reconciles.
            "--leader-elect",
            *(f"--enable-scheme={s}" for s in props.schemes),
            # The operator's default for the MPI launcher's init container is an unpinned :latest.
            f"--mpi-kubectl-delivery-image={props.mpi_kubectl_delivery_image}",
        ]
        probe_timing = dict(timeout_seconds=cdk8s.Duration.seconds(3))
        container = deployment.add_container(
            name=NAME, image=props.image, command=["/manager"], args=args,
            image_pull_policy=kplus.ImagePullPolicy.IF_NOT_PRESENT,
            ports=[kplus.ContainerPort(number=METRICS_PORT),
                   kplus.ContainerPort(number=WEBHOOK_PORT, name="webhook-server")],
            env_variables={
                "MY_POD_NAMESPACE": kplus.EnvValue.from_field_ref(kplus.EnvFieldPaths.POD_NAMESPACE),
                "MY_POD_NAME": kplus.EnvValue.from_field_ref(kplus.EnvFieldPaths.POD_NAME),
            },
            liveness=kplus.Probe.from_http_get("/healthz", port=PROBE_PORT,
                                               initial_delay_seconds=cdk8s.Duration.seconds(15),
                                               period_seconds=cdk8s.Duration.seconds(20), **probe_timing),
            # Ready only once certificates exist and the webhook server listens.
            readiness=kplus.Probe.from_http_get("/readyz", port=PROBE_PORT,
                                                initial_delay_seconds=cdk8s.Duration.seconds(10),
                                                period_seconds=cdk8s.Duration.seconds(15), **probe_timing),
            resources=resources(100, 512),
            security_context=hardened(ensure_non_root=True, user=NONROOT_UID, group=NONROOT_UID),
        )
        certs = kplus.Volume.from_secret(self, "Certs", self.webhook_secret, name="cert", default_mode=0o644)
        container.mount(CERT_DIR, certs, read_only=True)
        drop_all_capabilities(deployment)
        runtime_default_seccomp(deployment)
        # Keep the control plane off the GPU nodes: prefer the system node group, and a node
        # without the other replica. Preferred, not required: a rolling update adds a third pod,
        # and the system group may have only two nodes.
        deployment.scheduling.attract(kplus.Node.labeled(kplus.NodeLabelQuery.is_(ROLE_LABEL, SYSTEM_ROLE)),
                                      weight=100)
        deployment.scheduling.separate(kplus.Pods.select(self, "Replicas", labels=self.pod_labels), weight=100)
        patch_pod_spec(deployment, "priorityClassName", CONTROL_PRIORITY_CLASS)
        return deployment


def webhook_configuration(namespace: str, schemes: tuple[str, ...] = SCHEMES) -> dict:
    """The validating webhooks the manager serves for the enabled kinds, named and routed as
    manifests/base/webhook (with its patch) names and routes them, failing closed as upstream does."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION},
        "webhooks": [{
            "name": f"validator.{scheme}.training-operator.kubeflow.org",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"service": {"name": NAME, "namespace": namespace, "port": 443,
                                         "path": f"/validate-kubeflow-org-v1-{scheme}"}},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "rules": [{"apiGroups": ["kubeflow.org"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                       "resources": [f"{scheme}s"]}],
        } for scheme in schemes if scheme in VALIDATED],
    }
