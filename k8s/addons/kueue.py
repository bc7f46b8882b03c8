"""Kueue v0.19.2's controller, under `"queueing": "kueue"`: it admits our runs against the
ClusterQueue's quota, all or nothing (k8s/pods/kueue.py says how long it waits and why).

Built as the release's config/default installs it (../shared/contracts/kueue-v0.19.2/, namePrefix
`kueue-`, namespace kueue-system): its namespace, ServiceAccount, the manager's ClusterRole and the
namespaced Roles it binds, the config file, the empty Secret its certificate rotator fills, the
webhook, visibility and metrics Services, the two webhook configurations it injects its CA into (by
these names), the visibility APIService `ops status` reads queue positions from, a
PodDisruptionBudget and the namespace's NetworkPolicies; the pod is k8s/pods/kueue.py.

Narrower than upstream, each declared in tests/k8s/addons/test_conformance_kueue.py: the manager's
ClusterRole leaves out the job kinds of the integrations we do not enable (Kueue watches a kind only
when its integration is on), and only the webhooks of Kueue's own kinds and of our run kind are
registered, the latter only for the training namespace: upstream's hooks for Jobs, pods, Deployments
and StatefulSets fail closed in every namespace, which would make every Job and pod of the cluster
wait on Kueue.
"""

from __future__ import annotations

from config.environment import Environment
from config.kubernetes import KUBE_SYSTEM_NAMESPACE, TRAINING_NAMESPACE
from config.queueing import PYTORCHJOB_FRAMEWORK, TRAINJOB_FRAMEWORK, queued_frameworks
from k8s.addons import AddOn, Readiness
# The kubebuilder scaffold's roles, the same in Kueue's release as in JobSet's: leader election and
# the manager's Secrets (namespaced), and the token and access reviews its metrics endpoint and
# visibility API make (metrics_auth_role.yaml).
from k8s.addons.jobset import FULL, LEADER_ELECTION_RULES, PROXY_RULES, SECRETS_RULES, bound_role, rbac_rules
from k8s.addons.kueue_crds import CONVERTED
from k8s.addons.namespaces import PodSecurity, namespaces
from k8s.addons.training_operator import ROLLOUT_COMPLETE
from k8s.pods.kueue import (
    METRICS_PORT, METRICS_SERVICE, NAME, NAMESPACE, POD_LABELS, VISIBILITY_GROUP, VISIBILITY_PORT, VISIBILITY_SERVICE,
    VISIBILITY_VERSION, WEBHOOK_PORT, WEBHOOK_SECRET, WEBHOOK_SERVICE, kueue_deployment, manager_config_map,
)
from k8s.pods.names import NAME_LABEL
from k8s.pods.network_policy import (
    HTTPS_PORT, api_server_peers, default_deny, match_labels, network_policy, tcp_ports,
)

GROUP = "kueue.x-k8s.io"
# The names the certificate rotator injects the CA into (pkg/util/cert/cert.go: the webhook
# Service's name less "-webhook-service", then "-{mutating,validating}-webhook-configuration").
MUTATING_CONFIGURATION = "kueue-mutating-webhook-configuration"
VALIDATING_CONFIGURATION = "kueue-validating-webhook-configuration"
VISIBILITY_API = f"{VISIBILITY_VERSION}.{VISIBILITY_GROUP}"
READ = ("get", "list", "watch")
STATUS = ("get", "patch", "update")
# CRDs whose conversion webhook the rotator injects its CA into.
CONVERSION_CRDS = tuple(f"{plural}.{GROUP}" for plural in CONVERTED)

