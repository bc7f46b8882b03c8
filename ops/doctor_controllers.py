"""`ops doctor`'s rows for the controllers that run the training APIs: each one's Deployment Ready,
its leader-election Lease held and renewed, and, where its webhooks fail closed, a ready endpoint
behind the Service the API server calls them through; and the Ready row of every Deployment and
DaemonSet doctor checks (workload_row).

Which controllers: the Training Operator always (under trainingApi v2 it stays for the NCCL
validation's MPIJob: k8s/pods/training_operator.py environment_schemes); under v2 also Kubeflow
Trainer and the JobSet controller, in kubeflow-system.

Leases (controller-runtime leader election; an empty namespace in the configuration means the
manager's own namespace):
- Training Operator v1.9.4: `--leader-election-id` default (config/kubernetes.py TRAINING_OPERATOR_LEASE);
- Trainer v2.3.0: `leaderElection.resourceName: trainer.kubeflow.org`
  (../shared/contracts/kubeflow-trainer-v2.3.0/base-manager-controller_manager_config.yaml:36,
  k8s/pods/trainer_v2.py LEASE);
- JobSet v0.12.0: its configuration names none (../shared/contracts/jobset-v0.12.0/
  components-manager-controller_manager_config.yaml, and ours: k8s/pods/jobset.py MANAGER_CONFIG),
  so `SetDefaults_Configuration` gives `DefaultLeaderElectionID = "6d4f6a47.jobset.x-k8s.io"`
  (kubernetes-sigs/jobset v0.12.0 api/config/v1alpha1/defaults.go:32,58-59).

Webhook Services: Trainer's is `certManagement.webhookServiceName` of its configuration; JobSet's
`jobset-webhook-service` (k8s/pods/jobset.py WEBHOOK_SERVICE). Every webhook of both fails closed
(failurePolicy Fail: base-webhook-manifests.yaml, components-webhook-manifests.yaml), so a Service
without a ready endpoint refuses every TrainJob, JobSet and pod of a JobSet.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from config import Environment
from config.kubernetes import (
    JOBSET_CONTROLLER, KUBEFLOW_NAMESPACE, KUBEFLOW_SYSTEM_NAMESPACE, TRAINER_CONTROLLER, TRAINING_OPERATOR,
    TRAINING_OPERATOR_LEASE,
)
from k8s.pods import jobset, trainer_v2
from ops.checks import FAIL, PASS, Check
from ops.kube_reads import READ_TIMEOUT_S, list_objects, read

JOBSET_LEASE = "6d4f6a47.jobset.x-k8s.io"
# The label the EndpointSlice controller puts on every slice of a Service (discovery.k8s.io/v1).
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


@dataclass(frozen=True)
class Controller:
    namespace: str
    deployment: str
    lease: str
    reconciles: str  # what stops being reconciled without a leader
    webhook_service: str | None = None  # the Service its fail-closed webhooks are called through
    admits: str = ""  # what those webhooks admit


TRAINING_OPERATOR_CONTROLLER = Controller(KUBEFLOW_NAMESPACE, TRAINING_OPERATOR, TRAINING_OPERATOR_LEASE, "jobs")
TRAINER = Controller(KUBEFLOW_SYSTEM_NAMESPACE, TRAINER_CONTROLLER, trainer_v2.LEASE, "TrainJobs",
                     trainer_v2.MANAGER_CONFIG["certManagement"]["webhookServiceName"],
                     "TrainJob or training runtime")
JOBSET = Controller(KUBEFLOW_SYSTEM_NAMESPACE, JOBSET_CONTROLLER, JOBSET_LEASE, "JobSets", jobset.WEBHOOK_SERVICE,
                    "JobSet, and no pod of one")


def controllers(env: Environment) -> tuple[Controller, ...]:
    return (TRAINING_OPERATOR_CONTROLLER,) + ((TRAINER, JOBSET) if env.training_api == "v2" else ())


def workload_row(apps: Any, kind: str, namespace: str, name: str) -> Check:
    """A Deployment with every replica Ready, or a DaemonSet with a Ready pod on every node it selects."""
    row = f"{kind.lower()} {namespace}/{name}"
    reader = apps.read_namespaced_deployment if kind == "Deployment" else apps.read_namespaced_daemon_set
    obj = read(lambda: reader(name, namespace, _request_timeout=READ_TIMEOUT_S), f"read {kind} {namespace}/{name}")
    if obj is None:
        return Check(row, FAIL, "not found")
    if kind == "Deployment":
        wanted = obj.spec.replicas if obj.spec.replicas is not None else 1
        ready, unit, ok = obj.status.ready_replicas or 0, "replicas", wanted >= 1
    else:
        wanted, ready, unit, ok = obj.status.desired_number_scheduled or 0, obj.status.number_ready or 0, "pods", True
    reason = f"{ready}/{wanted} {unit} Ready"
    if not ok or ready < wanted:
        return Check(row, FAIL, reason)
    return Check(row, PASS, reason + (" (no matching nodes now)" if not wanted else ""))


def leader_row(api_client: Any, controller: Controller, now: datetime) -> Check:
    """The controller's replicas elect a leader through a Lease: held by someone and renewed within its duration."""
    from kubernetes.client import CoordinationV1Api

    c = controller
    row = f"leader {c.namespace}/{c.deployment}"
    lease = read(lambda: CoordinationV1Api(api_client).read_namespaced_lease(
        c.lease, c.namespace, _request_timeout=READ_TIMEOUT_S), f"read Lease {c.namespace}/{c.lease}")
    if lease is None or not lease.spec or not lease.spec.holder_identity:
        return Check(row, FAIL, f"no replica holds Lease {c.lease}: no controller reconciles {c.reconciles}")
    spec = lease.spec
    renewed = spec.renew_time
    duration = spec.lease_duration_seconds or 15
    age = (now - renewed).total_seconds() if renewed else None
    if age is None or age > duration:
        return Check(row, FAIL, f"Lease held by {spec.holder_identity} but not renewed for "
                                f"{'ever' if age is None else f'{age:.0f} s'} (duration {duration} s): its leader is gone")
    return Check(row, PASS, f"held by {spec.holder_identity.split('_', 1)[0]}, renewed {age:.0f} s ago")


