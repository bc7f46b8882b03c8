"""Kubeflow Trainer v2.3.0's controller, under `trainingApi: v2`: it admits TrainJobs and training
runtimes and runs each TrainJob as a JobSet.

Built as the release's manifests/overlays/manager installs it (../shared/contracts/kubeflow-trainer-v2.3.0/),
in kubeflow-system: its ServiceAccount and ClusterRole, the public ConfigMap (with its read-only Role
for every authenticated user: the Kubeflow SDK reads the version from it), the config file, the
empty Secret the manager fills with its certificate, the Service, the two webhook configurations
(named as main.go's cert rotator injects its CA into them) and a PodDisruptionBudget; the pod is
k8s/pods/trainer_v2.py. Differences from upstream: tests/k8s/addons/test_conformance_trainer_v2.py.

The ClusterRole reads and writes Secrets and ConfigMaps in every namespace, as upstream's: the MPI
plugin is always registered and watches the Secrets and ConfigMaps of every TrainJob, and the
configuration has no switch to leave it out. Unlike the v1 operator, this controller can read
hf-token.
"""

from __future__ import annotations

from k8s.addons import AddOn, Readiness
from k8s.addons.jobset import FULL, bound_role, rbac_rules, service, webhook
from k8s.addons.training_operator import ROLLOUT_COMPLETE
from k8s.pods.names import NAME_LABEL
from k8s.pods.trainer_v2 import (
    NAME, NAMESPACE, POD_LABELS, PORTS, WEBHOOK_SECRET, manager_config_map, trainer_deployment,
)

# cmd/trainer-controller-manager/main.go: the configurations the cert rotator injects its CA into.
MUTATING_CONFIGURATION = "defaulter.trainer.kubeflow.org"
VALIDATING_CONFIGURATION = "validator.trainer.kubeflow.org"
PUBLIC = "kubeflow-trainer-public"
VERSION = "v2.3.0"
GROUP = "trainer.kubeflow.org"
KINDS = ("clustertrainingruntimes", "trainingruntimes", "trainjobs")
# base/rbac/role.yaml.
RULES = (
    ("", ("configmaps", "secrets"), ("create", "get", "list", "patch", "update", "watch")),
    ("", ("limitranges",), ("get", "list", "watch")),
    ("", ("events",), ("create", "patch", "update", "watch")),
    ("events.k8s.io", ("events",), ("create", "patch", "update", "watch")),
    ("admissionregistration.k8s.io", ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"),
     ("get", "list", "update", "watch")),
    ("coordination.k8s.io", ("leases",), ("create", "get", "list", "update")),
    ("jobset.x-k8s.io", ("jobsets",), FULL),
    ("node.k8s.io", ("runtimeclasses",), ("get", "list", "watch")),
    ("scheduling.volcano.sh", ("podgroups",), ("create", "get", "list", "patch", "update", "watch")),
    ("scheduling.x-k8s.io", ("podgroups",), ("create", "get", "list", "patch", "update", "watch")),
    (GROUP, KINDS, ("get", "list", "patch", "update", "watch")),
    (GROUP, ("clustertrainingruntimes/finalizers", "trainingruntimes/finalizers", "trainjobs/finalizers",
             "trainjobs/status"), ("get", "patch", "update")),
)
# Runtimes labelled with this key set to "disabled" skip validation (base/webhook/patch_validating.yaml).
VALIDATION_OPT_OUT = {"matchExpressions": [
    {"key": f"{GROUP}/webhook-validation", "operator": "NotIn", "values": ["disabled"]}]}


def webhook_configurations() -> list[dict]:
    admission = "admissionregistration.k8s.io/v1"
    version, both = "v1alpha1", ["CREATE", "UPDATE"]

    def hook(name: str, verb: str, kind: str, **extra) -> dict:
        return webhook(name, f"/{verb}-trainer-kubeflow-org-{version}-{kind}", GROUP, version, f"{kind}s", both,
                       service=NAME, **extra)

    return [
        {"apiVersion": admission, "kind": "MutatingWebhookConfiguration", "metadata": {"name": MUTATING_CONFIGURATION},
         "webhooks": [hook(f"defaulter.trainjob.{GROUP}", "mutate", "trainjob")]},
        {"apiVersion": admission, "kind": "ValidatingWebhookConfiguration",
         "metadata": {"name": VALIDATING_CONFIGURATION}, "webhooks": [
             hook(f"validator.clustertrainingruntime.{GROUP}", "validate", "clustertrainingruntime",
                  object_selector=VALIDATION_OPT_OUT),
             hook(f"validator.trainingruntime.{GROUP}", "validate", "trainingruntime", object_selector=VALIDATION_OPT_OUT),
             hook(f"validator.trainjob.{GROUP}", "validate", "trainjob")]},
    ]


def trainer_controller() -> list[dict]:
    """The controller's objects, in apply order."""
    deployment = trainer_deployment()
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, "namespace": NAMESPACE}},
        *bound_role("ClusterRole", NAME, NAME, rbac_rules(RULES), account=NAME),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": PUBLIC, "namespace": NAMESPACE},
         "data": {"kubeflow_trainer_version": VERSION}},
        *bound_role("Role", PUBLIC, PUBLIC, [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [PUBLIC],
                                            "verbs": ["get", "list", "watch"]}],
                    subjects=[{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:authenticated"}]),
        manager_config_map(),
        # Created empty (the overlay's secretGenerator); the manager writes its certificate into it.
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": WEBHOOK_SECRET, "namespace": NAMESPACE},
         "type": "Opaque"},
        deployment,
        service(NAME, [{"name": "monitoring-port", "port": PORTS["metrics"], "protocol": "TCP", "targetPort": "metrics"},
                       {"name": "webhook-server", "port": 443, "protocol": "TCP", "targetPort": "webhook"},
                       {"name": "status-server", "port": PORTS["status-server"], "protocol": "TCP",
                        "targetPort": "status-server"}], selector=POD_LABELS),
        *webhook_configurations(),
        # Node drains and node group updates evict one replica at a time.
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": NAME, "namespace": NAMESPACE},
         "spec": {"minAvailable": deployment["spec"]["replicas"] - 1, "selector": {"matchLabels": {NAME_LABEL: NAME}}}},
    ]


ADDON = AddOn(
    name="trainer-v2", depends_on=("namespaces", "trainer-v2-crds", "jobset", "priority-classes"),
    applies_to=lambda config: config.training_api == "v2",
    # `ops` creates a run's runtime and TrainJob right after a deploy; the webhooks (Fail) reject
    # them while no replica serves.
    ready_when=Readiness(object_type="deployment", name=NAME, namespace=NAMESPACE, json_path=ROLLOUT_COMPLETE,
                         dist_wait=f"kubectl rollout status -n {NAMESPACE} deployment/{NAME} --timeout=10m",
                         timeout_minutes=10),
    objects=lambda config, values: trainer_controller())
