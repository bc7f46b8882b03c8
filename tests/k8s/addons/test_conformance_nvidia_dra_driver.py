"""NVIDIA's GPU DRA driver (`"gpuAllocation": "dra"`) against chart dra-driver-nvidia-gpu 0.4.1.

The contracts folder does not hold this chart, so the upstream facts compared against are restated
here with the file they come from, read at kubernetes-sigs/dra-driver-nvidia-gpu tag v0.4.1 (commit
of `fetch github:kubernetes-sigs/dra-driver-nvidia-gpu`; the EKS guide installs chart 0.4.1:
device-management-nvidia-dra-device-plugin.html), rendered with EKS's install values
(`resources.computeDomains.enabled=false`, `gpuResourcesEnabledOverride=true`, release
dra-driver-nvidia-gpu) and every other value at its default. Every intended difference is a row of
DEVIATIONS; an undeclared difference fails, and so does a stale row.

Plus the claims of such a group's pods: one template `devices-<group>` with, per PCIe root, a GPU
request and an EFA request constrained to one root; no nvidia.com/gpu and no vpc.amazonaws.com/efa
requested; strict-valid at Kubernetes 1.34-1.36.
"""

from __future__ import annotations

import kubernetes_validate
import pytest

from conformance import ABSENT, PRESENT, Deviation, declared_problems, differences, pod_view
from config.kubernetes import EFA_RESOURCE, GPU_RESOURCE, HUGEPAGES_RESOURCE
from k8s_walk import build, objects
from tests.k8s.addons.test_aws_dranet import _find, _pods_on, environment

TAG = "v0.4.1"
HELM = "deployments/helm/dra-driver-nvidia-gpu"
IMAGE = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.1"
ALIGNED = {"p5": ("dra", "dra")}

# templates/kubeletplugin.yaml: the pod with resources.gpus.enabled and computeDomains disabled (so
# only the `gpus` container), values.yaml defaults: nvidiaDriverRoot "/", logVerbosity "4",
# kubeletPlugin.{kubeletRegistrarDirectoryPath, kubeletPluginsDirectoryPath, metrics.gpuHttpEndpoint
# ":8080", containers.gpus.healthcheckPort 51516, containers.gpus.securityContext {privileged: true},
# priorityClassName system-node-critical, tolerations, affinity, podSecurityContext {}}; featureGates {}
# (no FEATURE_GATES env); maskNvidiaDriverParams unset (""). The image: values.yaml image.repository
# and _helpers.tpl fullimage "v" + Chart.yaml appVersion 0.4.1.
_DIRS = [{"name": "KUBELET_REGISTRAR_DIRECTORY_PATH", "value": "/var/lib/kubelet/plugins_registry"},
         {"name": "KUBELET_PLUGINS_DIRECTORY_PATH", "value": "/var/lib/kubelet/plugins"}]
_PROBE = {"grpc": {"port": 51516, "service": "liveness"}, "timeoutSeconds": 10}
_NFD_TERMS = [{"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]} for key, value in (
    ("feature.node.kubernetes.io/pci-10de.present", "true"), ("feature.node.kubernetes.io/pci-0302_10de.present", "true"),
    ("feature.node.kubernetes.io/pci-0300_10de.present", "true"),
    ("feature.node.kubernetes.io/cpu-model.vendor_id", "NVIDIA"), ("nvidia.com/gpu.present", "true"))]
