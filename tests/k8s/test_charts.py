"""Chart unit tests: each chart alone, synthesized with cdk8s Testing.synth."""

from __future__ import annotations

import pytest
import cdk8s

from config.kubernetes import (
    EFA_LABEL, FSX_CLAIM_NAME, GPU_TAINT_KEY, TRAINING_NAMESPACE,
)
from k8s.jobs import presets_for
from k8s.charts import EnvironmentCharts
from k8s.common import ETCD_CLIENT_LABEL, ETCD_CLIENT_PORT, KUBEFLOW_NAMESPACE, efa_device_plugin_image
from k8s.crds import TrainingOperatorCrdsChart
from k8s.efa_device_plugin import EfaDevicePluginChart, EfaDevicePluginProps
from k8s.etcd import EtcdChart
from k8s.fsx_storage import FsxStorageChart, FsxStorageProps
from k8s.namespaces import NamespacesChart, NamespacesProps
from k8s.nvidia_device_plugin import NvidiaDevicePluginChart, NvidiaDevicePluginProps
from k8s.training_operator import WEBHOOK_CONFIGURATION, WEBHOOK_SECRET, TrainingOperatorChart
from k8s.validation import ClusterValidationChart, ValidationProps
from k8s.values import ClusterValues
from k8s_walk import target_nodegroups

IMAGES = {"cpu": "registry.example/trainer:cpu-1", "gpu": "registry.example/trainer:gpu-1"}


def synth(chart_cls, **kwargs) -> list[dict]:
    return cdk8s.Testing.synth(chart_cls(cdk8s.Testing.app(), "test", **kwargs))


def one(docs: list[dict], kind: str) -> dict:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{kind}: {len(found)}"
    return found[0]


def pod(doc: dict) -> dict:
    return doc["spec"]["template"]["spec"]


def test_namespaces_for_the_operator_and_the_jobs():
    docs = synth(NamespacesChart, props=NamespacesProps(kubernetes_version="1.35"))
    assert [d["metadata"]["name"] for d in docs] == [KUBEFLOW_NAMESPACE, TRAINING_NAMESPACE]


def test_nvidia_plugin_runs_only_on_gpu_node_groups_tolerating_the_taint():
    ds = one(synth(NvidiaDevicePluginChart, props=NvidiaDevicePluginProps(("p4d", "p5"))), "DaemonSet")
    spec = pod(ds)
    assert target_nodegroups(spec) == ["p4d", "p5"]
    assert [t["key"] for t in spec["tolerations"]] == [GPU_TAINT_KEY]
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["containers"][0]["image"].startswith("nvcr.io/nvidia/k8s-device-plugin:v0.")
    assert spec["automountServiceAccountToken"] is False
    assert spec["volumes"][0]["hostPath"]["path"] == "/var/lib/kubelet/device-plugins"


def test_nvidia_plugin_needs_a_gpu_node_group():
    with pytest.raises(ValueError, match="GPU node group"):
        synth(NvidiaDevicePluginChart, props=NvidiaDevicePluginProps(()))


def test_efa_plugin_on_efa_nodes_with_host_paths_and_regional_image():
    ds = one(synth(EfaDevicePluginChart, props=EfaDevicePluginProps(efa_device_plugin_image("eu-south-1"))),
             "DaemonSet")
    spec = pod(ds)
    term = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert term["matchExpressions"] == [{"key": EFA_LABEL, "operator": "In", "values": ["true"]}]
    assert spec["hostNetwork"] is True
    assert {v["hostPath"]["path"] for v in spec["volumes"]} == {"/var/lib/kubelet/device-plugins", "/dev/infiniband/",
                                                               "/opt/aws/neuron/"}
    image = spec["containers"][0]["image"]
    assert image.startswith("590381155156.dkr.ecr.eu-south-1.amazonaws.com/eks/aws-efa-k8s-device-plugin:v")
    assert spec["priorityClassName"] == "system-node-critical"


