"""The EFA DRA driver (`"efaAllocation": "dra"` on a GPU node group).

Conformance: our objects against what the aws/eks-charts aws-dranet chart 1.0.0 renders with its
default values (../shared/contracts/aws-dranet-chart-v1.0.0/, rendered by tests/k8s/helm_subset.py),
every intended difference in DEVIATIONS. Placement: for every EFA layout the config accepts, each
node group's labels and taints (from the same config) admit exactly one EFA agent on an EFA group
and none elsewhere; no node label set admits both. Pods: on a DRA group, the training pods, the GPU
check and the NCCL workers claim their EFA interfaces and request no vpc.amazonaws.com/efa.
"""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest
import yaml

from conformance import ABSENT, PRESENT, Deviation, contract, declared_problems, differences, one, pod_view
from helm_subset import Chart
from k8s_walk import objects, build, pod_specs, raw_environments

from config import load_environment
from config.kubernetes import (
    EFA_RESOURCE, NODEGROUP_LABEL, GPU_TAINT_EFFECT, GPU_TAINT_KEY, GPU_TAINT_VALUE, HUGEPAGES_RESOURCE, INSTANCE_TYPE_LABEL,
    TRAINING_ROLE, nodegroup_labels,
)

CHART = "aws-dranet-chart-v1.0.0"
REGION = "us-west-2"  # values.yaml's image is the us-west-2 registry's

