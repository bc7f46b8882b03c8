"""`ops doctor` on a cluster whose p5 group takes its GPUs through NVIDIA's GPU DRA driver as well as
its EFA through aws-dranet (gpuAllocation: dra): the fake API server of test_ops_doctor.py, the
ResourceSlices both drivers publish (resource.k8s.io/v1), and the failures that matter: a GPU agent
missing or doubled on a node, GPUs missing from the slices."""

from __future__ import annotations

from dataclasses import replace

from k8s.pods.names import NVIDIA_DEVICE_PLUGIN
from ops import doctor_dra
from ops.checks import FAIL, PASS, Check
from ops.envconfig import load
from test_ops_doctor import DAEMONSETS, JOBS, NODES, api, current_run, daemonset, doctor_run, failures
from test_ops_doctor_dra import SLICES, dra_routes, published, resource_slice

KUBELET_PLUGIN = "dra-driver-nvidia-gpu-kubelet-plugin"


def gpu_device(i: int, kind: str = "gpu") -> dict:
    """A device as gpu-kubelet-plugin publishes it (attributes in its own domain, unqualified)."""
    return {"name": f"gpu-{i}", "attributes": {"type": {"string": kind}, "uuid": {"string": f"GPU-{i}"},
                                               "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{i:02x}"}}}


def gpu_slices(node: str, gpus: int = 8) -> list[dict]:
    made = resource_slice(node, [gpu_device(i) for i in range(gpus)])
    made["spec"]["driver"] = "gpu.nvidia.com"
    made["metadata"]["name"] = f"{node}-gpu.nvidia.com-1-0"
    return [made]


def aligned_prod():
    """prod with its p5 group on both DRA drivers."""
    env = load("prod")
    return replace(env, gpu_nodegroups=tuple(replace(g, efa_allocation="dra", gpu_allocation="dra")
                                             for g in env.gpu_nodegroups))


def aligned_routes() -> dict:
    routes = dra_routes()
    del routes[("GET", f"{DAEMONSETS}/{NVIDIA_DEVICE_PLUGIN}")]
    routes[("GET", f"{DAEMONSETS}/{KUBELET_PLUGIN}")] = daemonset(2, 2)
    for n in routes[("GET", NODES)]["items"]:
        n["status"]["allocatable"].pop("nvidia.com/gpu", None)
    routes[("GET", JOBS)]["items"] = [current_run(aligned_prod(), "llama3-8b-fsdp")]
    routes[("GET", SLICES)]["items"] += gpu_slices("gpu-a") + gpu_slices("gpu-b")
    return routes


def run(routes) -> tuple[dict[str, Check], list]:
    client, server = api(routes)
    return {r.name: r for r in doctor_run(aligned_prod(), client)}, server.calls


def test_an_aligned_group_reports_both_paths_and_checks_both_drivers_slices():
    rows, calls = run(aligned_routes())
    assert failures(list(rows.values())) == []
    assert rows["gpu p5"].reason == (f"DRA driver ({KUBELET_PLUGIN}): pods claim them with their EFA devices, "
                                     "paired by PCIe root, from ResourceClaimTemplate training/devices-p5")
    assert rows["efa p5"].reason == ("DRA driver (aws-dranet): pods claim them from ResourceClaimTemplate "
                                     "training/devices-p5")
    assert rows[f"daemonset kube-system/{KUBELET_PLUGIN}"].reason == "2/2 pods Ready"
    assert f"daemonset kube-system/{NVIDIA_DEVICE_PLUGIN}" not in rows
    assert rows["allocatable gpu-a"].reason == "nvidia.com/gpu 0, vpc.amazonaws.com/efa 0, hugepages-2Mi 5120Mi"
    assert rows["dra gpu gpu-a"] == Check("dra gpu gpu-a", PASS,
                                          "8 GPU devices published by gpu.nvidia.com (1 ResourceSlice(s))")
    assert rows["dra gpu-a"].status == PASS  # the EFA side as before
    selectors = sorted(c.query["fieldSelector"] for c in calls if c.path == SLICES)
    assert selectors == ["spec.driver=dra.net", "spec.driver=gpu.nvidia.com"]


