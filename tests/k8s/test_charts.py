"""k8s/charts.py: the add-ons are found by scanning k8s/addons/, ordered by what they declare, and
wrapped in charts that change nothing but the project's labels."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import cdk8s
import pytest

import k8s
from k8s.addons import AddOn, ClusterValues
from k8s.charts import EnvironmentCharts, addons, apply_order
from k8s.pods.names import project_labels


def nothing(config, values) -> list[dict]:
    return []


def test_every_module_of_k8s_addons_is_one_add_on_named_after_its_file():
    found = addons()
    modules = sorted(p.stem for p in (Path(k8s.__file__).parent / "addons").glob("*.py") if p.stem != "__init__")
    assert sorted(name.replace("-", "_") for name in found) == modules
    assert sorted(found) == ["aws-dranet", "capacity-block-stop", "data-preparation", "efa-device-plugin", "etcd",
                             "fsx-storage", "jobset", "jobset-crd", "kueue", "kueue-crds", "kueue-queues", "namespaces", "network-policies", "nvidia-device-plugin", "nvidia-dra-driver", "priority-classes", "runner-rbac",
                             "trainer-v2", "trainer-v2-crds", "training-operator", "training-operator-crds"]


def test_apply_order_is_layered_by_the_declared_dependencies(dev):
    assert [addon.name for addon, _ in apply_order(dev)] == [
        # layer 0: nothing to wait for
        "efa-device-plugin", "namespaces", "nvidia-device-plugin", "priority-classes", "training-operator-crds",
        # layer 1
        "etcd", "fsx-storage", "network-policies", "runner-rbac", "training-operator",
        # layer 2: the data Jobs' ServiceAccounts
        "data-preparation"]


def test_only_trainer_v2_environments_get_trainer_and_jobset_each_after_what_it_needs(dev):
    v2_only = {"jobset", "jobset-crd", "trainer-v2", "trainer-v2-crds"}
    assert not v2_only & {addon.name for addon, _ in apply_order(dev)}
    order = [addon.name for addon, _ in apply_order(replace(dev, training_api="v2"))]
    assert v2_only <= set(order)
    for needed in ("jobset-crd", "namespaces", "priority-classes"):
        assert order.index(needed) < order.index("jobset")
    for needed in ("trainer-v2-crds", "jobset", "namespaces", "priority-classes"):
        assert order.index(needed) < order.index("trainer-v2")


def test_adding_an_add_on_is_adding_one_that_declares_what_it_needs(dev):
    dashboard = AddOn(name="dashboard", depends_on=("training-operator",), objects=nothing)
    order = [addon.name for addon, _ in apply_order(dev, {**addons(), "dashboard": dashboard})]
    assert order.index("dashboard") > order.index("training-operator")


@pytest.mark.parametrize("depends_on,needle", [
    (("no-such-chart",), "no module of k8s/addons/ provides"),
    (("cycle-b",), "cycle"),
])
def test_a_missing_or_circular_dependency_is_an_error(dev, depends_on, needle):
    a = AddOn(name="cycle-a", depends_on=depends_on, objects=nothing)
    b = AddOn(name="cycle-b", depends_on=("cycle-a",), objects=nothing)
    with pytest.raises(ValueError, match=needle):
        apply_order(dev, {**addons(), "cycle-a": a, "cycle-b": b})


def test_an_add_on_needing_one_the_environment_lacks_is_an_error(dev):
    needs_gpu = AddOn(name="needs-gpu", depends_on=("nvidia-device-plugin",), objects=nothing)
    with pytest.raises(ValueError, match="does not get"):
        apply_order(replace(dev, gpu_nodegroups=()), {**addons(), "needs-gpu": needs_gpu})


def test_environment_charts_order_users_after_what_they_use(dev):
    charts = EnvironmentCharts(dev, ClusterValues.placeholders(), app=cdk8s.Testing.app())
    order = [e.name for e in charts.entries]
    assert order.index("namespaces") < order.index("training-operator")
    assert order.index("training-operator-crds") < order.index("training-operator")
    assert order.index("priority-classes") < order.index("training-operator")
    assert set(charts.entry("etcd").depends_on) >= {"namespaces", "priority-classes"}
    assert charts.entry("training-operator").ready_when is addons()["training-operator"].ready_when


def test_a_chart_holds_its_add_ons_objects_unchanged_but_for_the_project_labels(environments):
    """CDK, dist/ and ops render the same objects: the chart only wraps the add-on's dicts."""
    for config in environments.values():
        values = ClusterValues.placeholders()
        charts = EnvironmentCharts(config, values, app=cdk8s.Testing.app())
        for entry in charts.entries:
            expected = []
            for obj in entry.chart.addon.objects(config, values):
                metadata = obj["metadata"]
                labels = {**project_labels(entry.chart.addon.component), **metadata.get("labels", {})}
                expected.append({**obj, "metadata": {**metadata, "labels": labels}})
            assert entry.chart.to_json() == expected, entry.name


def test_an_environment_without_gpus_gets_no_device_plugins(dev):
    cpu_only = replace(dev, gpu_nodegroups=())
    names = [e.name for e in EnvironmentCharts(cpu_only, ClusterValues.placeholders(), app=cdk8s.Testing.app()).entries]
    assert not {"nvidia-device-plugin", "efa-device-plugin"} & set(names)


def test_no_chart_holds_a_job_so_a_deploy_never_touches_a_run(environments):
    """A deploy re-applies what the charts hold; runs (PyTorchJob), validation (Job, MPIJob) and
    data Jobs are created by ops, so a deploy can neither suspend, re-template nor delete them."""
    for name, config in environments.items():
        charts = EnvironmentCharts(config, ClusterValues.placeholders(), app=cdk8s.Testing.app())
        kinds = {o["kind"] for docs in charts.manifests().values() for o in docs}
        assert kinds and not kinds & {"PyTorchJob", "MPIJob", "Job", "CronJob", "Pod"}, name


def test_repeated_literals_are_named_once_in_k8s_pods():
    """Namespaces, numeric uids and the interface exclude list are named once (k8s/pods/names.py,
    security.py, network_env.py)."""
    homes = {"names.py", "security.py", "network_env.py"}
    literals = [r'"kube-system"', r"\b6553[24]\b", r"pod-id-link0", r"docker0"]
    for path in Path(k8s.__file__).parent.rglob("*.py"):
        if path.parent.name == "pods" and path.name in homes:
            continue
        text = path.read_text()
        for literal in literals:
            assert not re.search(literal, text), f"{path.name} repeats {literal}; use the constant in k8s/pods"


def test_every_chart_that_holds_a_crd_is_kept_by_a_retain_environment(dev):
    """Deleting a CRD deletes every object of it (runs, Kueue Workloads), so each add-on that renders
    one, under any option, is on stacks.workloads.KEPT_WHEN_RETAINED."""
    from stacks.workloads import KEPT_WHEN_RETAINED

    every_option = replace(dev, training_api="v2", queueing="kueue")
    values = ClusterValues.placeholders()
    holding = {addon.name for config in (dev, every_option) for addon, _ in apply_order(config)
               if any(o.get("kind") == "CustomResourceDefinition" for o in addon.objects(config, values))}
    assert {"training-operator-crds", "trainer-v2-crds", "jobset-crd", "kueue-crds"} <= holding
    assert holding <= set(KEPT_WHEN_RETAINED), holding - set(KEPT_WHEN_RETAINED)
