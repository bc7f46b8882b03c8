"""What each pod we render may hold: the Hugging Face token only in the model-download Job, an API
token only where the pod calls the Kubernetes API, and the trainer image's own non-root user."""

from __future__ import annotations

import pytest

from config.kubernetes import HF_TOKEN_SECRET, TRAINER_UID
from k8s.pods.model_download import COMPONENT as MODEL_DOWNLOAD
from k8s_walk import ENV_NAMES, REPO_ROOT, containers
from rendered import cluster_objects, pods

# Pods that call the Kubernetes API, and why; every other pod of ours mounts no ServiceAccount token.
API_CLIENTS = {
    "Deployment/training-operator": "the operator reconciles jobs",
    "Launcher": "the MPI launcher runs `kubectl exec` into its workers (the operator's per-job Role)",
}
# Node agents in kube-system (upstream manifests, compared in the conformance tests).
DEVICE_PLUGINS = "DaemonSet/"


@pytest.fixture(scope="module")
def rendered_pods(environments) -> dict[str, list]:
    return {name: [pod for obj in cluster_objects(environments[name]) for pod in pods(obj)] for name in ENV_NAMES}


def _secret_names(spec: dict) -> set[str]:
    """Every Secret a pod spec reads: env, envFrom, and secret or projected volumes."""
    names = set()
    for container in containers(spec):
        for env in container.get("env") or []:
            ref = (env.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                names.add(ref["name"])
        for source in container.get("envFrom") or []:
            if "secretRef" in source:
                names.add(source["secretRef"]["name"])
    for volume in spec.get("volumes") or []:
        if "secret" in volume:
            names.add(volume["secret"]["secretName"])
        for projected in (volume.get("projected") or {}).get("sources") or []:
            if "secret" in projected:
                names.add(projected["secret"]["name"])
    return names


@pytest.mark.parametrize("env_name", ENV_NAMES)
def test_only_the_model_download_job_reads_the_hugging_face_token(rendered_pods, env_name):
    readers = {pod.where for pod in rendered_pods[env_name] if HF_TOKEN_SECRET in _secret_names(pod.spec)}
    downloads = {pod.where for pod in rendered_pods[env_name] if pod.labels.get("app.kubernetes.io/component") == MODEL_DOWNLOAD}
    assert downloads, "no model-download Job rendered"
    assert readers == downloads


@pytest.mark.parametrize("env_name", ENV_NAMES)
def test_only_pods_that_call_the_api_mount_a_service_account_token(rendered_pods, env_name):
    for pod in rendered_pods[env_name]:
        if pod.where.startswith(DEVICE_PLUGINS):
            continue
        mounts = pod.spec.get("automountServiceAccountToken", True)
        needs = any(key in pod.where for key in API_CLIENTS)
        assert mounts == needs, f"{pod.where}: automountServiceAccountToken={mounts}"


@pytest.mark.parametrize("env_name", ENV_NAMES)
def test_pods_of_the_trainer_image_run_as_its_user(rendered_pods, env_name):
    trainer_pods = [p for p in rendered_pods[env_name] if p.where.startswith(("PyTorchJob/", "Job/data-", "Job/model-download-"))]
    assert trainer_pods
    for pod in trainer_pods:
        context = pod.spec["securityContext"]
        assert (context["runAsNonRoot"], context["runAsUser"], context["runAsGroup"]) == (True, TRAINER_UID, TRAINER_UID), pod.where


@pytest.mark.parametrize("env_name", ENV_NAMES)
def test_training_and_mpi_pods_drop_every_capability_and_never_escalate(rendered_pods, env_name):
    jobs = [p for p in rendered_pods[env_name] if p.where.startswith(("PyTorchJob/", "MPIJob/"))]
    assert any(p.where.startswith("MPIJob/") for p in jobs) and any(p.where.startswith("PyTorchJob/") for p in jobs)
    for pod in jobs:
        ours = [c for c in containers(pod.spec) if c["name"] != "kubectl-delivery"]  # the operator's own
        for container in ours:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False and context["capabilities"] == {"drop": ["ALL"]}, pod.where
        assert pod.spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod.spec["securityContext"]["runAsNonRoot"] is True


@pytest.mark.parametrize("env_name", ENV_NAMES)
def test_efa_pods_get_their_devices_by_request_and_nothing_privileged(rendered_pods, env_name):
    """Amazon EKS User Guide, "Manage EFA devices on Amazon EKS" and "Run machine learning training
    on Amazon EKS with Elastic Fabric Adapter": a pod asks for `vpc.amazonaws.com/efa` and
    `hugepages-2Mi` in its requests and limits and the device plugin mounts the interfaces; neither
    page's pod sets a privileged field. The kernel makes /dev/infiniband/uverbs* mode 0666
    (drivers/infiniband/core/uverbs_main.c uverbs_devnode), so a non-root user opens them; the memory
    it registers counts against RLIMIT_MEMLOCK, which the node's container runtime must raise."""
    efa = [p for p in rendered_pods[env_name]
           if any("vpc.amazonaws.com/efa" in (c.get("resources", {}).get("limits") or {}) for c in containers(p.spec))]
    assert efa, "no EFA pod rendered"
    for pod in efa:
        for container in containers(pod.spec):
            limits = container.get("resources", {}).get("limits") or {}
            if "vpc.amazonaws.com/efa" in limits:
                assert "hugepages-2Mi" in limits, pod.where
            context = container.get("securityContext") or {}
            assert not context.get("privileged") and not (context.get("capabilities") or {}).get("add"), pod.where
        assert pod.spec["securityContext"]["runAsNonRoot"] is True
        assert not any("hostPath" in v for v in pod.spec.get("volumes") or []), pod.where


@pytest.mark.parametrize("env_name", ENV_NAMES)
def test_the_mpi_launcher_leaves_its_service_account_to_the_operator(environments, env_name):
    """With no serviceAccountName in the launcher template, the v1.9.4 operator creates <job>-launcher
    and a Role that may get, list and watch pods and exec only into this job's worker pods
    (pkg/controller.v1/mpi/mpijob_controller.go newLauncherServiceAccount, newLauncherRole)."""
    from k8s.pods.validation import nccl_mpijob_manifest
    from k8s.pods.names import nccl_groups

    for group in nccl_groups(environments[env_name]):
        specs = nccl_mpijob_manifest(group, image="i", namespace="training")["spec"]["mpiReplicaSpecs"]
        assert "serviceAccountName" not in specs["Launcher"]["template"]["spec"]
        assert specs["Launcher"]["template"]["spec"].get("automountServiceAccountToken", True) is True
        assert specs["Worker"]["template"]["spec"]["automountServiceAccountToken"] is False