def test_a_gpu_dra_node_that_advertises_nvidia_gpu_runs_both_gpu_agents_and_fails():
    routes = aligned_routes()
    routes[("GET", NODES)]["items"][2]["status"]["allocatable"]["nvidia.com/gpu"] = "8"
    client, _ = api(routes)
    assert failures(doctor_run(aligned_prod(), client)) == [Check(
        "allocatable gpu-a", FAIL, "nvidia.com/gpu 8, expected 0 on p5.48xlarge "
                                   "(the NVIDIA device plugin runs on this DRA node too)")]


def test_a_node_without_gpu_slices_or_with_too_few_gpus_fails_naming_it():
    routes = aligned_routes()
    routes[("GET", SLICES)]["items"] = published("gpu-a") + published("gpu-b") + gpu_slices("gpu-b", gpus=7)
    [missing, few] = sorted(failures(run(routes)[0].values()), key=lambda r: r.name)
    assert (missing.name, missing.status) == ("dra gpu gpu-a", FAIL)
    assert "no ResourceSlice of driver gpu.nvidia.com" in missing.reason and KUBELET_PLUGIN in missing.reason
    assert few == Check("dra gpu gpu-b", FAIL, "7 GPU device(s) in ResourceSlices of gpu.nvidia.com, expected 8 "
                                               "on p5.48xlarge")


def test_mig_slices_are_not_whole_gpus():
    slices = gpu_slices("n", gpus=7)
    slices[0]["spec"]["devices"].append(gpu_device(7, kind="mig"))
    assert doctor_dra.devices(slices, doctor_dra.GPU.is_device) == 7


def test_a_cluster_without_gpu_dra_groups_reads_no_gpu_slices_and_has_no_gpu_rows():
    client, server = api(dra_routes())
    rows = doctor_run(replace(aligned_prod(), gpu_nodegroups=tuple(
        replace(g, gpu_allocation="devicePlugin") for g in aligned_prod().gpu_nodegroups)), client)
    assert not [r for r in rows if r.name.startswith(("gpu ", "dra gpu "))]
    assert [c.query["fieldSelector"] for c in server.calls if c.path == SLICES] == ["spec.driver=dra.net"]


def test_a_device_plugin_gpu_node_where_the_gpu_dra_driver_publishes_too_fails():
    """A second p5 group left on the device plugin, its node gpu-c reached by NVIDIA's DRA driver too."""
    from test_ops_doctor import p5_node

    env = aligned_prod()
    plain = replace(env.gpu_nodegroups[0], name="p5plain", efa_allocation="devicePlugin", gpu_allocation="devicePlugin")
    env = replace(env, gpu_nodegroups=(*env.gpu_nodegroups, plain))
    routes = aligned_routes()
    gpu_c = p5_node("gpu-c")
    gpu_c["metadata"]["labels"]["eks-distributed-training.io/nodegroup"] = "p5plain"
    routes[("GET", NODES)]["items"].append(gpu_c)
    routes[("GET", f"{DAEMONSETS}/{NVIDIA_DEVICE_PLUGIN}")] = daemonset(1, 1)
    routes[("GET", f"{DAEMONSETS}/aws-efa-k8s-device-plugin")] = daemonset(1, 1)
    routes[("GET", SLICES)]["items"] += gpu_slices("gpu-c")
    client, _ = api(routes)
    rows = {r.name: r for r in doctor_run(env, client)}
    assert rows["gpu p5plain"].reason == "device plugin (nvidia-device-plugin): pods request nvidia.com/gpu"
    bad = rows["dra gpu gpu-c"]
    assert bad.status == FAIL and ("publishes 8 GPU device(s) on this node of device-plugin group p5plain: both GPU "
                                   "agents run here") in bad.reason
    assert [r.name for r in failures(list(rows.values())) if r.name != "nodes p5plain"] == ["dra gpu gpu-c"]
