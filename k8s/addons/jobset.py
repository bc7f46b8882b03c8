"""The JobSet controller v0.12.0, under `trainingApi: v2` (Kubeflow Trainer v2.3.0 installs this
release and drives it: every TrainJob becomes a JobSet).

Built as JobSet's release manifests (config/default, ../shared/contracts/jobset-v0.12.0/), named as
Trainer's overlay installs them (namePrefix `jobset-`, namespace kubeflow-system, the image retagged:
../shared/contracts/kubeflow-trainer-v2.3.0/third-party-jobset-kustomization.yaml). Here are its
RBAC, the config file, the Services, the empty Secret its certificate rotator fills, the webhook
configurations it injects its CA into (by these names), and a PodDisruptionBudget; its pod is
k8s/pods/jobset.py. Every difference from upstream is declared, with its reason, in
tests/k8s/addons/test_conformance_jobset.py.
"""

from __future__ import annotations

from k8s.addons import AddOn, Readiness
from k8s.addons.training_operator import RBAC, RBAC_GROUP, ROLLOUT_COMPLETE
from k8s.pods.jobset import (
    METRICS_PORT, METRICS_SERVICE, NAME, NAMESPACE, POD_LABELS, WEBHOOK_PORT, WEBHOOK_SECRET, WEBHOOK_SERVICE,
    jobset_deployment, manager_config_map,
)
from k8s.pods.names import NAME_LABEL
from k8s.pods.trainjob import JOBSET_NAME_LABEL

# The names the certificate rotator injects the CA bundle into (pkg/util/cert/cert.go at v0.12.0).
MUTATING_CONFIGURATION = "jobset-mutating-webhook-configuration"
VALIDATING_CONFIGURATION = "jobset-validating-webhook-configuration"

FULL = ("create", "delete", "get", "list", "patch", "update", "watch")

# components/rbac/role.yaml: what the controller reads and writes cluster-wide.
MANAGER_RULES = (
    ("", ("nodes",), ("get", "list", "watch")),
    ("", ("persistentvolumeclaims",), ("create", "get", "list", "watch")),
    ("", ("pods",), ("delete", "get", "list", "patch", "update", "watch")),
    ("", ("services",), FULL),
    ("", ("events",), ("create", "patch", "update", "watch")),
    ("events.k8s.io", ("events",), ("create", "patch", "update", "watch")),
    ("admissionregistration.k8s.io", ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"),
     ("get", "list", "update", "watch")),
    ("batch", ("jobs",), FULL),
    ("batch", ("jobs/status",), ("get", "patch", "update")),
    ("jobset.x-k8s.io", ("jobsets",), FULL),
    ("jobset.x-k8s.io", ("jobsets/finalizers",), ("update",)),
    ("jobset.x-k8s.io", ("jobsets/status",), ("get", "patch", "update")),
)
# leader_election_role.yaml and manager_secrets_role.yaml: only in the controller's namespace.
LEADER_ELECTION_RULES = (
    ("", ("configmaps",), ("create", "delete", "get", "list", "patch", "update", "watch")),
    ("coordination.k8s.io", ("leases",), ("create", "delete", "get", "list", "patch", "update", "watch")),
    ("", ("events",), ("create", "patch")),
)
SECRETS_RULES = (("", ("secrets",), ("get", "list", "update", "watch")),)
# auth_proxy_role.yaml: the metrics endpoint authenticates and authorizes its scrapers.
PROXY_RULES = (
    ("authentication.k8s.io", ("tokenreviews",), ("create",)),
    ("authorization.k8s.io", ("subjectaccessreviews",), ("create",)),
)


def rbac_rules(rules) -> list[dict]:
    return [{"apiGroups": [group], "resources": list(resources), "verbs": list(verbs)}
            for group, resources, verbs in rules]


def bound_role(kind: str, name: str, binding: str, rules: list[dict], *, account: str = NAME,
               namespace: str = NAMESPACE, subjects: list[dict] | None = None) -> list[dict]:
    """A (Cluster)Role and its (Cluster)RoleBinding, to the controller's ServiceAccount unless
    `subjects` says otherwise."""
    namespaced = {"namespace": namespace} if kind == "Role" else {}
    return [
        {"apiVersion": RBAC, "kind": kind, "metadata": {"name": name, **namespaced}, "rules": rules},
        {"apiVersion": RBAC, "kind": f"{kind}Binding", "metadata": {"name": binding, **namespaced},
         "roleRef": {"apiGroup": RBAC_GROUP, "kind": kind, "name": name},
         "subjects": subjects or [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]},
    ]