# components/rbac/role.yaml: (group, resources, verbs, resourceNames), the rules every Kueue needs.
CORE_RULES = (
    ("", ("limitranges", "namespaces", "nodes"), READ, ()),
    # With the pod integration off Kueue still watches pods: topology-aware scheduling (beta, on:
    # pkg/controller/tas topology_ungater.go, node_controller.go) and the core indexer.
    ("", ("pods",), ("delete", "get", "list", "patch", "update", "watch"), ()),
    ("", ("pods/finalizers",), ("get", "update"), ()),
    ("", ("pods/status",), ("get", "patch"), ()),
    ("", ("podtemplates",), ("create", "delete", "get", "list", "update", "watch"), ()),
    ("admissionregistration.k8s.io", ("mutatingwebhookconfigurations",), ("get", "update"), (MUTATING_CONFIGURATION,)),
    ("admissionregistration.k8s.io", ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"),
     ("list", "watch"), ()),
    ("admissionregistration.k8s.io", ("validatingwebhookconfigurations",), ("get", "update"),
     (VALIDATING_CONFIGURATION,)),
    ("apiextensions.k8s.io", ("customresourcedefinitions",), ("list", "watch"), ()),
    ("apiextensions.k8s.io", ("customresourcedefinitions",), ("get",), ("clusterprofiles.multicluster.x-k8s.io",)),
    ("apiextensions.k8s.io", ("customresourcedefinitions",), ("get", "update"), CONVERSION_CRDS),
    # The ProvisioningRequest admission check starts only where cluster-autoscaler serves the API.
    ("autoscaling.x-k8s.io", ("provisioningrequests",), FULL, ()),
    ("autoscaling.x-k8s.io", ("provisioningrequests/status",), ("get",), ()),
    ("events.k8s.io", ("events",), ("create", "patch", "update", "watch"), ()),
    # The visibility API server's priority and fairness.
    ("flowcontrol.apiserver.k8s.io", ("flowschemas", "prioritylevelconfigurations"), ("list", "watch"), ()),
    ("flowcontrol.apiserver.k8s.io", ("flowschemas/status",), ("patch",), ()),
    (GROUP, ("admissionchecks", "clusterqueues", "resourceflavors", "topologies"), ("get", "list", "update", "watch"), ()),
    (GROUP, ("admissionchecks/finalizers", "clusterqueues/finalizers", "resourceflavors/finalizers",
             "topologies/finalizers", "workloads/finalizers"), ("update",), ()),
    (GROUP, ("admissionchecks/status", "clusterqueues/status", "cohorts/status", "localqueues/status",
             "multikueueclusters/status", "workloads/status"), STATUS, ()),
    (GROUP, ("cohorts", "localqueues", "multikueueclusters", "multikueueconfigs", "provisioningrequestconfigs",
             "workloadpriorityclasses"), READ, ()),
    (GROUP, ("workloads",), FULL, ()),
    ("node.k8s.io", ("runtimeclasses",), READ, ()),
    ("resource.k8s.io", ("deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices"), READ, ()),
    ("scheduling.k8s.io", ("priorityclasses",), READ, ()),
)
# The rules of each integration we may enable, as upstream's role grants them.
INTEGRATION_RULES = {
    TRAINJOB_FRAMEWORK: (
        ("trainer.kubeflow.org", ("clustertrainingruntimes", "trainingruntimes"), READ, ()),
        ("trainer.kubeflow.org", ("trainjobs",), ("get", "list", "patch", "update", "watch"), ()),
        ("trainer.kubeflow.org", ("trainjobs/finalizers",), ("get", "update"), ()),
        ("trainer.kubeflow.org", ("trainjobs/status",), STATUS, ()),
        # The TrainJob reconciler owns the TrainJob's JobSet and builds its pod sets from it.
        ("jobset.x-k8s.io", ("jobsets",), ("delete", "get", "list", "patch", "update", "watch"), ()),
        ("jobset.x-k8s.io", ("jobsets/finalizers",), ("get", "update"), ()),
        ("jobset.x-k8s.io", ("jobsets/status",), STATUS, ()),
    ),
    PYTORCHJOB_FRAMEWORK: (
        ("kubeflow.org", ("pytorchjobs",), ("delete", "get", "list", "patch", "update", "watch"), ()),
        ("kubeflow.org", ("pytorchjobs/finalizers",), ("get", "update"), ()),
        ("kubeflow.org", ("pytorchjobs/status",), STATUS, ()),
    ),
}
def manager_rules(config: Environment) -> list[dict]:
    rules = list(CORE_RULES)
    for framework in queued_frameworks(config.training_api):
        rules += INTEGRATION_RULES[framework]
    out = []
    for group, resources, verbs, names in rules:
        rule = {"apiGroups": [group], "resources": list(resources), "verbs": list(verbs)}
        if names:
            rule["resourceNames"] = list(names)
        out.append(rule)
    return out