DEVIATIONS = (
    Deviation("pod.placement", PRESENT, PRESENT,
              "the chart's rule (an EFA instance type, not Auto Mode) narrowed to our DRA node groups' "
              "instance types and their efa-allocation label: the EFA device plugin runs on the other EFA "
              "groups, and the two must never share a node (EKS, device-management-efa.html)"),
    Deviation("pod.tolerations",
              [("CriticalAddonsOnly", "Exists", "", ""), ("nvidia.com/gpu", "Exists", "", "NoSchedule")],
              [("CriticalAddonsOnly", "Exists", "", "")],
              "our DRA groups are GPU groups and carry the GPU taint; values.yaml `tolerations` is empty, so "
              "the chart's pods would never land on them"),
    Deviation("resources", {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "256Mi"}},
              {"requests": {"cpu": "100m", "memory": "50Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}},
              "our rule for every container: memory limit equal to its request (the chart's limit), no CPU "
              "limit (a throttled node agent answers the kubelet late)"),
)


def _load(name: str):
    return yaml.safe_load(contract(CHART, name).read_text())


def upstream(template: str) -> list[dict]:
    chart = Chart(_load("Chart.yaml"), _load("values.yaml"), release="aws-dranet", namespace="kube-system",
                  selector_labels="app: aws-dranet")
    return chart.render(contract(CHART, template).read_text())


def environment(layout: dict[str, str | tuple[str, str]], **extra):
    """dev with its GPU groups' efaAllocation (or (efaAllocation, gpuAllocation)) set per group name,
    and a non-EFA GPU group g5."""
    raw = copy.deepcopy(raw_environments()["dev"])
    for group in raw["gpuNodegroups"]:
        if group["name"] in layout:
            efa, gpu = (layout[group["name"]], None) if isinstance(layout[group["name"]], str) else layout[group["name"]]
            group["efaAllocation"] = efa
            if gpu:
                group["gpuAllocation"] = gpu
    raw["gpuNodegroups"].append({"name": "g5", "instanceType": "g5.xlarge", "minSize": 0, "maxSize": 1,
                                 "desiredSize": 0})
    raw.update(extra)
    return load_environment({"dev": raw}, "dev")


LAYOUTS = {
    "all-plugin": {},
    "mixed": {"p5": "dra"},
    "all-dra": {"p4d": "dra", "p5": "dra"},
    # p5's GPUs through NVIDIA's GPU DRA driver too (gpuAllocation dra), p4d on both plugins.
    "aligned": {"p5": ("dra", "dra")},
}


@pytest.fixture(scope="module")
def charts():
    return {name: objects(build(environment(layout))) for name, layout in LAYOUTS.items()}


def _find(objs: list[dict], kind: str, name: str) -> dict | None:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return found[0] if found else None


def view(daemon_set: dict) -> dict:
    spec = daemon_set["spec"]["template"]["spec"]
    return {**pod_view(spec), "resources": spec["containers"][0].get("resources", ABSENT),
            "pod.serviceAccountName": spec.get("serviceAccountName", "default")}


# --- conformance ----------------------------------------------------------------------------

def test_dranet_daemon_set_matches_the_chart_1_0_0_except_the_declared_deviations(charts):
    ours = _find(charts["mixed"], "DaemonSet", "aws-dranet")
    problems = declared_problems(differences(view(ours), view(one(upstream("templates-daemonset.yaml"), "DaemonSet"))),
                                 DEVIATIONS)
    assert not problems, "\n".join(problems)


def test_dranet_rbac_and_device_class_are_the_charts(charts):
    ours = charts["mixed"]
    role = one(upstream("templates-clusterrole.yaml"), "ClusterRole")
    binding = one(upstream("templates-clusterrolebinding.yaml"), "ClusterRoleBinding")
    account = one(upstream("templates-serviceaccount.yaml"), "ServiceAccount")
    device_class = one(upstream("templates-deviceclass.yaml"), "DeviceClass")
    assert _find(ours, "ClusterRole", "aws-dranet")["rules"] == role["rules"]
    assert _find(ours, "ClusterRoleBinding", "aws-dranet")["subjects"] == binding["subjects"]
    assert _find(ours, "ClusterRoleBinding", "aws-dranet")["roleRef"] == binding["roleRef"]
    assert _find(ours, "ServiceAccount", "aws-dranet")["metadata"]["namespace"] == account["metadata"]["namespace"]
    assert _find(ours, "DeviceClass", device_class["metadata"]["name"])["spec"] == device_class["spec"]


def test_the_dranet_tag_is_the_charts_app_version():
    from k8s.pods.images import DRANET_TAG

    assert DRANET_TAG == _load("values.yaml")["image"]["tag"] == _load("Chart.yaml")["appVersion"]


def test_the_chart_lists_our_efa_gpu_types_among_those_it_supports():
    """Our narrowing keeps the chart's rule true: every EFA GPU type we offer is in its list."""
    from config.instance_types import GPU_TYPES, INSTANCE_TYPES

    supported = set(_load("values.yaml")["supportedInstanceLabels"]["values"])
    ours = {t for t in GPU_TYPES if INSTANCE_TYPES[t].supports_efa}
    assert ours and ours <= supported, sorted(ours - supported)


# --- placement: never both agents on one node -------------------------------------------------

def _term_matches(term: dict, labels: dict) -> bool:
    for expr in term.get("matchExpressions", []):
        value = labels.get(expr["key"])
        op = expr["operator"]
        if op == "In" and value not in expr["values"]:
            return False
        if op == "NotIn" and value in expr["values"]:
            return False
        if op == "Exists" and value is None or op == "DoesNotExist" and value is not None:
            return False
    return True


def schedulable(pod_spec: dict, labels: dict, taints: list[dict]) -> bool:
    """Whether the scheduler may place the pod on a node with `labels` and `taints`."""
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if required and not any(_term_matches(t, labels) for t in required["nodeSelectorTerms"]):
        return False
    for taint in taints:
        if taint["effect"] not in ("NoSchedule", "NoExecute"):
            continue
        if not any(t.get("key") in (None, taint["key"]) and t.get("effect") in (None, taint["effect"]) and (
                t.get("operator") == "Exists" or t.get("value") == taint["value"])
                for t in pod_spec.get("tolerations") or []):
            return False
    return True


def node(group) -> tuple[dict, list[dict]]:
    instance = group.instance_type
    labels = nodegroup_labels(group.name, TRAINING_ROLE, gpu=instance.is_gpu, efa=instance.supports_efa,
                              efa_allocation=group.efa_allocation, gpu_allocation=group.gpu_allocation)
    taints = [{"key": GPU_TAINT_KEY, "value": GPU_TAINT_VALUE, "effect": GPU_TAINT_EFFECT}] if instance.is_gpu else []
    return {**labels, INSTANCE_TYPE_LABEL: instance.name}, taints


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_each_efa_group_runs_exactly_the_agent_of_its_efa_allocation_and_no_other_group_runs_one(charts, layout):
    env = environment(LAYOUTS[layout])
    agents = {name: _find(charts[layout], "DaemonSet", name)
              for name in ("aws-efa-k8s-device-plugin", "aws-dranet")}
    expected_agent = {"devicePlugin": "aws-efa-k8s-device-plugin", "dra": "aws-dranet", None: None}
    for group in env.training_nodegroups:
        labels, taints = node(group)
        running = {name for name, ds in agents.items()
                   if ds and schedulable(ds["spec"]["template"]["spec"], labels, taints)}
        want = expected_agent[group.efa_path]
        assert running == ({want} if want else set()), (group.name, running)
    # An agent is deployed exactly where some group needs it.
    assert {n for n, ds in agents.items() if ds} == {expected_agent[g.efa_path] for g in env.gpu_nodegroups} - {None}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_each_gpu_group_runs_exactly_the_gpu_agent_of_its_gpu_allocation_and_cpu_groups_none(charts, layout):
    """No node gets both the NVIDIA device plugin and NVIDIA's GPU DRA driver ("silent
    oversubscription", EKS device-management-nvidia-dra-device-plugin.html): every DaemonSet's
    affinity and tolerations evaluated against each group's labels and taints from config."""
    env = environment(LAYOUTS[layout])
    agents = {name: _find(charts[layout], "DaemonSet", name)
              for name in ("nvidia-device-plugin", "dra-driver-nvidia-gpu-kubelet-plugin")}
    expected_agent = {"devicePlugin": "nvidia-device-plugin", "dra": "dra-driver-nvidia-gpu-kubelet-plugin"}
    for group in env.training_nodegroups:
        labels, taints = node(group)
        running = {name for name, ds in agents.items()
                   if ds and schedulable(ds["spec"]["template"]["spec"], labels, taints)}
        assert running == ({expected_agent[group.gpu_allocation]} if group.instance_type.is_gpu else set()), \
            (group.name, running)
    assert {n for n, ds in agents.items() if ds} == {expected_agent[g.gpu_allocation] for g in env.gpu_nodegroups}


def test_no_node_label_set_admits_both_efa_agents():
    """Whatever labels a node has: the plugin requires efa-allocation NotIn [dra], the driver In [dra]."""
    from k8s.addons.efa_device_plugin import efa_device_plugin
    from k8s.pods.dranet import dranet_daemon_set

    plugin = efa_device_plugin("x", avoid_dra_nodes=True)["spec"]["template"]["spec"]
    driver = dranet_daemon_set("x", ("p5.48xlarge",))["spec"]["template"]["spec"]
    taints = [{"key": GPU_TAINT_KEY, "value": GPU_TAINT_VALUE, "effect": GPU_TAINT_EFFECT}]
    base = {INSTANCE_TYPE_LABEL: "p5.48xlarge", "eks-distributed-training.io/efa": "true"}
    for allocation in (None, "dra", "devicePlugin", ""):
        labels = {**base, **({"eks-distributed-training.io/efa-allocation": allocation} if allocation is not None else {})}
        both = schedulable(plugin, labels, taints) and schedulable(driver, labels, taints)
        assert not both, labels


def test_without_dra_groups_the_efa_plugin_renders_as_before():
    from k8s.addons.efa_device_plugin import efa_device_plugin

    assert efa_device_plugin("x") != efa_device_plugin("x", avoid_dra_nodes=True)
    term = efa_device_plugin("x")["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term == [{"matchExpressions": [{"key": "eks-distributed-training.io/efa", "operator": "In",
                                           "values": ["true"]}]}]