def webhook(name: str, path: str, group: str, version: str, resource: str, operations: list[str], *,
            service: str = WEBHOOK_SERVICE, object_selector: dict | None = None) -> dict:
    """One hook, failing closed, served by `service` in kubeflow-system."""
    hook = {
        "name": name, "admissionReviewVersions": ["v1"], "failurePolicy": "Fail", "sideEffects": "None",
        "clientConfig": {"service": {"name": service, "namespace": NAMESPACE, "path": path}},
        "rules": [{"apiGroups": [group], "apiVersions": [version], "operations": operations, "resources": [resource]}],
    }
    if object_selector:
        hook["objectSelector"] = object_selector
    return hook


# Only the pods of JobSets: every other pod of the cluster is admitted without the pod hooks.
JOBSET_PODS = {"matchExpressions": [{"key": JOBSET_NAME_LABEL, "operator": "Exists"}]}


def webhook_configurations() -> list[dict]:
    """components/webhook/manifests.yaml with its two patches: the pod hooks see JobSet pods only."""
    admission = "admissionregistration.k8s.io/v1"
    return [
        {"apiVersion": admission, "kind": "MutatingWebhookConfiguration",
         "metadata": {"name": MUTATING_CONFIGURATION}, "webhooks": [
             webhook("mjobset.kb.io", "/mutate-jobset-x-k8s-io-v1alpha2-jobset", "jobset.x-k8s.io", "v1alpha2",
                   "jobsets", ["CREATE"]),
             webhook("mpod.kb.io", "/mutate--v1-pod", "", "v1", "pods", ["CREATE"], object_selector=JOBSET_PODS)]},
        {"apiVersion": admission, "kind": "ValidatingWebhookConfiguration",
         "metadata": {"name": VALIDATING_CONFIGURATION}, "webhooks": [
             webhook("vjobset.kb.io", "/validate-jobset-x-k8s-io-v1alpha2-jobset", "jobset.x-k8s.io", "v1alpha2",
                   "jobsets", ["CREATE", "UPDATE"]),
             webhook("vpod.kb.io", "/validate--v1-pod", "", "v1", "pods", ["CREATE"], object_selector=JOBSET_PODS)]},
    ]


def service(name: str, ports: list[dict], selector: dict = POD_LABELS) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"type": "ClusterIP", "selector": dict(selector), "ports": ports}}


def jobset_controller() -> list[dict]:
    """The controller's objects, in apply order."""
    deployment = jobset_deployment()
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, "namespace": NAMESPACE}},
        *bound_role("ClusterRole", "jobset-manager-role", "jobset-manager-rolebinding", rbac_rules(MANAGER_RULES)),
        *bound_role("Role", "jobset-leader-election-role", "jobset-leader-election-rolebinding",
                rbac_rules(LEADER_ELECTION_RULES)),
        *bound_role("Role", "jobset-manager-secrets-role", "jobset-manager-secrets-rolebinding", rbac_rules(SECRETS_RULES)),
        *bound_role("ClusterRole", "jobset-proxy-role", "jobset-proxy-rolebinding", rbac_rules(PROXY_RULES)),
        *bound_role("ClusterRole", "jobset-metrics-reader", "jobset-metrics-reader-rolebinding",
                [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]),
        manager_config_map(),
        # Created empty (components/internalcert/secret.yaml); the manager writes its certificate into it.
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": WEBHOOK_SECRET, "namespace": NAMESPACE},
         "type": "Opaque"},
        deployment,
        service(WEBHOOK_SERVICE, [{"port": 443, "protocol": "TCP", "targetPort": WEBHOOK_PORT}]),
        service(METRICS_SERVICE, [{"name": "https", "port": METRICS_PORT, "protocol": "TCP",
                                    "targetPort": METRICS_PORT}]),
        *webhook_configurations(),
        # Node drains and node group updates evict one replica at a time.
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": NAME, "namespace": NAMESPACE},
         "spec": {"minAvailable": deployment["spec"]["replicas"] - 1, "selector": {"matchLabels": {
             NAME_LABEL: NAME}}}},
    ]


ADDON = AddOn(
    name="jobset", depends_on=("namespaces", "jobset-crd", "priority-classes"),
    applies_to=lambda config: config.training_api == "v2",
    # Trainer's webhook and controller create JobSets right after a deploy; the JobSet webhooks
    # (Fail) reject them while no replica serves.
    ready_when=Readiness(object_type="deployment", name=NAME, namespace=NAMESPACE, json_path=ROLLOUT_COMPLETE,
                         dist_wait=f"kubectl rollout status -n {NAMESPACE} deployment/{NAME} --timeout=10m",
                         timeout_minutes=10),
    objects=lambda config, values: jobset_controller())
