"""The data-preparation Job (k8s/pods/data_job.py): strict PodSpec, hardened pod on the CPU node
group with the FSx claim, the trainer image, and the steps each data source asks for."""

from __future__ import annotations

import contextlib
import os
import shlex

import kubernetes_validate
import pytest

from config import load_environment
from config.errors import ConfigError
from config.kubernetes import FSX_CLAIM_NAME, NODEGROUP_LABEL, TRAINING_NAMESPACE
from k8s.pods.data_job import DATA_SOURCE_LABEL, data_job_manifest, steps
from k8s.pods.names import HTTPS_EGRESS_LABEL, POD_IDENTITY_LABEL
from k8s_walk import raw_environments

IMAGE = "registry.example/trainer:cpu-1"


def environment(**changes):
    raw = raw_environments()["dev"]
    raw.update(changes)
    return load_environment({"dev": raw}, "dev")


def script(manifest: dict) -> list[list[str]]:
    [container] = manifest["spec"]["template"]["spec"]["containers"]
    assert container["command"][:2] == ["sh", "-ec"]  # a failed step stops the pod
    lines = [shlex.split(line) for line in container["command"][2].splitlines()]
    assert lines[-1][0] == "exec" and all(line[0] != "exec" for line in lines[:-1])  # the last step takes SIGTERM
    return [*lines[:-1], lines[-1][1:]]


def test_the_kubelets_sigterm_reaches_the_last_step_that_cleans_up_on_it(dev, monkeypatch):
    """The pod's command, run as the container runs it, with a last step that records SIGTERM and
    exits 143 on it (trainer.data prepare removes its staging folder so). Before, the shell held the
    signal: in the pod (sh is PID 1) it ignored it, and the step ran until the grace period's
    SIGKILL; here (not PID 1) it died of it and left the step running orphaned."""
    import select
    import signal
    import subprocess
    import sys

    from k8s.pods import data_job
    from ops import proc

    waits = ("import signal, sys\n"
             "signal.signal(signal.SIGTERM, lambda *_: (print('got SIGTERM', flush=True), sys.exit(143)))\n"
             "print('ready', flush=True)\n"
             "signal.pause()\n")
    monkeypatch.setattr(data_job, "steps", lambda config, source: [[sys.executable, "-c", "pass"],
                                                                   [sys.executable, "-c", waits]])
    [container] = data_job_manifest(dev, dev.data_source("c4"), image=IMAGE)["spec"]["template"]["spec"]["containers"]
    pod = proc.start(container["command"], stdout=subprocess.PIPE, text=True)  # a group of its own, dies with us
    try:
        assert select.select([pod.stdout], [], [], 30)[0], "the last step never started"
        assert pod.stdout.readline() == "ready\n"
        pod.send_signal(signal.SIGTERM)  # the kubelet's, to the container's first process
        assert pod.wait(timeout=30) == 143
        assert pod.stdout.read() == "got SIGTERM\n"
    finally:
        with contextlib.suppress(ProcessLookupError):  # the steps too: they share the session's group
            os.killpg(pod.pid, signal.SIGKILL)
        pod.wait(timeout=30)
        pod.stdout.close()


def test_the_job_is_a_strictly_valid_hardened_batch_job_on_the_cpu_group_with_fsx(dev):
    manifest = data_job_manifest(dev, dev.data_source("imagenet"), image=IMAGE)
    kubernetes_validate.validate(dict(manifest, metadata={"name": "data-imagenet-x", "namespace": "training"}),
                                 dev.kubernetes_version, strict=True)
    assert manifest["metadata"]["generateName"] == "data-imagenet-"
    assert manifest["metadata"]["namespace"] == TRAINING_NAMESPACE
    spec = manifest["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {NODEGROUP_LABEL: "cpu"}
    assert "tolerations" not in spec  # CPU groups carry no taint, as for the CPU training jobs
    assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}, "runAsNonRoot": True,
                                       "runAsUser": 1000, "runAsGroup": 1000}
    assert spec["serviceAccountName"] == "data-imagenet"
    assert spec["restartPolicy"] == "Never"
    assert {"name": "fsx", "persistentVolumeClaim": {"claimName": FSX_CLAIM_NAME}} in spec["volumes"]
    [container] = spec["containers"]
    assert container["image"] == IMAGE and container["imagePullPolicy"] == "IfNotPresent"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "fsx", "mountPath": "/fsx"} in container["volumeMounts"]
    # The whole m5.2xlarge share a CPU training pod takes, memory limit equal to the request.
    assert container["resources"] == {"requests": {"cpu": "6", "memory": "25Gi"}, "limits": {"memory": "25Gi"}}
    # It copies from S3: HTTPS out and the Pod Identity agent (k8s/pods/network_policy.py).
    assert manifest["spec"]["template"]["metadata"]["labels"] == {
        DATA_SOURCE_LABEL: "imagenet", HTTPS_EGRESS_LABEL: "true", POD_IDENTITY_LABEL: "true"}
    # A malformed dataset or an unlistable prefix (exit 2) fails the Job at once: retrying cannot help.
    [rule] = manifest["spec"]["podFailurePolicy"]["rules"]
    assert rule == {"action": "FailJob", "onExitCodes": {"containerName": "data", "operator": "In", "values": [2]}}