# --- pods on a DRA group ----------------------------------------------------------------------

def _pods_on(env, group: str) -> list[tuple[str, dict]]:
    """The pods of every run of env's presets and of its validation objects that land on `group`."""
    from k8s.pods.pytorchjob import presets_for, render_run
    from k8s.pods.validation import validation_objects

    made = [render_run(env, p.name, image="img:1") for p in presets_for(env)] + validation_objects(env)
    return [(where, spec) for obj in made for where, spec in pod_specs(obj)
            if spec.get("nodeSelector", {}).get(NODEGROUP_LABEL) == group
            or f"'values': ['{group}']" in str(spec.get("affinity"))]


def test_dra_group_pods_claim_efa_and_request_no_efa_extended_resource():
    env = environment(LAYOUTS["mixed"])
    pods = _pods_on(env, "p5")
    kinds = {w.split("/")[0] for w, _ in pods}
    assert {"PyTorchJob", "Job", "MPIJob"} <= kinds, kinds  # training, GPU check, NCCL workers
    for where, spec in pods:
        [container] = spec["containers"]
        resources = container["resources"]
        assert EFA_RESOURCE not in resources["requests"] and EFA_RESOURCE not in resources["limits"], where
        assert resources["requests"][HUGEPAGES_RESOURCE] == resources["limits"][HUGEPAGES_RESOURCE] == "5120Mi", where
        assert resources["requests"]["nvidia.com/gpu"] == "8", where
        assert resources["claims"] == [{"name": "efa"}], where
        assert spec["resourceClaims"] == [{"name": "efa", "resourceClaimTemplateName": "efa-p5"}], where


