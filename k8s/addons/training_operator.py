"""Kubeflow Training Operator v1.9.4: the controller behind PyTorchJob and MPIJob (kubeflow.org/v1).

Built as the release's own manifests run it (kubeflow/trainer tag v1.9.4: manifests/base and the
standalone overlay, ../shared/contracts/kubeflow-training-v1.9.4/operator/); every difference is
declared, with its reason, in tests/k8s/addons/test_conformance_training_operator.py. Its pod, and why it
runs two replicas, is k8s/pods/training_operator.py; here are its RBAC, the webhook Secret the
operator fills, the Service, the validating webhook (named WEBHOOK_CONFIGURATION, where the
operator injects its CA), and a PodDisruptionBudget that keeps one replica Ready during drains.
"""

from __future__ import annotations

from k8s.addons import AddOn, Readiness
from k8s.pods.images import KUBECTL_DELIVERY_IMAGE, placeholder
from k8s.pods.names import KUBEFLOW_NAMESPACE, NAME_LABEL
from k8s.pods.training_operator import (
    METRICS_PORT, NAME, POD_ADDRESS, SCHEMES, WEBHOOK_PORT, WEBHOOK_SECRET, environment_schemes, operator_deployment,
)
from k8s.pods.workload import ADDRESS_LABEL, rendered

# The name the operator's certificate rotator looks up to inject its CA bundle (main.go).
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"
# Kinds whose validating webhook the v1.9.4 manager serves (pkg/webhooks/webhooks.go: MPIJob maps
# to a no-op). A hook registered for a path nobody serves would, with failurePolicy Fail, reject
# every job of that kind.
VALIDATED = ("pytorchjob",)

FULL = ("create", "delete", "get", "list", "patch", "update", "watch")
RBAC_GROUP = "rbac.authorization.k8s.io"
RBAC = f"{RBAC_GROUP}/v1"

# The Deployment controller sets its Progressing condition's reason to NewReplicaSetAvailable only
# once a rollout is complete (every replica updated and available); during a rollout the reason is
# ReplicaSetUpdated or NewReplicaSetCreated. So this path yields output only for a finished
# rollout: availableReplicas, which the old pods keep non-empty while the new ones start, would let
# a deploy whose new operator never becomes Ready pass.
ROLLOUT_COMPLETE = '.status.conditions[?(@.reason=="NewReplicaSetAvailable")].status'


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
        (RBAC_GROUP, ("rolebindings", "roles"), ("create", "list", "update", "watch")),
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


def cluster_role_rules(schemes: tuple[str, ...]) -> list[dict]:
    # One rule per resource, each with an empty resourceNames (every name), as written since the first release.
    return [{"apiGroups": [group], "resourceNames": [], "resources": [name], "verbs": list(verbs)}
            for group, names, verbs in rules(schemes) for name in names]


def role_rules() -> list[dict]:
    return [{"apiGroups": [group], "resources": [name], "verbs": list(verbs)}
            for group, names, verbs in own_namespace_rules() for name in names]


def training_operator(*, mpi_kubectl_delivery_image: str = placeholder(KUBECTL_DELIVERY_IMAGE),
                      namespace: str = KUBEFLOW_NAMESPACE, schemes: tuple[str, ...] = SCHEMES) -> list[dict]:
    """The operator's objects, in apply order. `mpi_kubectl_delivery_image`: see operator_deployment."""
    meta = {"name": NAME, "namespace": namespace}
    account = [{"apiGroup": "", "kind": "ServiceAccount", "name": NAME, "namespace": namespace}]
    deployment = operator_deployment(mpi_kubectl_delivery_image=mpi_kubectl_delivery_image, schemes=schemes,
                                     namespace=namespace)
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta, "automountServiceAccountToken": True},
        rendered({"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": NAME},
                  "rules": cluster_role_rules(schemes)}),
        rendered({"apiVersion": RBAC, "kind": "ClusterRoleBinding", "metadata": {"name": NAME},
                  "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": NAME}, "subjects": account}),
        rendered({"apiVersion": RBAC, "kind": "Role", "metadata": meta, "rules": role_rules()}),
        rendered({"apiVersion": RBAC, "kind": "RoleBinding", "metadata": meta,
                  "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": NAME}, "subjects": account}),
        # Created empty (the standalone overlay's secretGenerator does the same); the operator
        # writes ca.crt, tls.crt and tls.key into it.
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": WEBHOOK_SECRET, "namespace": namespace},
         "immutable": False, "stringData": {}, "type": "Opaque"},
        deployment,
        rendered({"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {
            "externalIPs": [], "type": "ClusterIP", "selector": {ADDRESS_LABEL: POD_ADDRESS},
            "ports": [{"name": "monitoring-port", "port": METRICS_PORT, "targetPort": METRICS_PORT},
                      {"name": "webhook-server", "port": 443, "targetPort": WEBHOOK_PORT}]}}),
        webhook_configuration(namespace, schemes),
        # Voluntary disruptions (node drains, managed node group updates) take one replica at a time.
        rendered({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta, "spec": {
            "minAvailable": deployment["spec"]["replicas"] - 1, "selector": {"matchLabels": {NAME_LABEL: NAME}}}}),
    ]


ADDON = AddOn(
    name=NAME, depends_on=("namespaces", "training-operator-crds", "priority-classes"),
    # A deploy that changes the operator is done when its rollout is: `ops start`, `ops submit`
    # and the validation create PyTorchJobs and MPIJobs right after a deploy, and the webhook
    # (failurePolicy Fail) rejects them while no replica serves it. stacks/workloads.py names the
    # waiter after a digest of this add-on's objects, so every change of them is waited for again.
    ready_when=Readiness(object_type="deployment", name=NAME, namespace=KUBEFLOW_NAMESPACE, json_path=ROLLOUT_COMPLETE,
                         dist_wait=f"kubectl rollout status -n {KUBEFLOW_NAMESPACE} deployment/{NAME} --timeout=10m",
                         timeout_minutes=10),
    objects=lambda config, values: training_operator(mpi_kubectl_delivery_image=values.kubectl_delivery_image,
                                                     schemes=environment_schemes(config)))
