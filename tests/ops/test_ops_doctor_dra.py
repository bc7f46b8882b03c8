"""`ops doctor` on a cluster whose GPU group takes EFA through the DRA driver (efaAllocation: dra):
the same fake API server and helpers as test_ops_doctor.py, prod's p5 group switched to DRA."""

from __future__ import annotations

from k8s.pods.names import EFA_DEVICE_PLUGIN
from ops.checks import FAIL, Check
from ops.envconfig import load
from test_ops_doctor import DAEMONSETS, JOBS, NODES, api, current_run, daemonset, doctor_run, failures, healthy_routes


def dra_prod():
    """prod with its p5 group on the EFA DRA driver."""
    from dataclasses import replace

    env = load("prod")
    return replace(env, gpu_nodegroups=tuple(replace(g, efa_allocation="dra") for g in env.gpu_nodegroups))


def dra_routes() -> dict:
    routes = healthy_routes()
    del routes[("GET", f"{DAEMONSETS}/{EFA_DEVICE_PLUGIN}")]
    routes[("GET", f"{DAEMONSETS}/aws-dranet")] = daemonset(2, 2)
    for n in routes[("GET", NODES)]["items"]:
        n["status"]["allocatable"].pop("vpc.amazonaws.com/efa", None)
    # Its runs claim EFA instead of requesting it: another spec than prod's.
    routes[("GET", JOBS)]["items"] = [current_run(dra_prod(), "llama3-8b-fsdp")]
    return routes


def test_a_dra_group_reports_its_path_checks_the_dra_driver_and_expects_no_efa_extended_resource():
    client, server = api(dra_routes())
    rows = {r.name: r for r in doctor_run(dra_prod(), client)}
    assert failures(list(rows.values())) == []
    assert rows["efa p5"].reason == ("DRA driver (aws-dranet): pods claim them from ResourceClaimTemplate "
                                     "training/efa-p5")
    assert rows["daemonset kube-system/aws-dranet"].reason == "2/2 pods Ready"
    assert f"daemonset kube-system/{EFA_DEVICE_PLUGIN}" not in rows
    assert rows["allocatable gpu-a"].reason == "nvidia.com/gpu 8, vpc.amazonaws.com/efa 0, hugepages-2Mi 5120Mi"


def test_a_dra_node_that_advertises_efa_runs_both_agents_and_fails():
    routes = dra_routes()
    routes[("GET", NODES)]["items"][2]["status"]["allocatable"]["vpc.amazonaws.com/efa"] = "32"
    client, _ = api(routes)
    assert failures(doctor_run(dra_prod(), client)) == [Check(
        "allocatable gpu-a", FAIL, "vpc.amazonaws.com/efa 32, expected 0 on p5.48xlarge "
                                   "(the EFA device plugin runs on this DRA node too)")]