def _hook(name: str, path: str, group: str, version: str, resources: list[str], operations: list[str],
          namespace_selector: dict | None = None) -> dict:
    hook = {
        "name": name, "admissionReviewVersions": ["v1"], "failurePolicy": "Fail", "sideEffects": "None",
        "clientConfig": {"service": {"name": WEBHOOK_SERVICE, "namespace": NAMESPACE, "path": path}},
        "rules": [{"apiGroups": [group], "apiVersions": [version], "operations": operations, "resources": resources}],
    }
    if namespace_selector:
        hook["namespaceSelector"] = namespace_selector
    return hook


# Our runs exist only there, and Kueue manages only them (managedJobsNamespaceSelector).
TRAINING_ONLY = {"matchLabels": {"kubernetes.io/metadata.name": TRAINING_NAMESPACE}}
# (mutating hook, validating hook) of each run kind: components/webhook/manifests.yaml.
RUN_HOOKS = {
    TRAINJOB_FRAMEWORK: ("trainjob", "trainer.kubeflow.org", "trainer-kubeflow-org", "v1alpha1", "trainjobs"),
    PYTORCHJOB_FRAMEWORK: ("pytorchjob", "kubeflow.org", "kubeflow-org", "v1", "pytorchjobs"),
}


def webhook_configurations(config: Environment) -> list[dict]:
    """The hooks of Kueue's own kinds, and of the run kind the environment queues."""
    admission = "admissionregistration.k8s.io/v1"
    create, both = ["CREATE"], ["CREATE", "UPDATE"]

    def own(verb: str, kind: str, operations: list[str], resources: list[str] | None = None) -> dict:
        return _hook(f"{verb[0]}{kind}.kb.io", f"/{verb}-kueue-x-k8s-io-v1beta2-{kind}", GROUP, "v1beta2",
                     resources or [f"{kind}s"], operations)

    mutating = [own("mutate", "clusterqueue", create), own("mutate", "resourceflavor", create),
                own("mutate", "workload", create)]
    validating = [own("validate", "clusterqueue", both), own("validate", "cohort", both),
                  own("validate", "resourceflavor", both),
                  own("validate", "workload", both, ["workloads", "workloads/status"])]
    for framework in queued_frameworks(config.training_api):
        kind, group, path_group, version, plural = RUN_HOOKS[framework]
        mutating.append(_hook(f"m{kind}.kb.io", f"/mutate-{path_group}-{version}-{kind}", group, version, [plural],
                              create, TRAINING_ONLY))
        validating.append(_hook(f"v{kind}.kb.io", f"/validate-{path_group}-{version}-{kind}", group, version, [plural],
                                both, TRAINING_ONLY))
    by_name = lambda hook: hook["name"]  # noqa: E731  (upstream's order: by name)
    return [
        {"apiVersion": admission, "kind": "MutatingWebhookConfiguration", "metadata": {"name": MUTATING_CONFIGURATION},
         "webhooks": sorted(mutating, key=by_name)},
        {"apiVersion": admission, "kind": "ValidatingWebhookConfiguration",
         "metadata": {"name": VALIDATING_CONFIGURATION}, "webhooks": sorted(validating, key=by_name)},
    ]


def service(name: str, ports: list[dict]) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"type": "ClusterIP", "selector": dict(POD_LABELS), "ports": ports}}


def visibility_api() -> list[dict]:
    """config/components/visibility: the APIService the aggregator routes visibility.kueue.x-k8s.io
    to, and the binding that lets the manager read the aggregator's client CA (in kube-system).
    insecureSkipTLSVerify as upstream without cert-manager: the manager's visibility certificate is
    self-signed in /visibility, and no CA is injected into the APIService."""
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "kueue-visibility-server-auth-reader", "namespace": KUBE_SYSTEM_NAMESPACE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "extension-apiserver-authentication-reader"},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]},
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": VISIBILITY_API},
         "spec": {"group": VISIBILITY_GROUP, "version": VISIBILITY_VERSION, "groupPriorityMinimum": 100,
                  "versionPriority": 100, "insecureSkipTLSVerify": True,
                  "service": {"name": VISIBILITY_SERVICE, "namespace": NAMESPACE}}},
    ]


