"""`ops doctor` against the recording fake API server, under the real kubernetes client.

A healthy prod-shaped cluster (two system nodes, two p5 nodes, one CPU node) passes every row;
each broken variant fails exactly the row that names the fault, and nothing else.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from kubernetes.client import ApiClient

from config.instance_types import INSTANCE_TYPES
from config.kubernetes import FSX_CLAIM_NAME, INSTANCE_TYPE_LABEL, NCCL_GROUP_LABEL, NCCL_PAIR_ANNOTATION, NODEGROUP_LABEL
from k8s.pods.names import (
    EFA_DEVICE_PLUGIN, ETCD_SERVICE, NVIDIA_DEVICE_PLUGIN, TRAINING_OPERATOR, TRAINING_OPERATOR_LEASE,
)
from kube_fakes import FakeApiServer, api_client_on
from ops import cli, doctor, images, kube
from ops.checks import FAIL, PASS, WARN, Check
from ops.envconfig import load
from ops.errors import OpsError

NODES = "/api/v1/nodes"
DAEMONSETS = "/apis/apps/v1/namespaces/kube-system/daemonsets"
PVC = f"/api/v1/namespaces/training/persistentvolumeclaims/{FSX_CLAIM_NAME}"
PODS = "/api/v1/namespaces/training/pods"
OPERATOR = f"/apis/apps/v1/namespaces/kubeflow/deployments/{TRAINING_OPERATOR}"
ETCD = f"/apis/apps/v1/namespaces/training/deployments/{ETCD_SERVICE}"
LAUNCHER = "nccl-allreduce-p5-0-launcher"
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/kubeflow/leases/{TRAINING_OPERATOR_LEASE}"
JOBS = "/apis/kubeflow.org/v1/namespaces/training/pytorchjobs"
NCCL_LOGS = Path(__file__).parent / "fixtures" / "nccl"
P5 = INSTANCE_TYPES["p5.48xlarge"]
NOW = datetime(2026, 11, 23, 10, 0, 0, tzinfo=timezone.utc)
IMAGES = {"cpu": "registry/trainer:cpu-7", "gpu": "registry/trainer:gpu-7"}
HEALTH = ("ContainerRuntimeReady", "KernelReady", "NetworkingReady", "StorageReady")


@pytest.fixture(scope="module")
def prod():
    return load("prod")


def node(name: str, group: str, instance: str, *, gpu: bool = False, **allocatable: str) -> dict:
    types = HEALTH + (("AcceleratedHardwareReady",) if gpu else ())
    return {"metadata": {"name": name, "labels": {NODEGROUP_LABEL: group, INSTANCE_TYPE_LABEL: instance}},
            "status": {"allocatable": {"cpu": "4", **{k.replace("_", "."): v for k, v in allocatable.items()}},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]
                       + [{"type": t, "status": "True", "reason": f"{t}Healthy"} for t in types]}}


def p5_node(name: str) -> dict:
    n = node(name, "p5", "p5.48xlarge", gpu=True)
    n["status"]["allocatable"].update({"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32", "hugepages-2Mi": "5Gi"})
    return n


def daemonset(ready: int, desired: int) -> dict:
    return {"metadata": {"name": "ds"}, "status": {"currentNumberScheduled": desired, "desiredNumberScheduled": desired,
                                                   "numberMisscheduled": 0, "numberReady": ready}}


def deployment(ready: int, replicas: int = 1) -> dict:
    return {"metadata": {"name": "d"}, "spec": {"replicas": replicas, "selector": {}, "template": {}},
            "status": {"readyReplicas": ready}}


def current_run(env, preset: str) -> dict:
    """A run of `preset` exactly as `ops start` would create it now, Running."""
    from config.presets import get_preset
    from k8s.pods.pytorchjob import render_run

    job = render_run(env, preset, image=IMAGES[get_preset(preset).image_variant])
    job["status"] = {"conditions": [{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}]}
    return job


def healthy_routes() -> dict:
    from ops.envconfig import load as load_env

    return {
        ("GET", NODES): {"kind": "NodeList", "items": [
            node("sys-a", "system", "m5.xlarge"), node("sys-b", "system", "m5.xlarge"),
            p5_node("gpu-a"), p5_node("gpu-b"), node("cpu-a", "cpu", "m5.2xlarge")]},
        ("GET", f"{DAEMONSETS}/{NVIDIA_DEVICE_PLUGIN}"): daemonset(2, 2),
        ("GET", f"{DAEMONSETS}/{EFA_DEVICE_PLUGIN}"): daemonset(2, 2),
        ("GET", OPERATOR): deployment(2, 2),
        ("GET", LEASE): {"metadata": {"name": TRAINING_OPERATOR_LEASE}, "spec": {
            "holderIdentity": "training-operator-7d9f6b8c4-x2k8q_3c1e0f0a-1b2c-4d5e-8f90-a1b2c3d4e5f6",
            "leaseDurationSeconds": 15, "renewTime": (NOW - timedelta(seconds=4)).isoformat()}},
        ("GET", ETCD): deployment(1),
        ("GET", PVC): {"metadata": {"name": FSX_CLAIM_NAME}, "spec": {"volumeName": "fsx-pv"},
                       "status": {"phase": "Bound"}},
        ("GET", PODS): {"kind": "PodList", "items": [
            {"metadata": {"name": LAUNCHER, "creationTimestamp": "2026-11-23T09:00:00Z",
                          "annotations": {NCCL_PAIR_ANNOTATION: "gpu-a gpu-b"}},
             "status": {"phase": "Succeeded"}}]},
        ("GET", f"{PODS}/{LAUNCHER}/log"): (NCCL_LOGS / "p5-pass.log").read_bytes(),
        ("GET", JOBS): {"kind": "PyTorchJobList", "items": [current_run(load_env("prod"), "llama3-8b-fsdp")]},
    }


def api(routes: dict) -> tuple[ApiClient, FakeApiServer]:
    server = FakeApiServer()
    for (method, path), body in routes.items():
        server.on(method, path, body)
    return api_client_on(server), server


def failures(rows: list[Check]) -> list[Check]:
    return [r for r in rows if r.status != PASS]


def doctor_run(env, client, **kwargs) -> list[Check]:
    return doctor.run(env, client, **{"images": IMAGES, "now": NOW, **kwargs})


def run_broken(env, change, **kwargs) -> list[Check]:
    routes = healthy_routes()
    change(routes)
    client, _ = api(routes)
    return failures(doctor_run(env, client, **kwargs))


def test_a_healthy_cluster_passes_every_row(prod):
    client, server = api(healthy_routes())
    rows = doctor_run(prod, client)
    run_name = healthy_routes()[("GET", JOBS)]["items"][0]["metadata"]["name"]
    assert failures(rows) == []
    assert {r.name: r.reason for r in rows} == {
        "nodes system": "2/2 Ready", "nodes p5": "2/2 Ready", "nodes cpu": "1/1 Ready",
        "efa p5": "device plugin (aws-efa-k8s-device-plugin): pods request vpc.amazonaws.com/efa",
        "allocatable gpu-a": "nvidia.com/gpu 8, vpc.amazonaws.com/efa 32, hugepages-2Mi 5120Mi",
        "allocatable gpu-b": "nvidia.com/gpu 8, vpc.amazonaws.com/efa 32, hugepages-2Mi 5120Mi",
        **{f"node-health {n}": "ContainerRuntimeReady, KernelReady, NetworkingReady, StorageReady True"
           for n in ("sys-a", "sys-b", "cpu-a")},
        **{f"node-health {n}": "ContainerRuntimeReady, KernelReady, NetworkingReady, StorageReady, "
                               "AcceleratedHardwareReady True" for n in ("gpu-a", "gpu-b")},
        f"daemonset kube-system/{NVIDIA_DEVICE_PLUGIN}": "2/2 pods Ready",
        f"daemonset kube-system/{EFA_DEVICE_PLUGIN}": "2/2 pods Ready",
        f"deployment kubeflow/{TRAINING_OPERATOR}": "2/2 replicas Ready",
        f"deployment training/{ETCD_SERVICE}": "1/1 replicas Ready",
        f"leader kubeflow/{TRAINING_OPERATOR}": "held by training-operator-7d9f6b8c4-x2k8q, renewed 4 s ago",
        f"pvc training/{FSX_CLAIM_NAME}": "Bound to fsx-pv",
        "nccl p5": ("1 pair(s) passed; lowest gpu-a<->gpu-b: 441.3 GB/s lowest over 1 GiB to 16 GiB (peak 488.4 at "
                    "16 GiB), floor 350 GB/s (p5.48xlarge, sweep of 2026-11-23 09:00:00+00:00)"),
        f"run {run_name}": "Running; the spec `ops start llama3-8b-fsdp` creates now",
    }
    nodes_call = next(c for c in server.calls if c.path == NODES)
    assert nodes_call.query["labelSelector"] == NODEGROUP_LABEL
    pods_call = next(c for c in server.calls if c.path == PODS)
    assert pods_call.query["labelSelector"] == f"{NCCL_GROUP_LABEL}=p5,training.kubeflow.org/replica-type=launcher"
    log_call = next(c for c in server.calls if c.path.endswith("/log"))
    assert int(log_call.query["tailLines"]) >= 2000, "NCCL's INFO lines come before the table"
    # Only GETs: doctor never changes the cluster.
    assert {c.method for c in server.calls} == {"GET"}


def test_the_hugepage_floor_is_what_the_efa_node_user_data_reserves():
    """config/node_user_data.py reserves 2560 pages of 2 MiB on EFA nodes."""
    assert doctor.expected_allocatable(P5)["hugepages-2Mi"] == (">=", 2560 * 2 * 2**20)


def test_a_notready_node_fails_its_group_row(prod):
    def change(routes):
        ready = routes[("GET", NODES)]["items"][3]["status"]["conditions"][0]
        ready.update(status="False", reason="KubeletNotReady")
    assert run_broken(prod, change) == [Check("nodes p5", FAIL, "1/2 Ready; NotReady: gpu-b (KubeletNotReady)")]


def test_fewer_ready_nodes_than_min_size_fail(prod):
    def change(routes):
        del routes[("GET", NODES)]["items"][1]
    assert run_broken(prod, change) == [Check("nodes system", FAIL, "1 Ready node(s), minSize is 2")]


@pytest.mark.parametrize("resource, value, reason", [
    ("nvidia.com/gpu", "7", "nvidia.com/gpu 7, expected 8 on p5.48xlarge"),
    ("vpc.amazonaws.com/efa", "0", "vpc.amazonaws.com/efa 0, expected 32 on p5.48xlarge"),
    ("hugepages-2Mi", "0", "hugepages-2Mi 0Mi, expected at least 5120Mi on p5.48xlarge"),
])
def test_wrong_allocatable_fails_the_node_naming_the_resource(prod, resource, value, reason):
    def change(routes):
        routes[("GET", NODES)]["items"][2]["status"]["allocatable"][resource] = value
    assert run_broken(prod, change) == [Check("allocatable gpu-a", FAIL, reason)]


def test_a_larger_hugepage_reservation_is_not_a_fault(prod):
    def change(routes):
        routes[("GET", NODES)]["items"][2]["status"]["allocatable"]["hugepages-2Mi"] = "10Gi"
    assert run_broken(prod, change) == []


def test_a_node_of_another_instance_type_fails(prod):
    def change(routes):
        routes[("GET", NODES)]["items"][2]["metadata"]["labels"][INSTANCE_TYPE_LABEL] = "p4d.24xlarge"
    assert run_broken(prod, change) == [
        Check("allocatable gpu-a", FAIL, "node is p4d.24xlarge, its node group is configured as p5.48xlarge")]


@pytest.mark.parametrize("path, body, row, reason", [
    (f"{DAEMONSETS}/{NVIDIA_DEVICE_PLUGIN}", daemonset(1, 2), f"daemonset kube-system/{NVIDIA_DEVICE_PLUGIN}",
     "1/2 pods Ready"),
    (f"{DAEMONSETS}/{EFA_DEVICE_PLUGIN}", daemonset(0, 2), f"daemonset kube-system/{EFA_DEVICE_PLUGIN}",
     "0/2 pods Ready"),
    (OPERATOR, deployment(0), f"deployment kubeflow/{TRAINING_OPERATOR}", "0/1 replicas Ready"),
    (ETCD, deployment(0), f"deployment training/{ETCD_SERVICE}", "0/1 replicas Ready"),
])
def test_a_plugin_or_add_on_not_ready_fails_its_row(prod, path, body, row, reason):
    def change(routes):
        routes[("GET", path)] = body
    assert run_broken(prod, change) == [Check(row, FAIL, reason)]


def test_a_missing_add_on_is_not_found(prod):
    def change(routes):
        del routes[("GET", OPERATOR)]
    assert run_broken(prod, change) == [Check(f"deployment kubeflow/{TRAINING_OPERATOR}", FAIL, "not found")]


def test_a_pending_fsx_claim_fails(prod):
    def change(routes):
        routes[("GET", PVC)] = {"metadata": {"name": FSX_CLAIM_NAME}, "spec": {}, "status": {"phase": "Pending"}}
    assert run_broken(prod, change) == [Check(f"pvc training/{FSX_CLAIM_NAME}", FAIL,
                                              "Pending, not Bound (check the FSx CSI driver and the volume)")]


def test_a_node_health_condition_false_fails_that_node(prod):
    """EKS User Guide, "Detect node health issues and enable automatic node repair"
    (https://docs.aws.amazon.com/eks/latest/userguide/node-health.html): the node monitoring agent
    reports each category as a NodeCondition that is True while healthy."""
    def change(routes):
        accel = routes[("GET", NODES)]["items"][3]["status"]["conditions"][-1]
        accel.update(status="False", reason="NvidiaXID79Error", message="GPU has fallen off the bus")
    assert run_broken(prod, change) == [Check(
        "node-health gpu-b", FAIL, "AcceleratedHardwareReady False (NvidiaXID79Error: GPU has fallen off the bus)")]


def test_an_unreported_node_health_condition_fails(prod):
    def change(routes):
        routes[("GET", NODES)]["items"][4]["status"]["conditions"].pop()
    assert run_broken(prod, change) == [Check(
        "node-health cpu-a", FAIL, "StorageReady not reported (is the eks-node-monitoring-agent add-on running?)")]


def test_bus_bandwidth_under_the_floor_fails_with_the_verdict_validate_printed(prod):
    from ops import nccl

    slow = (NCCL_LOGS / "p5-fail-sockets.log").read_bytes()

    def change(routes):
        routes[("GET", f"{PODS}/{LAUNCHER}/log")] = slow
    [row] = run_broken(prod, change)
    verdict = nccl.sweep_verdict([nccl.PairResult(("gpu-a", "gpu-b"), nccl.judge(slow.decode(), P5.nccl_busbw_floor_gbps))])
    assert (row.name, row.status) == ("nccl p5", FAIL)
    assert row.reason == f"{verdict.line} (p5.48xlarge, sweep of 2026-11-23 09:00:00+00:00)"
    assert row.reason.startswith("pair gpu-a<->gpu-b failed") and "10.88 GB/s at 1 GiB, below the floor of 350" in row.reason


def test_a_failed_launcher_fails_its_pair_whatever_its_log(prod):
    def change(routes):
        routes[("GET", PODS)]["items"][0]["status"]["phase"] = "Failed"
        routes[("GET", f"{PODS}/{LAUNCHER}/log")] = b"[1,0]<stdout>:# Collective test starting: all_reduce_perf\n"
    [row] = run_broken(prod, change)
    assert (row.name, row.status) == ("nccl p5", FAIL)
    assert f"launcher {LAUNCHER} Failed; no all_reduce_perf result rows" in row.reason


def test_no_sweep_yet_or_a_sweep_under_way_is_a_warning_not_a_failure(prod):
    def none(routes):
        routes[("GET", PODS)] = {"kind": "PodList", "items": []}
    [row] = run_broken(prod, none)
    assert (row.name, row.status) == ("nccl p5", WARN) and "ops validate" in row.reason

    def running(routes):
        routes[("GET", PODS)]["items"][0]["status"]["phase"] = "Running"
    [row] = run_broken(prod, running)
    assert (row.name, row.status) == ("nccl p5", WARN) and row.reason.startswith("an NCCL sweep is running")


def test_launchers_of_no_sweep_are_ignored(prod):
    """A launcher without a pair annotation (the single test of earlier releases) is no pair."""
    routes = healthy_routes()
    routes[("GET", PODS)]["items"].insert(0, {"metadata": {"name": "nccl-allreduce-p5-launcher",
                                                           "creationTimestamp": "2026-11-01T09:00:00Z"},
                                              "status": {"phase": "Failed"}})
    client, server = api(routes)
    assert failures(doctor_run(prod, client)) == []
    assert [c.path for c in server.calls if c.path.endswith("/log")] == [f"{PODS}/{LAUNCHER}/log"]


@pytest.mark.parametrize("lease, words", [
    (None, "no replica holds Lease"),
    ({"holderIdentity": "training-operator-a_1", "leaseDurationSeconds": 15,
      "renewTime": (NOW - timedelta(seconds=90)).isoformat()}, "not renewed for 90 s (duration 15 s)"),
])
def test_an_operator_without_a_live_leader_fails(prod, lease, words):
    def change(routes):
        if lease is None:
            del routes[("GET", LEASE)]
        else:
            routes[("GET", LEASE)] = {"metadata": {"name": TRAINING_OPERATOR_LEASE}, "spec": lease}
    [row] = run_broken(prod, change)
    assert (row.name, row.status) == (f"leader kubeflow/{TRAINING_OPERATOR}", FAIL) and words in row.reason


def test_one_ready_operator_replica_of_two_fails(prod):
    def change(routes):
        routes[("GET", OPERATOR)] = deployment(1, 2)
    assert run_broken(prod, change) == [Check(f"deployment kubeflow/{TRAINING_OPERATOR}", FAIL, "1/2 replicas Ready")]


def test_a_run_of_older_code_is_named_with_the_run_start_would_create(prod):
    old = current_run(prod, "cpu-ddp")
    old["metadata"]["name"] = "cpu-ddp-0ld0ld00"
    old["metadata"]["labels"]["eks-distributed-training.io/spec-digest"] = "0ld0ld00"
    old["spec"]["runPolicy"]["suspend"] = True
    old["status"]["conditions"].append({"type": "Suspended", "status": "True"})
    smoke = current_run(prod, "cpu-ddp")
    smoke["metadata"]["name"] = "validation-cpu-ddp"
    smoke["metadata"]["labels"]["eks-distributed-training.io/validation"] = "true"
    done = current_run(prod, "vision-tiny")
    done["status"]["conditions"].append({"type": "Succeeded", "status": "True"})

    def change(routes):
        routes[("GET", JOBS)]["items"] += [old, smoke, done]
    [row] = run_broken(prod, change)
    assert (row.name, row.status) == ("run cpu-ddp-0ld0ld00", WARN)
    assert row.reason == ("Suspended; older code or other settings than `ops start cpu-ddp` would create now "
                          f"({current_run(prod, 'cpu-ddp')['metadata']['name']})")


def test_runs_without_the_registry_image_say_why_they_cannot_be_compared(prod):
    [row] = run_broken(prod, lambda routes: None, images=None, images_unknown="no stack prod-Registry in 222/us-east-1")
    assert row.status == WARN and row.name.startswith("run llama3-8b-fsdp-")
    assert row.reason == ("Running; cannot compare with what `ops start llama3-8b-fsdp` would create now: "
                          "no stack prod-Registry in 222/us-east-1")


def test_an_api_error_is_one_line_naming_the_call(prod):
    client, server = api({})
    server.on("GET", NODES, {"kind": "Status", "code": 500, "message": "etcdserver: request timed out"}, status=500)
    with pytest.raises(OpsError) as err:
        doctor_run(prod, client)
    assert str(err.value) == "list nodes at https://k8s.test: HTTP 500 etcdserver: request timed out"


def test_a_forbidden_call_says_which_access_entry_is_missing(prod):
    """As for every ops command (ops.kube's guard): a 403 names the call and the access-entry cause."""
    client, server = api({})
    server.on("GET", NODES, {"kind": "Status", "code": 403, "message": 'nodes is forbidden: User "x" cannot list'},
              status=403)
    with pytest.raises(OpsError) as err:
        doctor_run(prod, client)
    assert str(err.value).startswith("the Kubernetes API endpoint https://k8s.test denied GET /api/v1/nodes (HTTP 403)")
    assert "access entry" in str(err.value)


def test_an_unreachable_api_server_is_one_line_naming_it(tmp_path, capsys):
    """A kubeconfig pointing at a closed loopback port: the real client, a real refused connection."""
    import socket as sockets
    import yaml

    with sockets.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nothing listens there
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    assert cli.main(["doctor", "--env", "prod", "--kubeconfig", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"error: cannot reach the Kubernetes API endpoint https://127.0.0.1:{port} "
                          "(connection refused): ")


def test_cli_prints_the_table_and_exits_1_on_a_failure(monkeypatch, capsys):
    routes = healthy_routes()
    routes[("GET", PVC)] = {"metadata": {"name": FSX_CLAIM_NAME}, "spec": {}, "status": {"phase": "Pending"}}
    client, _ = api(routes)
    monkeypatch.setattr(kube, "api_client", lambda kubeconfig, context, **_: client)
    monkeypatch.setattr(images, "published_images", lambda env: (IMAGES, ""))
    monkeypatch.setattr(doctor, "run", functools.partial(doctor.run, now=NOW))
    assert cli.main(["doctor", "--env", "prod"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "doctor prod: cluster prod-training"
    assert out[1].split() == ["CHECK", "STATUS", "REASON"]
    assert any(line.split()[:3] == ["pvc", "training/fsx-pvc", "FAIL"] for line in out)
    assert out[-1] == "18 passed, 0 warned, 1 failed"


def test_cli_json_output_and_exit_0_when_healthy(monkeypatch, capsys):
    client, _ = api(healthy_routes())
    monkeypatch.setattr(kube, "api_client", lambda kubeconfig, context, **_: client)
    monkeypatch.setattr(images, "published_images", lambda env: (IMAGES, ""))
    monkeypatch.setattr(doctor, "run", functools.partial(doctor.run, now=NOW))
    assert cli.main(["doctor", "--env", "prod", "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["environment"], report["cluster"], report["failed"]) == ("prod", "prod-training", False)
    # The same row shape as preflight -o json: name, status, reason.
    assert {"name": "nccl p5", "status": "pass"} == {k: v for k, v in report["checks"][-2].items() if k != "reason"}
    assert all(set(row) == {"name", "status", "reason"} for row in report["checks"])


def test_cli_usage_errors_exit_2_in_one_line(capsys):
    assert cli.main(["doctor", "--env", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope" in err
    with pytest.raises(SystemExit) as exit_:
        cli.main(["doctor", "--env", "prod", "-o", "yaml"])
    assert exit_.value.code == 2


def test_an_unreadable_kubeconfig_is_one_line(tmp_path, capsys):
    assert cli.main(["doctor", "--env", "prod", "--kubeconfig", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no usable kubeconfig") and err.count("\n") == 1