def test_pods_of_device_plugin_groups_are_unchanged_by_a_dra_group_beside_them():
    plain, mixed = _pods_on(environment({}), "p4d"), _pods_on(environment(LAYOUTS["mixed"]), "p4d")
    assert plain and plain == mixed
    for _, spec in plain:
        assert "resourceClaims" not in spec
        assert spec["containers"][0]["resources"]["requests"][EFA_RESOURCE] == "4"


@pytest.mark.parametrize("version", ["1.34", "1.35", "1.36"])
def test_claim_templates_and_device_class_are_strict_valid_and_count_every_efa_interface(charts, version):
    env = environment(LAYOUTS["all-dra"])
    templates = [o for o in charts["all-dra"] if o["kind"] == "ResourceClaimTemplate"]
    assert sorted(t["metadata"]["name"] for t in templates) == ["efa-p4d", "efa-p5"]
    assert [t["metadata"]["name"] for t in charts["aligned"] if t["kind"] == "ResourceClaimTemplate"] == ["devices-p5"]
    for template in templates:
        group = env.nodegroup(template["metadata"]["name"].removeprefix("efa-"))
        [request] = template["spec"]["spec"]["devices"]["requests"]
        assert request["exactly"] == {"deviceClassName": "efa.networking.k8s.aws", "allocationMode": "ExactCount",
                                      "count": group.instance_type.efa_interfaces}
        kubernetes_validate.validate(template, version, strict=True)
    kubernetes_validate.validate(_find(charts["all-dra"], "DeviceClass", "efa.networking.k8s.aws"), version, strict=True)


def test_the_training_operator_keeps_the_claim_fields_its_pytorchjob_and_mpijob_types_know_them():
    """The operator decodes jobs into its Go types and builds pods from those: a field its types lack
    is dropped silently. v1.9.4's CRDs are generated from them."""
    for crd in ("kubeflow.org_pytorchjobs.yaml", "kubeflow.org_mpijobs.yaml"):
        text = contract("kubeflow-training-v1.9.4", "crds", crd).read_text()
        schema = yaml.safe_load(text)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        specs = schema["properties"]["spec"]["properties"]
        replicas = specs.get("pytorchReplicaSpecs") or specs["mpiReplicaSpecs"]
        pod = replicas["additionalProperties"]["properties"]["template"]["properties"]["spec"]["properties"]
        claim = pod["resourceClaims"]["items"]["properties"]
        assert {"name", "resourceClaimTemplateName"} <= set(claim), crd
        resources = pod["containers"]["items"]["properties"]["resources"]["properties"]
        assert set(resources["claims"]["items"]["properties"]) >= {"name"}, crd
