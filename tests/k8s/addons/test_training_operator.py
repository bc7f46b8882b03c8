"""The Training Operator add-on (k8s/addons/training_operator.py, its pod k8s/pods/training_operator.py)."""

import pytest

from k8s.addons.training_operator import ADDON, WEBHOOK_CONFIGURATION, training_operator
from k8s.pods.names import KUBEFLOW_NAMESPACE
from k8s.pods.training_operator import WEBHOOK_SECRET, operator_deployment
from k8s_walk import one, pod


@pytest.fixture(scope="module")
def operator():
    return training_operator()


def test_operator_enables_only_the_schemes_we_use(operator):
    container = pod(one(operator, "Deployment"))["containers"][0]
    schemes = sorted(a.split("=", 1)[1] for a in container["args"] if a.startswith("--enable-scheme="))
    assert schemes == ["mpijob", "pytorchjob"]
    assert container["image"] == "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489"


def test_operator_webhook_pieces_agree(operator):
    container = pod(one(operator, "Deployment"))["containers"][0]
    args = dict(a.split("=", 1) for a in container["args"] if "=" in a)
    service, secret = one(operator, "Service"), one(operator, "Secret")
    assert args["--webhook-service-name"] == service["metadata"]["name"]
    assert args["--webhook-secret-name"] == secret["metadata"]["name"] == WEBHOOK_SECRET
    webhook = one(operator, "ValidatingWebhookConfiguration")
    assert webhook["metadata"]["name"] == WEBHOOK_CONFIGURATION
    # v1 serves no MPIJob validator: registering one would reject every MPIJob (failurePolicy Fail).
    assert sorted(r for w in webhook["webhooks"] for r in w["rules"][0]["resources"]) == ["pytorchjobs"]
    for hook in webhook["webhooks"]:
        assert hook["failurePolicy"] == "Fail"
        client = hook["clientConfig"]["service"]
        assert (client["name"], client["namespace"]) == (service["metadata"]["name"], KUBEFLOW_NAMESPACE)
        port = next(p for p in service["spec"]["ports"] if p["port"] == client["port"])
        assert port["targetPort"] == int(args["--webhook-server-port"])
        assert client["path"] == f"/validate-kubeflow-org-v1-{hook['rules'][0]['resources'][0][:-1]}"
    assert not secret.get("data") and not secret.get("stringData")
    assert "namespace" not in webhook["metadata"], "cluster-scoped"


def test_operator_is_probed_bounded_and_reads_its_certificates_from_the_webhook_secret(operator):
    spec = pod(one(operator, "Deployment"))
    container = spec["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"]["memory"] == container["resources"]["limits"]["memory"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["runAsNonRoot"] is True
    [mount] = container["volumeMounts"]
    assert (mount["mountPath"], mount["readOnly"]) == ("/tmp/k8s-webhook-server/serving-certs", True)
    [volume] = spec["volumes"]
    assert volume["secret"]["secretName"] == one(operator, "Secret")["metadata"]["name"] == WEBHOOK_SECRET
    assert "emptyDir" not in volume, "the rotator writes the Secret; only the kubelet fills the directory"
    assert spec["automountServiceAccountToken"] is True, "the operator is an API client"
    assert spec["serviceAccountName"] == one(operator, "ServiceAccount")["metadata"]["name"]


def test_operator_rbac_covers_what_the_controllers_do(operator):
    role = one(operator, "ClusterRole")
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    for need in [("kubeflow.org", "pytorchjobs", "watch"), ("kubeflow.org", "pytorchjobs/status", "update"),
                 ("kubeflow.org", "mpijobs", "watch"), ("", "pods", "create"), ("", "services", "create"),
                 ("", "pods/exec", "create"), ("rbac.authorization.k8s.io", "roles", "create"),
                 ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "update"),
                 ("scheduling.volcano.sh", "podgroups", "watch"), ("scheduling.x-k8s.io", "podgroups", "watch")]:
        assert need in granted, need
    assert not any("*" in rule["verbs"] or "*" in rule["resources"] for rule in role["rules"])
    binding = one(operator, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"][0]["namespace"] == KUBEFLOW_NAMESPACE


def test_the_operator_reads_secrets_and_takes_its_lease_only_in_its_own_namespace(operator):
    assert not any(r in rule["resources"] for rule in one(operator, "ClusterRole")["rules"] for r in ("secrets", "leases"))
    role, binding = one(operator, "Role"), one(operator, "RoleBinding")
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == KUBEFLOW_NAMESPACE
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert {("", "secrets", "update"), ("", "secrets", "watch"), ("coordination.k8s.io", "leases", "update")} <= granted
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]}
    assert binding["subjects"][0]["name"] == one(operator, "ServiceAccount")["metadata"]["name"]
    # The one Secret there is the one the rotator writes, and the Deployment mounts.
    assert one(operator, "Secret")["metadata"]["namespace"] == KUBEFLOW_NAMESPACE


def test_operator_runs_two_replicas_on_different_nodes_and_a_drain_keeps_one(operator):
    from k8s.pods.names import TRAINING_OPERATOR_LEASE
    from k8s.pods.training_operator import REPLICAS

    deployment = one(operator, "Deployment")
    assert deployment["spec"]["replicas"] == REPLICAS == 2
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    spec = pod(deployment)
    [anti] = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert anti["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in spec["affinity"]["podAntiAffinity"], \
        "a rolling update's third pod must fit on a two-node system group"
    budget = one(operator, "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == REPLICAS - 1
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert "--leader-elect" in spec["containers"][0]["args"]
    assert not any(a.startswith("--leader-election-id") for a in spec["containers"][0]["args"])
    assert TRAINING_OPERATOR_LEASE.endswith(".training-operator.kubeflow.org")


def test_operator_readiness_waits_for_a_finished_rollout():
    """availableReplicas stays set by the old pods during a rollout; the Progressing condition's
    reason is NewReplicaSetAvailable only once every new replica is available."""
    ready = ADDON.ready_when
    assert ready.json_path == '.status.conditions[?(@.reason=="NewReplicaSetAvailable")].status'
    assert ready.dist_wait == "kubectl rollout status -n kubeflow deployment/training-operator --timeout=10m"
    assert ready.timeout_minutes * 60 < 15 * 60, "inside the kubectl provider's 15-minute Lambda"


def test_operator_refuses_a_job_kind_it_has_no_crd_for():
    with pytest.raises(ValueError, match="tfjob"):
        operator_deployment(schemes=("pytorchjob", "tfjob"))