def test_efa_registry_is_looked_up_by_region_and_unknown_regions_fail_loudly():
    assert efa_device_plugin_image("us-west-2").startswith("602401143452.dkr.ecr.us-west-2.")
    with pytest.raises(KeyError, match="xx-east-9"):
        efa_device_plugin_image("xx-east-9")


def test_crd_chart_holds_exactly_the_two_job_kinds():
    docs = synth(TrainingOperatorCrdsChart)
    assert [d["metadata"]["name"] for d in docs] == ["pytorchjobs.kubeflow.org", "mpijobs.kubeflow.org"]
    assert all(d["spec"]["versions"][0]["storage"] for d in docs)


@pytest.fixture(scope="module")
def operator():
    return synth(TrainingOperatorChart)


def test_operator_enables_only_the_schemes_we_use(operator):
    container = pod(one(operator, "Deployment"))["containers"][0]
    schemes = sorted(a.split("=", 1)[1] for a in container["args"] if a.startswith("--enable-scheme="))
    assert schemes == ["mpijob", "pytorchjob"]
    assert container["image"] == "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489"


def test_operator_webhook_pieces_agree(operator):
    container = pod(one(operator, "Deployment"))["containers"][0]
    args = dict(a.split("=", 1) for a in container["args"] if "=" in a)
    service, secret = one(operator, "Service"), one(operator, "Secret")
    assert args["--webhook-service-name"] == service["metadata"]["name"]
    assert args["--webhook-secret-name"] == secret["metadata"]["name"] == WEBHOOK_SECRET
    webhook = one(operator, "ValidatingWebhookConfiguration")
    assert webhook["metadata"]["name"] == WEBHOOK_CONFIGURATION
    # v1 serves no MPIJob validator: registering one would reject every MPIJob (failurePolicy Fail).
    assert sorted(r for w in webhook["webhooks"] for r in w["rules"][0]["resources"]) == ["pytorchjobs"]
    for hook in webhook["webhooks"]:
        assert hook["failurePolicy"] == "Fail"
        client = hook["clientConfig"]["service"]
        assert (client["name"], client["namespace"]) == (service["metadata"]["name"], KUBEFLOW_NAMESPACE)
        port = next(p for p in service["spec"]["ports"] if p["port"] == client["port"])
        assert port["targetPort"] == int(args["--webhook-server-port"])
        assert client["path"] == f"/validate-kubeflow-org-v1-{hook['rules'][0]['resources'][0][:-1]}"
    assert not secret.get("data") and not secret.get("stringData")
    assert "namespace" not in webhook["metadata"], "cluster-scoped"


def test_operator_is_probed_bounded_and_reads_its_certificates_from_the_webhook_secret(operator):
    spec = pod(one(operator, "Deployment"))
    container = spec["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"]["memory"] == container["resources"]["limits"]["memory"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["runAsNonRoot"] is True
    [mount] = container["volumeMounts"]
    assert (mount["mountPath"], mount["readOnly"]) == ("/tmp/k8s-webhook-server/serving-certs", True)
    [volume] = spec["volumes"]
    assert volume["secret"]["secretName"] == one(operator, "Secret")["metadata"]["name"] == WEBHOOK_SECRET
    assert "emptyDir" not in volume, "the rotator writes the Secret; only the kubelet fills the directory"
    assert spec["automountServiceAccountToken"] is True, "the operator is an API client"
    assert spec["serviceAccountName"] == one(operator, "ServiceAccount")["metadata"]["name"]


def test_operator_rbac_covers_what_the_controllers_do(operator):
    role = one(operator, "ClusterRole")
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    for need in [("kubeflow.org", "pytorchjobs", "watch"), ("kubeflow.org", "pytorchjobs/status", "update"),
                 ("kubeflow.org", "mpijobs", "watch"), ("", "pods", "create"), ("", "services", "create"),
                 ("", "pods/exec", "create"), ("rbac.authorization.k8s.io", "roles", "create"),
                 ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "update"),
                 ("scheduling.volcano.sh", "podgroups", "watch"), ("scheduling.x-k8s.io", "podgroups", "watch")]:
        assert need in granted, need
    assert not any("*" in rule["verbs"] or "*" in rule["resources"] for rule in role["rules"])
    binding = one(operator, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"][0]["namespace"] == KUBEFLOW_NAMESPACE


def test_the_operator_reads_secrets_and_takes_its_lease_only_in_its_own_namespace(operator):
    assert not any(r in rule["resources"] for rule in one(operator, "ClusterRole")["rules"] for r in ("secrets", "leases"))
    role, binding = one(operator, "Role"), one(operator, "RoleBinding")
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == KUBEFLOW_NAMESPACE
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert {("", "secrets", "update"), ("", "secrets", "watch"), ("coordination.k8s.io", "leases", "update")} <= granted
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]}
    assert binding["subjects"][0]["name"] == one(operator, "ServiceAccount")["metadata"]["name"]
    # The one Secret there is the one the rotator writes, and the Deployment mounts.
    assert one(operator, "Secret")["metadata"]["namespace"] == KUBEFLOW_NAMESPACE


