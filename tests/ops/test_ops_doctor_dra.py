"""`ops doctor` on a cluster whose GPU group takes EFA through the DRA driver (efaAllocation: dra):
the same fake API server and helpers as test_ops_doctor.py, prod's p5 group switched to DRA, and
the ResourceSlices the driver publishes (resource.k8s.io/v1)."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.conftest import contract
from k8s.pods.names import EFA_DEVICE_PLUGIN
from ops import doctor_dra
from ops.checks import FAIL, PASS, Check
from ops.envconfig import load
from test_ops_doctor import DAEMONSETS, JOBS, NODES, api, current_run, daemonset, doctor_run, failures, healthy_routes

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CHART = "aws-dranet-chart-v1.0.0"


def efa_device(i: int, kind: str = "Elastic Fabric Adapter (EFA)") -> dict:
    return {"name": f"pci-0000-{i:02x}-00-0", "attributes": {
        "dra.net/pciDevice": {"string": kind}, "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{i // 4:02x}"}}}


def resource_slice(node: str, devices: list[dict], *, generation: int = 1, index: int = 0, count: int = 1) -> dict:
    """A slice of the driver's pool for `node`, as dranet names its pools (one per node)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-dra.net-{generation}-{index}"},
            "spec": {"driver": "dra.net", "nodeName": node, "devices": devices,
                     "pool": {"name": node, "generation": generation, "resourceSliceCount": count}}}


def published(node: str, efa: int = 32) -> list[dict]:
    """`efa` EFA devices split over two slices of one pool, beside an ENA interface the filter would drop."""
    half = efa // 2
    return [resource_slice(node, [efa_device(i) for i in range(half)], index=0, count=2),
            resource_slice(node, [efa_device(i) for i in range(half, efa)]
                           + [efa_device(99, "Elastic Network Adapter (ENA)")], index=1, count=2)]


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
    routes[("GET", SLICES)] = {"kind": "ResourceSliceList", "items": published("gpu-a") + published("gpu-b")}
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
    assert rows["dra gpu-a"] == Check("dra gpu-a", PASS, "32 EFA devices published by dra.net (2 ResourceSlice(s))")
    assert rows["dra gpu-b"].status == PASS
    [slices_call] = [c for c in server.calls if c.path == SLICES]
    assert slices_call.query["fieldSelector"] == "spec.driver=dra.net"


def test_a_dra_node_that_advertises_efa_runs_both_agents_and_fails():
    routes = dra_routes()
    routes[("GET", NODES)]["items"][2]["status"]["allocatable"]["vpc.amazonaws.com/efa"] = "32"
    client, _ = api(routes)
    assert failures(doctor_run(dra_prod(), client)) == [Check(
        "allocatable gpu-a", FAIL, "vpc.amazonaws.com/efa 32, expected 0 on p5.48xlarge "
                                   "(the EFA device plugin runs on this DRA node too)")]


def run_dra(routes) -> list[Check]:
    client, _ = api(routes)
    return failures(doctor_run(dra_prod(), client))


def test_a_dra_node_without_resource_slices_fails_naming_it():
    routes = dra_routes()
    routes[("GET", SLICES)]["items"] = published("gpu-b")
    [row] = run_dra(routes)
    assert (row.name, row.status) == ("dra gpu-a", FAIL)
    assert "no ResourceSlice of driver dra.net for this node" in row.reason and "aws-dranet" in row.reason


def test_a_node_publishing_fewer_efa_devices_than_the_instance_has_fails():
    routes = dra_routes()
    routes[("GET", SLICES)]["items"] = published("gpu-a", efa=30) + published("gpu-b")
    assert run_dra(routes) == [Check("dra gpu-a", FAIL, "30 EFA device(s) in ResourceSlices of dra.net, "
                                                        "expected 32 on p5.48xlarge")]


def test_only_the_newest_generation_of_a_pool_counts():
    """A driver that republished its pool leaves the old slices behind for a while: counted too,
    they would double the node's devices."""
    routes = dra_routes()
    stale = [resource_slice("gpu-a", [efa_device(i) for i in range(32)], generation=1)]
    fresh = [{**s, "spec": {**s["spec"], "pool": {**s["spec"]["pool"], "generation": 2}}} for s in published("gpu-a")]
    routes[("GET", SLICES)]["items"] = stale + fresh + published("gpu-b")
    assert run_dra(routes) == []


def test_a_device_plugin_node_where_the_dra_driver_publishes_too_fails():
    """prod as configured (device plugin on p5), but the DRA driver runs on gpu-b as well."""
    routes = healthy_routes()
    routes[("GET", SLICES)] = {"kind": "ResourceSliceList", "items": published("gpu-b")}
    client, _ = api(routes)
    [row] = failures(doctor_run(load("prod"), client))
    assert (row.name, row.status) == ("dra gpu-b", FAIL)
    assert "publishes 32 EFA device(s) on this node of device-plugin group p5: both EFA agents run here" in row.reason


def test_a_cluster_without_the_resource_api_has_no_dra_rows_on_device_plugin_groups():
    client, server = api(healthy_routes())  # resource.k8s.io/v1 answers 404
    rows = doctor_run(load("prod"), client)
    assert not [r for r in rows if r.name.startswith("dra ")] and failures(rows) == []


def test_the_driver_and_the_efa_device_are_what_the_charts_device_class_selects():
    template = contract(CHART, "templates-deviceclass.yaml").read_text()
    [expression] = re.findall(r"expression: \|\n((?:\s+.+\n)+)", template)
    expression = " ".join(expression.split())
    assert f'device.driver == "{doctor_dra.DRANET_DRIVER}"' in expression
    assert (f'device.attributes["{doctor_dra.DRANET_DRIVER}"].{doctor_dra.EFA_PCI_DEVICE_ATTRIBUTE} == '
            f"'{doctor_dra.EFA_PCI_DEVICE}'") in expression
    # The driver's own filter keeps the same devices, under the qualified attribute name.
    values = yaml.safe_load(contract(CHART, "values.yaml").read_text())
    assert (f'attributes["{doctor_dra.DRANET_DRIVER}/{doctor_dra.EFA_PCI_DEVICE_ATTRIBUTE}"].StringValue == '
            f'"{doctor_dra.EFA_PCI_DEVICE}"') in values["filter"]


@pytest.mark.parametrize("attribute", ["dra.net/pciDevice", "pciDevice"])
def test_an_efa_device_is_recognised_by_its_attribute_in_either_spelling(attribute):
    device = {"name": "d", "attributes": {attribute: {"string": "Elastic Fabric Adapter (EFA)"}}}
    assert doctor_dra.efa_devices([resource_slice("n", [device])]) == 1