def network_policies(vpc_cidr: str) -> list[dict]:
    """kueue-system denies everything but: the API server (its ENIs in the VPC) calling the admission
    and conversion webhooks and, through the aggregator, the visibility API; the manager calling the
    API server. Nothing scrapes metrics (as for the other controllers)."""
    return [
        default_deny(NAMESPACE),
        network_policy(
            NAME, NAMESPACE, match_labels(**{NAME_LABEL: NAME}),
            ingress=[{"from": [{"ipBlock": {"cidr": vpc_cidr}}], "ports": tcp_ports(WEBHOOK_PORT, VISIBILITY_PORT)}],
            egress=[{"to": api_server_peers(vpc_cidr), "ports": tcp_ports(HTTPS_PORT)}],
            description="the API server calls the webhooks and the visibility API; the manager calls the API server"),
    ]


def kueue_controller(config: Environment) -> list[dict]:
    """The controller's objects, in apply order."""
    deployment = kueue_deployment()
    binding, api_service = visibility_api()
    return [
        *namespaces(config.kubernetes_version, {NAMESPACE: PodSecurity(enforce="restricted", report="restricted")}),
        *network_policies(config.vpc_cidr),
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, "namespace": NAMESPACE}},
        *bound_role("ClusterRole", "kueue-manager-role", "kueue-manager-rolebinding", manager_rules(config),
                    account=NAME, namespace=NAMESPACE),
        *bound_role("Role", "kueue-leader-election-role", "kueue-leader-election-rolebinding",
                    rbac_rules(LEADER_ELECTION_RULES), account=NAME, namespace=NAMESPACE),
        *bound_role("Role", "kueue-manager-secrets-role", "kueue-manager-secrets-rolebinding", rbac_rules(SECRETS_RULES),
                    account=NAME, namespace=NAMESPACE),
        *bound_role("ClusterRole", "kueue-metrics-auth-role", "kueue-metrics-auth-rolebinding", rbac_rules(PROXY_RULES),
                    account=NAME, namespace=NAMESPACE),
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "kueue-metrics-reader"},
         "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]},
        binding,
        manager_config_map(config),
        # Created empty (components/internalcert/secret.yaml); the manager writes its certificate into it.
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": WEBHOOK_SECRET, "namespace": NAMESPACE},
         "type": "Opaque"},
        deployment,
        service(WEBHOOK_SERVICE, [{"port": 443, "protocol": "TCP", "targetPort": WEBHOOK_PORT}]),
        service(VISIBILITY_SERVICE, [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": VISIBILITY_PORT}]),
        service(METRICS_SERVICE, [{"name": "https", "port": METRICS_PORT, "protocol": "TCP", "targetPort": METRICS_PORT}]),
        *webhook_configurations(config),
        # After the Service and the Deployment: the aggregator routes to the Service's pods.
        api_service,
        # Node drains and node group updates evict one replica at a time.
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": NAME, "namespace": NAMESPACE},
         "spec": {"minAvailable": deployment["spec"]["replicas"] - 1, "selector": {"matchLabels": {NAME_LABEL: NAME}}}},
    ]


ADDON = AddOn(
    name="kueue", depends_on=("kueue-crds", "priority-classes"),
    # Kueue sets up an integration when its run kind's CRD exists. Its webhooks fail closed for our
    # runs and the queue objects: nothing may be created before a replica serves them.
    after=("trainer-v2-crds", "training-operator-crds"),
    applies_to=lambda config: config.queueing == "kueue",
    ready_when=Readiness(object_type="deployment", name=NAME, namespace=NAMESPACE, json_path=ROLLOUT_COMPLETE,
                         dist_wait=f"kubectl rollout status -n {NAMESPACE} deployment/{NAME} --timeout=10m",
                         timeout_minutes=10),
    objects=lambda config, values: kueue_controller(config))