def test_operator_runs_two_replicas_on_different_nodes_and_a_drain_keeps_one(operator):
    from k8s.common import TRAINING_OPERATOR_LEASE
    from k8s.training_operator import REPLICAS

    deployment = one(operator, "Deployment")
    assert deployment["spec"]["replicas"] == REPLICAS == 2
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    spec = pod(deployment)
    [anti] = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert anti["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in spec["affinity"]["podAntiAffinity"], \
        "a rolling update's third pod must fit on a two-node system group"
    budget = one(operator, "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == REPLICAS - 1
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert "--leader-elect" in spec["containers"][0]["args"]
    assert not any(a.startswith("--leader-election-id") for a in spec["containers"][0]["args"])
    assert TRAINING_OPERATOR_LEASE.endswith(".training-operator.kubeflow.org")


def test_operator_readiness_waits_for_a_finished_rollout():
    """availableReplicas stays set by the old pods during a rollout; the Progressing condition's
    reason is NewReplicaSetAvailable only once every new replica is available."""
    from k8s.training_operator import TrainingOperatorChart

    ready = TrainingOperatorChart.ready_when
    assert ready.json_path == '.status.conditions[?(@.reason=="NewReplicaSetAvailable")].status'
    assert ready.dist_wait == "kubectl rollout status -n kubeflow deployment/training-operator --timeout=10m"
    assert ready.timeout_minutes * 60 < 15 * 60, "inside the kubectl provider's 15-minute Lambda"


def test_cluster_services_get_our_priority_class_not_a_reserved_one(operator, etcd):
    from k8s.common import CONTROL_PRIORITY_CLASS
    from k8s.priority import PriorityClassesChart

    [klass] = synth(PriorityClassesChart)
    assert klass["kind"] == "PriorityClass" and klass["metadata"]["name"] == CONTROL_PRIORITY_CLASS
    assert not CONTROL_PRIORITY_CLASS.startswith("system-")
    assert 0 < klass["value"] <= 1_000_000_000, "values above one billion are reserved"
    assert klass["globalDefault"] is False, "training pods keep priority 0"
    for docs in (operator, etcd):
        assert pod(one(docs, "Deployment"))["priorityClassName"] == CONTROL_PRIORITY_CLASS


def test_etcd_runs_only_on_the_system_nodes(etcd):
    from config.kubernetes import ROLE_LABEL, SYSTEM_ROLE

    affinity = pod(one(etcd, "Deployment"))["affinity"]["nodeAffinity"]
    [term] = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": ROLE_LABEL, "operator": "In", "values": [SYSTEM_ROLE]}]
    assert "preferredDuringSchedulingIgnoredDuringExecution" not in affinity


@pytest.fixture(scope="module")
def etcd():
    return synth(EtcdChart)


def test_etcd_speaks_v2_runs_non_root_and_writes_only_its_data_volume(etcd):
    spec = pod(one(etcd, "Deployment"))
    container = spec["containers"][0]
    assert "--enable-v2=true" in container["command"]
    assert container["image"].startswith("quay.io/coreos/etcd:v3.5.")
    ctx = container["securityContext"]
    assert ctx["runAsNonRoot"] is True and isinstance(ctx["runAsUser"], int) and ctx["runAsUser"] > 0
    assert ctx["readOnlyRootFilesystem"] is True
    data_dir = next(a for a in container["command"] if a.startswith("--data-dir=")).split("=", 1)[1]
    mount = container["volumeMounts"][0]
    assert data_dir.startswith(mount["mountPath"] + "/")
    assert next(v for v in spec["volumes"] if v["name"] == mount["name"])["emptyDir"] == {}
    assert "exec" in container["livenessProbe"] and "exec" in container["readinessProbe"]
    assert container["resources"]["requests"]["cpu"]


def test_etcd_is_reachable_only_from_rendezvous_clients(etcd):
    deployment, service, policy = one(etcd, "Deployment"), one(etcd, "Service"), one(etcd, "NetworkPolicy")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    [rule] = policy["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {ETCD_CLIENT_LABEL: "true"}}}]
    assert rule["ports"] == [{"port": ETCD_CLIENT_PORT, "protocol": "TCP"}]


def test_fsx_static_volume_and_the_one_claim():
    docs = synth(FsxStorageChart, props=FsxStorageProps("fs-0123", "fs-0123.fsx.us-west-2.amazonaws.com", "abcd", 1200))
    pv, pvc = one(docs, "PersistentVolume"), one(docs, "PersistentVolumeClaim")
    csi = pv["spec"]["csi"]
    assert (csi["driver"], csi["volumeHandle"]) == ("fsx.csi.aws.com", "fs-0123")
    assert csi["volumeAttributes"] == {"dnsname": "fs-0123.fsx.us-west-2.amazonaws.com", "mountname": "abcd"}
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pvc["metadata"] == {**pvc["metadata"], "name": FSX_CLAIM_NAME, "namespace": TRAINING_NAMESPACE}
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["storageClassName"] == "" == pv["spec"]["storageClassName"]
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == pv["spec"]["capacity"]["storage"] == "1200Gi"


@pytest.mark.parametrize("capacity", [1200, 2400, 4800, 96000])
def test_fsx_claim_requests_a_constant_that_every_allowed_file_system_satisfies(capacity):
    """A bound claim's request cannot change (no StorageClass allows expansion), so growing FSx
    may change only the volume's capacity, which must stay at least the request."""
    from k8s.fsx_storage import CLAIM_REQUEST_GIB

    docs = synth(FsxStorageChart, props=FsxStorageProps("fs-0123", "dns", "mnt", capacity))
    pv, pvc = one(docs, "PersistentVolume"), one(docs, "PersistentVolumeClaim")
    assert pvc["spec"]["resources"]["requests"]["storage"] == f"{CLAIM_REQUEST_GIB}Gi"
    assert pv["spec"]["capacity"]["storage"] == f"{capacity}Gi"


def test_fsx_claim_request_is_the_smallest_capacity_config_accepts(dev):
    from config import ConfigError
    from config.environment_parser import parse_fsx
    from k8s.fsx_storage import CLAIM_REQUEST_GIB

    assert parse_fsx({"storageCapacityGiB": CLAIM_REQUEST_GIB, "throughputPerTiB": 125}, "fsx")
    for smaller in (600, CLAIM_REQUEST_GIB - 1):
        with pytest.raises(ConfigError):
            parse_fsx({"storageCapacityGiB": smaller, "throughputPerTiB": 125}, "fsx")
    with pytest.raises(ValueError, match="at least the claim"):
        synth(FsxStorageChart, props=FsxStorageProps("fs-0123", "dns", "mnt", 600))
    assert dev.fsx.storage_capacity_gib >= CLAIM_REQUEST_GIB


def test_no_chart_holds_a_job_so_a_deploy_never_touches_a_run(environments):
    """A deploy re-applies what the charts hold; runs (PyTorchJob), validation (Job, MPIJob) and
    data Jobs are created by ops, so a deploy can neither suspend, re-template nor delete them."""
    for name, config in environments.items():
        charts = EnvironmentCharts(config, ClusterValues.placeholders(), app=cdk8s.Testing.app())
        kinds = {o["kind"] for docs in charts.manifests().values() for o in docs}
        assert kinds and not kinds & {"PyTorchJob", "MPIJob", "Job", "CronJob", "Pod"}, name


def test_the_smoke_run_is_a_validation_object_only_where_its_node_group_exists(dev, prod):
    from dataclasses import replace

    from k8s.validation import SMOKE_CHECKPOINT_ROOT, SMOKE_RUN, validation_objects

    for config in (dev, prod):
        [smoke] = [o for o in validation_objects(config) if o["kind"] == "PyTorchJob"]
        assert smoke["metadata"]["name"] == SMOKE_RUN
        container = smoke["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        assert container["image"] == "${TRAINER_IMAGE_CPU}", "ops validate fills it"
        assert f"{SMOKE_CHECKPOINT_ROOT}/cpu-ddp/snapshot.pt" in container["command"], "not a user run's folder"
        assert "suspend" not in smoke["spec"]["runPolicy"]
    assert not [o for o in validation_objects(replace(dev, cpu_nodegroups=())) if o["kind"] == "PyTorchJob"]


def test_gpu_checks_request_every_device_of_their_node_group(dev):
    docs = synth(ClusterValidationChart, props=ValidationProps(config=dev))
    assert all("suspend" not in d["spec"] for d in docs if d["kind"] == "Job"), "ops validate creates them to run"
    checks = [d for d in docs if d["kind"] == "Job"]
    assert len(checks) == len(dev.gpu_nodegroups)
    for job in checks:
        spec = pod(job)
        [group] = target_nodegroups(spec)
        instance = dev.nodegroup(group).instance_type
        container = spec["containers"][0]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == str(instance.gpus)
        assert container["resources"]["limits"]["vpc.amazonaws.com/efa"] == str(instance.efa_interfaces)
        script = container["command"][-1]
        assert "nvidia-smi" in script and f'-eq {instance.efa_interfaces} ]' in script
        assert spec["restartPolicy"] == "Never"


def test_nccl_template_spans_two_nodes_and_names_the_type_whose_floor_judges_it(dev):
    from config.kubernetes import NCCL_INSTANCE_TYPE_ANNOTATION

    docs = synth(ClusterValidationChart, props=ValidationProps(config=dev))
    jobs = [d for d in docs if d["kind"] == "MPIJob"]
    assert len(jobs) == 2  # p4d and p5 in dev
    for job in jobs:
        replicas = job["spec"]["mpiReplicaSpecs"]
        group = dev.nodegroup(target_nodegroups(replicas["Worker"]["template"]["spec"])[0])
        assert replicas["Worker"]["replicas"] == 2
        assert job["spec"]["slotsPerWorker"] == group.instance_type.gpus
        assert job["metadata"]["annotations"][NCCL_INSTANCE_TYPE_ANNOTATION] == group.instance_type.name
        script = replicas["Launcher"]["template"]["spec"]["containers"][0]["command"][-1]
        assert f"-np {2 * group.instance_type.gpus}" in script and "all_reduce_perf -b 1G " in script
        assert "FI_PROVIDER=efa" in script


def test_every_chart_module_is_an_add_on_found_by_scanning_the_package(dev):
    from k8s.charts import addons

    assert sorted(addons()) == ["data-preparation", "efa-device-plugin", "etcd", "fsx-storage", "namespaces",
                                "network-policies", "nvidia-device-plugin", "priority-classes", "runner-rbac",
                                "training-operator", "training-operator-crds"]


def test_apply_order_is_layered_by_the_declared_dependencies(dev):
    from k8s.charts import apply_order

    assert [cls.addon for cls, _ in apply_order(dev)] == [
        # layer 0: nothing to wait for
        "efa-device-plugin", "namespaces", "nvidia-device-plugin", "priority-classes", "training-operator-crds",
        # layer 1
        "etcd", "fsx-storage", "network-policies", "runner-rbac", "training-operator",
        # layer 2: the data Jobs' ServiceAccounts
        "data-preparation"]


def test_adding_a_chart_is_adding_a_class_that_declares_what_it_needs(dev):
    from k8s.base import ProjectChart
    from k8s.charts import addons, apply_order

    class Dashboard(ProjectChart):
        addon = "dashboard"
        depends_on = ("training-operator",)

    order = [cls.addon for cls, _ in apply_order(dev, {**addons(), "dashboard": Dashboard})]
    assert order.index("dashboard") > order.index("training-operator")


@pytest.mark.parametrize("depends_on,needle", [
    (("no-such-chart",), "no chart in k8s/ provides"),
    (("cycle-b",), "cycle"),
])
def test_a_missing_or_circular_dependency_is_an_error(dev, depends_on, needle):
    from k8s.base import ProjectChart
    from k8s.charts import addons, apply_order

    a = type("A", (ProjectChart,), {"addon": "cycle-a", "depends_on": depends_on})
    b = type("B", (ProjectChart,), {"addon": "cycle-b", "depends_on": ("cycle-a",)})
    with pytest.raises(ValueError, match=needle):
        apply_order(dev, {**addons(), "cycle-a": a, "cycle-b": b})


def test_a_chart_needing_one_the_environment_lacks_is_an_error(dev):
    from dataclasses import replace

    from k8s.base import ProjectChart
    from k8s.charts import addons, apply_order

    needs_gpu = type("N", (ProjectChart,), {"addon": "needs-gpu", "depends_on": ("nvidia-device-plugin",)})
    with pytest.raises(ValueError, match="does not get"):
        apply_order(replace(dev, gpu_nodegroups=()), {**addons(), "needs-gpu": needs_gpu})


def test_environment_charts_order_users_after_what_they_use(dev):
    charts = EnvironmentCharts(dev, ClusterValues.placeholders(), app=cdk8s.Testing.app())
    order = [e.name for e in charts.entries]
    assert order.index("namespaces") < order.index("training-operator")
    assert order.index("training-operator-crds") < order.index("training-operator")
    assert order.index("priority-classes") < order.index("training-operator")
    assert set(charts.entry("etcd").depends_on) >= {"namespaces", "priority-classes"}


def test_an_environment_without_gpus_gets_no_device_plugins_or_checks(dev):
    from dataclasses import replace

    from k8s.validation import validation_objects

    cpu_only = replace(dev, gpu_nodegroups=())
    names = [e.name for e in EnvironmentCharts(cpu_only, ClusterValues.placeholders(), app=cdk8s.Testing.app()).entries]
    assert not {"nvidia-device-plugin", "efa-device-plugin"} & set(names)
    assert {o["kind"] for o in validation_objects(cpu_only)} == {"PyTorchJob"}, "the smoke run only"


def test_repeated_literals_live_only_in_k8s_common():
    """Namespaces, numeric uids and the interface exclude list are named once (k8s/common.py)."""
    import re
    from pathlib import Path

    import k8s

    literals = [r'"kube-system"', r"\b6553[24]\b", r"pod-id-link0", r"docker0"]
    for path in Path(k8s.__file__).parent.glob("*.py"):
        if path.name == "common.py":
            continue
        text = path.read_text()
        for literal in literals:
            assert not re.search(literal, text), f"{path.name} repeats {literal}; use the constant in k8s/common.py"