def test_the_copying_job_gets_its_pod_identity_role_but_no_kubernetes_api_token(dev):
    """The Job calls S3, never the Kubernetes API, so a compromised copy (it reads whatever the
    bucket holds) gets no API credential. Pod Identity does not need one:
    - the EKS Pod Identity webhook (aws/amazon-eks-pod-identity-webhook v0.6.9, commit 3bf80a34,
      pkg/handler/handler.go:346-360 with main.go:87-90) adds its own projected volume
      `eks-pod-identity-token`, a serviceAccountToken of audience pods.eks.amazonaws.com, and reads
      no automount setting anywhere in the repository;
    - automountServiceAccountToken governs only the API credential the ServiceAccount admission
      plugin mounts ("Opt out of API credential automounting",
      https://kubernetes.io/docs/tasks/configure-pod-container/configure-service-account/#opt-out-of-api-credential-automounting).
    """
    from k8s.addons.data_preparation import service_accounts

    spec = data_job_manifest(dev, dev.data_source("imagenet"), image=IMAGE)["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "data-imagenet"  # the Pod Identity association's subject
    assert spec["automountServiceAccountToken"] is False
    # Nor does any other pod that would run as these ServiceAccounts get one by default.
    assert [account["automountServiceAccountToken"] for account in service_accounts(dev)] == [False, False]


def test_imagenet_copies_the_prefix_then_rearranges_the_copy(dev):
    assert script(data_job_manifest(dev, dev.data_source("imagenet"), image=IMAGE)) == [
        ["python", "-m", "trainer.s3sync", "--src", "s3://example-datasets-111111111111/imagenet/ILSVRC2012/",
         "--dest", "/fsx/sources/imagenet", "--region", "us-west-2", "--workers", "32"],
        ["python", "-m", "trainer.data", "imagenet", "--src", "/fsx/sources/imagenet", "--out", "/fsx/data/imagenet"],
    ]


def test_token_sources_copy_then_tokenize_into_the_folder_the_llm_presets_read(dev):
    assert script(data_job_manifest(dev, dev.data_source("c4"), image=IMAGE))[1] == [
        "python", "-m", "trainer.data", "prepare", "--tokenizer", "/fsx/models/llama-3.1-8b",
        "--input", "/fsx/sources/c4", "--output", "/fsx/data/tokens", "--text-field", "text", "--skip-if-prepared"]


def test_a_source_fsx_imports_through_its_data_repository_association_skips_the_copy():
    """FSx lazy-loads linked objects under the association's path: "Linking your file system to
    an S3 bucket", https://docs.aws.amazon.com/fsx/latest/LustreGuide/create-dra-linked-data-repo.html"""
    env = environment(fsx={"storageCapacityGiB": 1200, "throughputPerTiB": 250,
                           "s3ImportPath": "s3://example-datasets-111111111111/imagenet"})
    manifest = data_job_manifest(env, env.data_source("imagenet"), image=IMAGE)
    assert script(manifest) == [["python", "-m", "trainer.data", "imagenet", "--src", "/fsx/data/ILSVRC2012",
                                 "--out", "/fsx/data/imagenet"]]
    spec = manifest["spec"]["template"]["spec"]
    assert "serviceAccountName" not in spec and spec["automountServiceAccountToken"] is False
    # No S3 access for it: no ServiceAccount either (the other source still copies).
    from k8s.addons.data_preparation import service_accounts

    assert [a["metadata"]["labels"][DATA_SOURCE_LABEL] for a in service_accounts(env)] == ["c4"]


def test_a_plain_copy_lands_where_the_jobs_read_it():
    env = environment(dataSources={"raw": {"s3Uri": "s3://bucket-a/shards/"}})
    assert steps(env, env.data_source("raw")) == [
        ["python", "-m", "trainer.s3sync", "--src", "s3://bucket-a/shards/", "--dest", "/fsx/data/raw",
         "--region", "us-west-2", "--workers", "32"]]


def test_a_misspelt_pod_field_is_a_config_error_naming_it(dev, monkeypatch):
    import k8s.pods.fsx_job as fsx_job

    monkeypatch.setattr(fsx_job, "pod_security_context", lambda uid: {"seccompProfile": {"typ": "RuntimeDefault"}})
    with pytest.raises(ConfigError, match=r"^Job/data-imagenet- pod template: spec.securityContext.seccompProfile"):
        data_job_manifest(dev, dev.data_source("imagenet"), image=IMAGE)