def webhook_row(api_client: Any, controller: Controller) -> Check:
    """A ready endpoint behind the controller's webhook Service (its EndpointSlices; an endpoint
    whose `ready` condition is unset counts as ready, as the API defines it)."""
    c = controller
    service = c.webhook_service
    row = f"webhook {c.namespace}/{service}"
    slices = list_objects(api_client, "discovery.k8s.io", "v1", "endpointslices",
                          f"list the endpoints of Service {c.namespace}/{service}", namespace=c.namespace,
                          label_selector=f"{SERVICE_NAME_LABEL}={service}")
    ready = sorted({(e.get("targetRef") or {}).get("name") or ",".join(e.get("addresses") or ["?"])
                    for s in slices for e in s.get("endpoints") or []
                    if (e.get("conditions") or {}).get("ready") is not False})
    if not ready:
        return Check(row, FAIL, f"no ready endpoint: its webhooks fail closed, so the API server admits no "
                                f"{c.admits} until a {c.deployment} pod is Ready")
    return Check(row, PASS, f"{len(ready)} ready endpoint(s): {', '.join(ready)}")


def rows(env: Environment, api_client: Any, apps: Any, now: datetime) -> list[Check]:
    """Per controller: its Deployment, its leader, its webhook endpoints."""
    found = controllers(env)
    return ([workload_row(apps, "Deployment", c.namespace, c.deployment) for c in found]
            + [leader_row(api_client, c, now) for c in found]
            + [webhook_row(api_client, c) for c in found if c.webhook_service])
