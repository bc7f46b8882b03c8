"""`ops doctor` on a trainingApi v2 cluster: Kubeflow Trainer's and JobSet's controllers (Deployment,
leader Lease, webhook endpoints) and TrainJob runs. The same fake API server and helpers as
test_ops_doctor.py; prod switched to v2."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
import yaml

from config.kubernetes import JOBSET_CONTROLLER, TRAINER_CONTROLLER, TRAINING_OPERATOR
from k8s.pods import jobset, trainer_v2
from ops import doctor_controllers
from ops.checks import FAIL, WARN, Check
from ops.envconfig import load
from tests.conftest import contract
from test_ops_doctor import IMAGES, JOBS, NOW, api, deployment, doctor_run, failures, healthy_routes

SYSTEM = "kubeflow-system"
TRAINJOBS = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/training/trainjobs"
SLICES = f"/apis/discovery.k8s.io/v1/namespaces/{SYSTEM}/endpointslices"
TRAINER_WEBHOOK = TRAINER_CONTROLLER  # certManagement.webhookServiceName
JOBSET_WEBHOOK = "jobset-webhook-service"


def v2_prod():
    return replace(load("prod"), training_api="v2")


def lease(holder: str, age_s: int) -> dict:
    return {"metadata": {}, "spec": {"holderIdentity": f"{holder}_0f1e2d3c", "leaseDurationSeconds": 15,
                                     "renewTime": (NOW - timedelta(seconds=age_s)).isoformat()}}


def endpoint_slice(service: str, *endpoints: dict) -> dict:
    return {"metadata": {"name": f"{service}-x1", "labels": {"kubernetes.io/service-name": service}},
            "addressType": "IPv4", "endpoints": list(endpoints) or None, "ports": [{"port": 9443}]}


def endpoint(pod: str, ready: bool | None = True) -> dict:
    conditions = {} if ready is None else {"ready": ready}
    return {"addresses": ["10.0.0.1"], "conditions": conditions, "targetRef": {"kind": "Pod", "name": pod}}


def current_trainjob(env, preset: str, **status) -> dict:
    from config.presets import get_preset
    from k8s.pods.trainjob import render_trainjob_run

    _, job = render_trainjob_run(env, preset, image=IMAGES[get_preset(preset).image_variant])
    job["status"] = status
    return job


def v2_routes() -> dict:
    routes = healthy_routes()
    del routes[("GET", JOBS)]  # no PyTorchJob CRD under v2: the API answers 404
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM}/leases"
    slices = {TRAINER_WEBHOOK: endpoint_slice(TRAINER_WEBHOOK, endpoint("trainer-a"), endpoint("trainer-b", None)),
              JOBSET_WEBHOOK: endpoint_slice(JOBSET_WEBHOOK, endpoint("jobset-a"), endpoint("jobset-b"))}
    routes.update({
        ("GET", f"/apis/apps/v1/namespaces/{SYSTEM}/deployments/{TRAINER_CONTROLLER}"): deployment(2, 2),
        ("GET", f"/apis/apps/v1/namespaces/{SYSTEM}/deployments/{JOBSET_CONTROLLER}"): deployment(2, 2),
        ("GET", f"{leases}/trainer.kubeflow.org"): lease("kubeflow-trainer-controller-manager-5c8d-abcde", 3),
        ("GET", f"{leases}/6d4f6a47.jobset.x-k8s.io"): lease("jobset-controller-manager-7f9b-fghij", 2),
        ("GET", TRAINJOBS): {"kind": "TrainJobList", "items": [current_trainjob(
            v2_prod(), "llama3-8b-fsdp", jobsStatus=[{"name": "node", "active": 2}])]},
        "slices": slices,
    })
    return routes


def run_v2(routes: dict) -> tuple[list[Check], object]:
    slices = routes.pop("slices")
    client, server = api(routes)

    def answer(call):  # EndpointSlices by the label selector doctor asks with
        if call.path == SLICES:
            service = call.query["labelSelector"].split("=", 1)[1]
            return 200, {"kind": "EndpointSliceList", "items": [slices[service]] if service in slices else []}
        return None
    server.answer(answer)
    return doctor_run(v2_prod(), client), server


def test_a_healthy_v2_cluster_passes_and_reports_each_controller():
    rows, server = run_v2(v2_routes())
    assert failures(rows) == []
    by_name = {r.name: r.reason for r in rows}
    assert by_name[f"deployment {SYSTEM}/{TRAINER_CONTROLLER}"] == "2/2 replicas Ready"
    assert by_name[f"deployment {SYSTEM}/{JOBSET_CONTROLLER}"] == "2/2 replicas Ready"
    assert by_name[f"leader {SYSTEM}/{TRAINER_CONTROLLER}"] == ("held by kubeflow-trainer-controller-manager-5c8d-abcde, "
                                                                "renewed 3 s ago")
    assert by_name[f"leader {SYSTEM}/{JOBSET_CONTROLLER}"] == "held by jobset-controller-manager-7f9b-fghij, renewed 2 s ago"
    # An endpoint whose ready condition is unset is ready (discovery.k8s.io/v1 EndpointConditions).
    assert by_name[f"webhook {SYSTEM}/{TRAINER_WEBHOOK}"] == "2 ready endpoint(s): trainer-a, trainer-b"
    assert by_name[f"webhook {SYSTEM}/{JOBSET_WEBHOOK}"] == "2 ready endpoint(s): jobset-a, jobset-b"
    # The Training Operator stays for the NCCL validation's MPIJob, and is checked as under v1.
    assert by_name[f"leader kubeflow/{TRAINING_OPERATOR}"].startswith("held by training-operator-")
    [run] = [r for r in rows if r.name.startswith("run ")]
    assert run.reason == "Running; the spec `ops start llama3-8b-fsdp` creates now"
    assert not [c for c in server.calls if "pytorchjobs" in c.path]
    assert {c.method for c in server.calls} == {"GET"}


def test_a_v1_cluster_has_no_v2_controller_rows():
    client, server = api(healthy_routes())
    rows = doctor_run(load("prod"), client)
    assert not [r for r in rows if SYSTEM in r.name] and failures(rows) == []
    assert not [c for c in server.calls if SYSTEM in c.path]


def broken(change) -> list[Check]:
    routes = v2_routes()
    change(routes)
    rows, _ = run_v2(routes)
    return failures(rows)


LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM}/leases"


@pytest.mark.parametrize("change, row, words", [
    (lambda r: r.update({("GET", f"/apis/apps/v1/namespaces/{SYSTEM}/deployments/{TRAINER_CONTROLLER}"): deployment(1, 2)}),
     f"deployment {SYSTEM}/{TRAINER_CONTROLLER}", "1/2 replicas Ready"),
    (lambda r: r.pop(("GET", f"/apis/apps/v1/namespaces/{SYSTEM}/deployments/{JOBSET_CONTROLLER}")),
     f"deployment {SYSTEM}/{JOBSET_CONTROLLER}", "not found"),
    (lambda r: r.pop(("GET", f"{LEASES}/6d4f6a47.jobset.x-k8s.io")),
     f"leader {SYSTEM}/{JOBSET_CONTROLLER}",
     "no replica holds Lease 6d4f6a47.jobset.x-k8s.io: no controller reconciles JobSets"),
    (lambda r: r.update({("GET", f"{LEASES}/trainer.kubeflow.org"): lease("kubeflow-trainer-controller-manager-x", 60)}),
     f"leader {SYSTEM}/{TRAINER_CONTROLLER}", "not renewed for 60 s (duration 15 s): its leader is gone"),
    (lambda r: r["slices"].update({JOBSET_WEBHOOK: endpoint_slice(JOBSET_WEBHOOK)}),  # a slice with no endpoints
     f"webhook {SYSTEM}/{JOBSET_WEBHOOK}", "no ready endpoint: its webhooks fail closed, so the API server admits no "
                                          "JobSet, and no pod of one until a jobset-controller-manager pod is Ready"),
    (lambda r: r["slices"].update({TRAINER_WEBHOOK: endpoint_slice(TRAINER_WEBHOOK, endpoint("trainer-a", False))}),
     f"webhook {SYSTEM}/{TRAINER_WEBHOOK}", "admits no TrainJob or training runtime"),
    (lambda r: r["slices"].pop(TRAINER_WEBHOOK), f"webhook {SYSTEM}/{TRAINER_WEBHOOK}", "no ready endpoint"),
])
def test_a_broken_v2_controller_fails_exactly_its_row(change, row, words):
    [found] = broken(change)
    assert (found.name, found.status) == (row, FAIL) and words in found.reason, found


@pytest.mark.parametrize("status, expected", [
    ({"conditions": [{"type": "Suspended", "status": "True"}]}, (WARN, "Suspended; older code")),
    ({"jobsStatus": [{"name": "node", "active": 0}]}, (WARN, "Pending; older code")),
    ({"conditions": [{"type": "Complete", "status": "True"}]}, None),
    ({"conditions": [{"type": "Failed", "status": "True"}]}, None),
])
def test_trainjob_runs_show_their_phase_and_finished_ones_are_left_out(status, expected):
    routes = v2_routes()
    old = current_trainjob(v2_prod(), "cpu-ddp", **status)
    old["metadata"]["name"] = "cpu-ddp-0ld0ld00"
    routes[("GET", TRAINJOBS)]["items"].append(old)
    rows, _ = run_v2(routes)
    found = [(r.status, r.reason) for r in rows if r.name == "run cpu-ddp-0ld0ld00"]
    if expected is None:
        assert found == []
    else:
        [(state, reason)] = found
        assert state == expected[0] and reason.startswith(expected[1]), reason


def test_the_leases_doctor_reads_are_the_ones_the_releases_elect_with():
    trainer_config = yaml.safe_load(
        contract("kubeflow-trainer-v2.3.0", "base-manager-controller_manager_config.yaml").read_text())
    assert doctor_controllers.TRAINER.lease == trainer_config["leaderElection"]["resourceName"] == trainer_v2.LEASE
    # An empty resourceNamespace: the Lease lives in the manager's own namespace.
    assert trainer_config["leaderElection"]["resourceNamespace"] == ""
    assert doctor_controllers.TRAINER.namespace == trainer_v2.NAMESPACE
    # JobSet's configuration, upstream's and ours, names no Lease: the release's default applies
    # (jobset v0.12.0 api/config/v1alpha1/defaults.go DefaultLeaderElectionID).
    jobset_config = yaml.safe_load(
        contract("jobset-v0.12.0", "components-manager-controller_manager_config.yaml").read_text())
    assert "resourceName" not in jobset_config["leaderElection"]
    assert "resourceName" not in jobset.MANAGER_CONFIG["leaderElection"]
    assert doctor_controllers.JOBSET.lease == "6d4f6a47.jobset.x-k8s.io"
    assert doctor_controllers.JOBSET.namespace == jobset.NAMESPACE


def test_the_webhook_services_doctor_reads_are_the_ones_the_webhook_configurations_call():
    from k8s.addons import jobset as jobset_addon
    from k8s.addons import trainer_v2 as trainer_addon

    called = {(w["clientConfig"]["service"]["namespace"], w["clientConfig"]["service"]["name"])
              for module in (trainer_addon, jobset_addon) for obj in module.webhook_configurations()
              for w in obj["webhooks"]}
    assert called == {(c.namespace, c.webhook_service) for c in (doctor_controllers.TRAINER, doctor_controllers.JOBSET)}