UPSTREAM_POD = {
    "priorityClassName": "system-node-critical",
    "serviceAccountName": "dra-driver-nvidia-gpu-service-account-kubeletplugin",
    "securityContext": {},
    "initContainers": [{
        "name": "init-container", "image": IMAGE, "securityContext": {"privileged": True},
        "command": ["bash", "/usr/bin/kubelet-plugin-prestart.sh"],
        "env": [{"name": "NVIDIA_DRIVER_ROOT", "value": "/"}, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
                *_DIRS],
        "volumeMounts": [{"name": "driver-root-parent", "mountPath": "/driver-root-parent", "readOnly": True}]}],
    "containers": [{
        "name": "gpus", "image": IMAGE, "imagePullPolicy": "IfNotPresent", "securityContext": {"privileged": True},
        "command": ["bash", "-c"],
        "args": ['if [ "${MASK_NVIDIA_DRIVER_PARAMS}" = "true" ]; then\n'
                 "  cp /proc/driver/nvidia/params /root/gpu-params\n"
                 "  sed -i 's/^ModifyDeviceFiles: 1$/ModifyDeviceFiles: 0/' /root/gpu-params\n"
                 "  mount --bind /root/gpu-params /proc/driver/nvidia/params\n"
                 "fi\n"
                 "gpu-kubelet-plugin -v $(LOG_VERBOSITY)"],
        "resources": {},
        "startupProbe": {**_PROBE, "failureThreshold": 600, "periodSeconds": 1},
        "livenessProbe": {**_PROBE, "failureThreshold": 3, "periodSeconds": 30},
        "env": [{"name": "HTTP_ENDPOINT", "value": ":8080"}, {"name": "METRICS_PATH", "value": "/metrics"},
                {"name": "LOG_VERBOSITY", "value": "4"}, {"name": "MASK_NVIDIA_DRIVER_PARAMS", "value": ""},
                {"name": "NVIDIA_DRIVER_ROOT", "value": "/"}, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
                {"name": "CDI_ROOT", "value": "/var/run/cdi"}, {"name": "NVIDIA_MIG_CONFIG_DEVICES", "value": "all"},
                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "SERVICE_ACCOUNT_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
                {"name": "IMAGE_NAME", "value": IMAGE}, *_DIRS, {"name": "HEALTHCHECK_PORT", "value": "51516"}],
        "volumeMounts": [
            {"name": "plugins-registry", "mountPath": "/var/lib/kubelet/plugins_registry"},
            {"name": "plugins", "mountPath": "/var/lib/kubelet/plugins", "mountPropagation": "Bidirectional"},
            {"name": "cdi", "mountPath": "/var/run/cdi"},
            {"name": "driver-root", "mountPath": "/driver-root", "mountPropagation": "HostToContainer"}]}],
    "volumes": [
        {"name": "plugins-registry", "hostPath": {"path": "/var/lib/kubelet/plugins_registry"}},
        {"name": "plugins", "hostPath": {"path": "/var/lib/kubelet/plugins"}},
        {"name": "cdi", "hostPath": {"path": "/var/run/cdi"}},
        {"name": "driver-root-parent", "hostPath": {"path": "/", "type": "DirectoryOrCreate"}},
        {"name": "driver-root", "hostPath": {"path": "/", "type": "DirectoryOrCreate"}}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": _NFD_TERMS}}},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
}
# values.yaml kubeletPlugin.updateStrategy.
UPSTREAM_UPDATE_STRATEGY = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}}
# templates/rbac-kubeletplugin.yaml: the ClusterRole's rules (the Role on computedomaincliques is a deviation).
UPSTREAM_CLUSTER_RULES = [
    {"apiGroups": ["resource.nvidia.com"], "resources": ["computedomains"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
     "verbs": ["get", "list", "watch", "create", "update", "delete"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "update"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
]
# templates/deviceclass-gpu.yaml at resource.k8s.io/v1 (which adds extendedResourceName).
UPSTREAM_DEVICE_CLASS = {"selectors": [{"cel": {"expression": (
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'")}}],
    "extendedResourceName": "nvidia.com/gpu"}
# What else the chart renders with these values, and why we leave it out (each named by its template).
LEFT_OUT = {
    "templates/deviceclass-mig.yaml": "mig.nvidia.com: our pods claim whole GPUs; no MIG is configured",
    "templates/deviceclass-vfio-gpu.yaml": "vfio.gpu.nvidia.com: passthrough needs feature gate PassthroughSupport, off",
    "templates/rbac-controller.yaml": "the controller's RBAC: templates/controller.yaml renders no controller "
                                      "with computeDomains disabled",
    "templates/validatingadmissionpolicy.yaml": "it restricts the controller's ServiceAccount (serviceAccountName "
                                                "without -kubeletplugin), which does not run here",
    "templates/validatingadmissionpolicybinding.yaml": "binds the policy above",
    "rbac-kubeletplugin.yaml Role/RoleBinding": "get computedomaincliques: ComputeDomains only",
    "crds/": "ComputeDomain and ComputeDomainClique CRDs: ComputeDomains only",
}

DEVIATIONS = (
    Deviation("pod.placement", PRESENT, PRESENT,
              "upstream selects every NVIDIA GPU node (NFD labels or nvidia.com/gpu.present, which EKS's AL2023 "
              "NVIDIA AMI sets on all of them); ours only nodes labelled gpu-allocation=dra, so it never shares a "
              "node with the NVIDIA device plugin (EKS: \"silent oversubscription\")"),
    Deviation("resources", {"limits": {"memory": "512Mi"}, "requests": {"cpu": "100m", "memory": "512Mi"}}, {},
              "our rule for node agents: requests stated, memory limited at the request; upstream sets none "
              "(the figure is not measured)"),
)


def view(pod: dict, container: str) -> dict:
    main = next(c for c in pod["containers"] + pod.get("initContainers", []) if c["name"] == container)
    spec_view = pod_view({**pod, "containers": [main]}, container)
    spec_view["resources"] = main.get("resources") or {}
    for mount in main.get("volumeMounts", []):
        spec_view[f"propagation {mount['mountPath']}"] = mount.get("mountPropagation", "None")
    spec_view["containers"] = sorted(c["name"] for c in pod["containers"])
    spec_view["initContainers"] = sorted(c["name"] for c in pod.get("initContainers", []))
    return spec_view


@pytest.fixture(scope="module")
def aligned():
    env = environment(ALIGNED)
    return env, objects(build(env))


def _daemon_set(objs):
    return _find(objs, "DaemonSet", "dra-driver-nvidia-gpu-kubelet-plugin")


def test_the_kubelet_plugin_matches_the_chart_0_4_1_except_the_declared_deviations(aligned):
    ours = _daemon_set(aligned[1])
    pod = ours["spec"]["template"]["spec"]
    problems = declared_problems(differences(view(pod, "gpus"), view(UPSTREAM_POD, "gpus")), DEVIATIONS)
    assert not problems, "\n".join(problems)
    init_deviation = [Deviation("resources", {"limits": {"memory": "64Mi"}, "requests": {"cpu": "10m", "memory": "64Mi"}},
                                {}, "the same rule for the init container, which only waits for the driver")]
    problems = declared_problems(differences(view(pod, "init-container"), view(UPSTREAM_POD, "init-container")),
                                 [d for d in DEVIATIONS if d.field == "pod.placement"] + init_deviation)
    assert not problems, "\n".join(problems)
    assert ours["spec"]["updateStrategy"] == UPSTREAM_UPDATE_STRATEGY
    assert ours["metadata"]["namespace"] == "kube-system"  # EKS's command says `nvidia`; node agents live here


def test_rbac_is_the_charts_less_the_compute_domain_rule_and_the_device_class_is_the_charts(aligned):
    objs = aligned[1]
    role = _find(objs, "ClusterRole", "dra-driver-nvidia-gpu-clusterrole-kubeletplugin")
    assert role["rules"] == [r for r in UPSTREAM_CLUSTER_RULES if r["apiGroups"] != ["resource.nvidia.com"]]
    binding = _find(objs, "ClusterRoleBinding", "dra-driver-nvidia-gpu-clusterrole-binding-kubeletplugin")
    account = _find(objs, "ServiceAccount", UPSTREAM_POD["serviceAccountName"])
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": account["metadata"]["namespace"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert _find(objs, "DeviceClass", "gpu.nvidia.com")["spec"] == UPSTREAM_DEVICE_CLASS
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in objs
                   if "dra-driver-nvidia-gpu" in o["metadata"]["name"] or o["metadata"]["name"] == "gpu.nvidia.com")
    assert kinds == [("ClusterRole", role["metadata"]["name"]), ("ClusterRoleBinding", binding["metadata"]["name"]),
                     ("DaemonSet", "dra-driver-nvidia-gpu-kubelet-plugin"), ("DeviceClass", "gpu.nvidia.com"),
                     ("ServiceAccount", account["metadata"]["name"])], "anything else the chart renders is in LEFT_OUT"


@pytest.mark.parametrize("version", ["1.34", "1.35", "1.36"])
def test_the_driver_objects_are_strict_valid(aligned, version):
    from k8s.addons.nvidia_dra_driver import nvidia_dra_objects

    for obj in nvidia_dra_objects(aligned[0]):
        kubernetes_validate.validate(obj, version, strict=True)


def test_only_environments_with_a_gpu_dra_group_get_the_driver():
    for layout in ({}, {"p5": "dra"}):
        assert _daemon_set(objects(build(environment(layout)))) is None


# --- the pods' claims -----------------------------------------------------------------------

@pytest.mark.parametrize("version", ["1.34", "1.35", "1.36"])
def test_p5_claim_template_pairs_each_gpu_with_its_four_efa_devices_on_one_pcie_root(aligned, version):
    [template] = [o for o in aligned[1] if o["kind"] == "ResourceClaimTemplate"]
    assert (template["metadata"]["name"], template["metadata"]["namespace"]) == ("devices-p5", "training")
    devices = template["spec"]["spec"]["devices"]
    gpus = [r for r in devices["requests"] if r["name"].startswith("gpu-")]
    efas = [r for r in devices["requests"] if r["name"].startswith("efa-")]
    assert [r["name"] for r in gpus] == [f"gpu-{i}" for i in range(8)]
    assert [r["name"] for r in efas] == [f"efa-{i}" for i in range(8)]
    assert {(r["exactly"]["deviceClassName"], r["exactly"]["allocationMode"], r["exactly"]["count"]) for r in gpus} \
        == {("gpu.nvidia.com", "ExactCount", 1)}
    assert {(r["exactly"]["deviceClassName"], r["exactly"]["allocationMode"], r["exactly"]["count"]) for r in efas} \
        == {("efa.networking.k8s.aws", "ExactCount", 4)}
    # One constraint per pair: one over all 40 devices could never be met (they sit on 8 roots).
    assert devices["constraints"] == [{"requests": [f"gpu-{i}", f"efa-{i}"],
                                       "matchAttribute": "resource.kubernetes.io/pcieRoot"} for i in range(8)]
    kubernetes_validate.validate(template, version, strict=True)


def test_pods_on_an_aligned_group_claim_every_device_and_request_neither_extended_resource(aligned):
    pods = _pods_on(aligned[0], "p5")
    assert {"PyTorchJob", "Job", "MPIJob"} <= {w.split("/")[0] for w, _ in pods}  # training, GPU check, NCCL
    for where, spec in pods:
        [container] = spec["containers"]
        resources = container["resources"]
        for side in ("requests", "limits"):
            assert GPU_RESOURCE not in resources[side] and EFA_RESOURCE not in resources[side], where
        assert resources["requests"][HUGEPAGES_RESOURCE] == resources["limits"][HUGEPAGES_RESOURCE] == "5120Mi", where
        assert resources["claims"] == [{"name": "devices"}], where
        assert spec["resourceClaims"] == [{"name": "devices", "resourceClaimTemplateName": "devices-p5"}], where
        assert container["securityContext"]["allowPrivilegeEscalation"] is False, where


def test_the_p4d_group_beside_an_aligned_p5_keeps_both_plugins(aligned):
    for where, spec in _pods_on(aligned[0], "p4d"):
        assert "resourceClaims" not in spec, where
        requests = spec["containers"][0]["resources"]["requests"]
        assert (requests[GPU_RESOURCE], requests[EFA_RESOURCE]) == ("8", "4"), where
