"""Pod Security Admission on every namespace we create, and every pod we put there meets its level.

The levels are judged by tests/k8s/pod_security_standards.py, an evaluator of the controls on the
Kubernetes "Pod Security Standards" page (https://kubernetes.io/docs/concepts/security/pod-security-standards/)
as Pod Security Admission v1.35 implements them. It runs over every pod the charts and ops render,
with the operator's own additions to the pods it builds."""

from __future__ import annotations

import pytest

from config.kubernetes import TRAINING_NAMESPACE
from k8s.pods.names import KUBE_SYSTEM_NAMESPACE, KUBEFLOW_NAMESPACE
from k8s.addons.namespaces import PSA_PREFIX, POD_SECURITY, PodSecurity, pod_security_labels
from k8s_walk import ENV_NAMES
from pod_security_standards import violations
from rendered import cluster_objects, pods, templates

# Namespaces the cluster has without us: EKS owns kube-system, where the device plugins run as
# node agents (privileged by nature: they register with the kubelet through a host path).
NOT_OURS = (KUBE_SYSTEM_NAMESPACE,)


@pytest.fixture(scope="module")
def rendered(environments) -> dict[str, list[dict]]:
    return {name: cluster_objects(environments[name]) for name in ENV_NAMES}


def _namespaces(objs: list[dict]) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == "Namespace"}


@pytest.mark.parametrize("env_name", ENV_NAMES)
def test_every_namespace_we_create_enforces_warns_and_audits_a_level_pinned_to_the_cluster_minor(
        environments, rendered, env_name):
    minor = "v" + environments[env_name].kubernetes_version
    namespaces = _namespaces(rendered[env_name])
    assert set(namespaces) == set(POD_SECURITY) == {KUBEFLOW_NAMESPACE, TRAINING_NAMESPACE}
    for name, namespace in namespaces.items():
        labels = namespace["metadata"]["labels"]
        for mode in ("enforce", "warn", "audit"):
            assert labels[f"{PSA_PREFIX}/{mode}"] in ("baseline", "restricted"), (name, mode)
            assert labels[f"{PSA_PREFIX}/{mode}-version"] == minor, (name, mode)


@pytest.mark.parametrize("env_name", ENV_NAMES)
def test_every_namespaced_object_lands_in_a_namespace_we_create_or_in_kube_system(rendered, env_name):
    ours = set(_namespaces(rendered[env_name]))
    used = {o["metadata"]["namespace"] for o in rendered[env_name] if o["metadata"].get("namespace")}
    assert used <= ours | set(NOT_OURS), used - ours


def test_training_enforces_baseline_and_the_operator_namespace_restricted():
    assert POD_SECURITY[TRAINING_NAMESPACE] == PodSecurity(enforce="baseline", report="restricted")
    assert POD_SECURITY[KUBEFLOW_NAMESPACE] == PodSecurity(enforce="restricted", report="restricted")


@pytest.mark.parametrize("env_name", ENV_NAMES)
def test_every_pod_meets_the_level_its_namespace_enforces(rendered, env_name):
    levels = {name: ns["metadata"]["labels"][f"{PSA_PREFIX}/enforce"] for name, ns in _namespaces(rendered[env_name]).items()}
    checked = 0
    for obj in rendered[env_name]:
        for pod in pods(obj):
            if pod.namespace in NOT_OURS:
                continue
            problems = violations(pod.metadata, pod.spec, levels[pod.namespace])
            assert not problems, f"{pod.where} in {pod.namespace} ({levels[pod.namespace]}): {problems}"
            checked += 1
    assert checked >= 10, "too few pods to mean anything"


@pytest.mark.parametrize("env_name", ENV_NAMES)
def test_every_pod_template_we_render_meets_restricted(rendered, env_name):
    for obj in rendered[env_name]:
        for pod in templates(obj):
            if pod.namespace not in NOT_OURS:
                assert not violations(pod.metadata, pod.spec, "restricted"), pod.where


def test_only_the_operators_kubectl_delivery_init_container_keeps_the_launcher_from_restricted(rendered):
    launchers = [pod for obj in rendered["dev"] if obj["kind"] == "MPIJob" for pod in pods(obj)
                 if pod.where.endswith("/Launcher/0")]
    assert launchers, "dev has no NCCL MPIJob to check"
    for pod in launchers:
        problems = violations(pod.metadata, pod.spec, "restricted")
        assert problems and all(p.startswith("kubectl-delivery:") for p in problems), problems
        assert not violations(pod.metadata, pod.spec, "baseline")


def test_the_device_plugins_stay_in_kube_system_which_we_do_not_label(rendered):
    for obj in rendered["dev"]:
        if obj["kind"] == "DaemonSet":
            assert obj["metadata"]["namespace"] == KUBE_SYSTEM_NAMESPACE
    assert KUBE_SYSTEM_NAMESPACE not in _namespaces(rendered["dev"])


def test_labels_pin_the_minor_and_refuse_an_unknown_level():
    assert pod_security_labels(PodSecurity("baseline", "restricted"), "1.36")[f"{PSA_PREFIX}/audit-version"] == "v1.36"
    with pytest.raises(ValueError, match="must be one of"):
        pod_security_labels(PodSecurity("strict", "restricted"), "1.35")


HARDENED = {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "image": "i", "securityContext": {
                "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}


def _with(path: str, value) -> dict:
    import copy
    spec = copy.deepcopy(HARDENED)
    target = spec
    keys = path.split(".")
    for key in keys[:-1]:
        target = target[int(key)] if key.isdigit() else target.setdefault(key, {})
    target[keys[-1]] = value
    return spec


@pytest.mark.parametrize("path,value,level", [
    ("hostNetwork", True, "baseline"),
    ("hostPID", True, "baseline"),
    ("volumes", [{"name": "h", "hostPath": {"path": "/"}}], "baseline"),
    ("containers.0.securityContext.privileged", True, "baseline"),
    ("containers.0.securityContext.capabilities", {"add": ["NET_RAW"], "drop": ["ALL"]}, "baseline"),
    ("containers.0.securityContext.seccompProfile", {"type": "Unconfined"}, "baseline"),
    ("containers.0.ports", [{"containerPort": 80, "hostPort": 80}], "baseline"),
    ("containers.0.securityContext.procMount", "Unmasked", "baseline"),
    ("securityContext.sysctls", [{"name": "kernel.msgmax", "value": "1"}], "baseline"),
    ("securityContext.seLinuxOptions", {"user": "root"}, "baseline"),
    ("containers.0.securityContext.allowPrivilegeEscalation", True, "restricted"),
    ("containers.0.securityContext.capabilities", {"drop": ["NET_RAW"]}, "restricted"),
    ("securityContext.runAsNonRoot", False, "restricted"),
    ("securityContext.runAsUser", 0, "restricted"),
    ("securityContext.seccompProfile", None, "restricted"),
    ("volumes", [{"name": "n", "nfs": {"server": "s", "path": "/"}}], "restricted"),
])
def test_the_evaluator_rejects_each_control_it_checks(path, value, level):
    assert not violations({}, HARDENED, "restricted")
    bad = _with(path, value)
    assert violations({}, bad, level), (path, value)
    if level == "restricted":
        assert not violations({}, bad, "baseline"), "a restricted-only control must pass baseline"
