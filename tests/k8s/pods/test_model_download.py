"""The model-download Job `ops model download` creates (k8s/pods/model_download.py)."""

import re
from dataclasses import replace

import kubernetes_validate
import pytest

from config import ConfigError
from config.kubernetes import FSX_CLAIM_NAME, NODEGROUP_LABEL
from k8s.charts import addons
from k8s.pods.model_download import COMPONENT, JOB_PREFIX, MODEL_LABEL, REPO_ANNOTATION, ModelDownload, model_download_manifest
from k8s.pods.resources import container_resources

IMAGE = "111111111111.dkr.ecr.us-west-2.amazonaws.com/trainer-cpu:abc123"


@pytest.fixture(scope="module")
def synthesized(environments):
    """The Job for the model llama2-7b-finetune starts from (/fsx/models/Llama-2-7b-hf)."""
    return [model_download_manifest(environments["dev"], ModelDownload.of("meta-llama/Llama-2-7b-hf"), image=IMAGE)]


def pod(job):
    return job["spec"]["template"]["spec"]


def test_the_job_fetches_the_repository_into_its_directory_under_fsx_models(synthesized):
    [job] = synthesized
    assert (job["kind"], job["metadata"]["name"], job["metadata"]["namespace"]) == \
        ("Job", "model-download-llama-2-7b-hf", "training")
    assert job["metadata"]["annotations"][REPO_ANNOTATION] == "meta-llama/Llama-2-7b-hf"
    assert pod(job)["containers"][0]["command"] == [
        "python", "-m", "trainer.hf_download", "--repo", "meta-llama/Llama-2-7b-hf", "--revision", "main",
        "--out", "/fsx/models/Llama-2-7b-hf"]
    assert job["metadata"]["labels"]["app.kubernetes.io/component"] == "model-download"
    assert job["metadata"]["labels"][MODEL_LABEL] == "Llama-2-7b-hf"


def test_the_job_is_a_valid_strict_kubernetes_job(synthesized, dev):
    for job in synthesized:
        kubernetes_validate.validate(job, dev.kubernetes_version, strict=True)


def test_the_job_runs_hardened_on_the_cpu_group_with_the_fsx_claim_and_the_optional_token(synthesized, dev):
    [job] = synthesized
    spec = pod(job)
    [container] = spec["containers"]
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["automountServiceAccountToken"] is False  # it makes no Kubernetes API calls
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}
    assert spec["nodeSelector"] == {NODEGROUP_LABEL: dev.cpu_nodegroups[0].name}
    assert "tolerations" not in spec
    assert container["resources"] == container_resources(dev.cpu_nodegroups[0].instance_type, cpu="2", memory="4Gi")
    assert {"name": "fsx", "persistentVolumeClaim": {"claimName": FSX_CLAIM_NAME}} in spec["volumes"]
    assert {"name": "fsx", "mountPath": "/fsx"} in container["volumeMounts"]
    [token] = [e for e in container["env"] if e["name"] == "HF_TOKEN"]
    assert token == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token",
                                                                        "optional": True}}}
    assert container["image"] == IMAGE and container["imagePullPolicy"] == "IfNotPresent"


def test_a_refusal_fails_the_job_at_once_while_other_failures_retry(synthesized):
    [job] = synthesized
    assert pod(job)["restartPolicy"] == "Never"
    assert job["spec"]["backoffLimit"] >= 1
    assert job["spec"]["podFailurePolicy"]["rules"] == [{"action": "FailJob", "onExitCodes": {
        "containerName": "download", "operator": "In", "values": [2]}}]


def test_cdk_deploy_does_not_apply_download_jobs():
    """A Job's pod template is immutable: one applied on deploy would fail the next deploy that
    changes the trainer image. ops creates them (k8s/pods/model_download.py says why)."""
    assert COMPONENT not in {addon.component for addon in addons().values()}


@pytest.mark.parametrize("repo, name, revision, field", [
    ("../etc", None, "main", "--repo"),
    ("a/b/c", None, "main", "--repo"),
    ("meta-llama/Llama-2-7b-hf", ".hidden", "main", "--name"),
    ("meta-llama/Llama-2-7b-hf", "a/b", "main", "--name"),
    ("meta-llama/Llama-2-7b-hf", None, "../x", "--revision"),
    # `$` matches before a final newline: each is matched whole.
    ("meta-llama/Llama-2-7b-hf\n", "llama", "main", "--repo"),
    ("meta-llama/Llama-2-7b-hf", None, "main\n", "--revision"),
])
def test_bad_download_arguments_are_one_line_naming_the_field(repo, name, revision, field):
    with pytest.raises(ConfigError) as err:
        ModelDownload.of(repo, name, revision)
    assert err.value.path == field
    assert "\n" not in err.value.line()


# A label value (Kubernetes "Labels and Selectors"): at most 63 characters, alphanumerics at both ends
# with '-', '_' or '.' between; a Job name: a DNS label (RFC 1123) of at most 63.
LABEL_VALUE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


@pytest.mark.parametrize("name", ["abc-", "abc_", "abc.", "a" * 49, "a" * 48 + "-b", "-abc", "a..b", "abc\n"])
def test_a_name_whose_label_or_job_name_would_be_wrong_or_shared_is_refused_naming_name(name):
    """'abc-' was the model label value Kubernetes refuses, and 'abc-', 'abc_', 'abc.' and names
    sharing their first 48 characters all became Job model-download-abc (-<48 characters>)."""
    with pytest.raises(ConfigError) as err:
        ModelDownload.of("owner/repo", name)
    assert err.value.path == "--name" and "48" in err.value.message and "\n" not in err.value.line()


@pytest.mark.parametrize("name", ["Llama-2-7b-hf", "a", "A.b_c-d", "x" * 48, "Meta-Llama-3.1-8B-Instruct"])
def test_an_accepted_name_is_the_models_label_value_and_all_of_its_job_name(dev, name):
    job = model_download_manifest(dev, ModelDownload.of("owner/repo", name), image=IMAGE)
    assert LABEL_VALUE.fullmatch(job["metadata"]["labels"][MODEL_LABEL]) and DNS_LABEL.fullmatch(job["metadata"]["name"])
    assert job["metadata"]["name"] == JOB_PREFIX + re.sub("[._]", "-", name.lower())


def test_an_environment_without_a_cpu_node_group_is_refused_in_one_line(dev):
    with pytest.raises(ConfigError) as err:
        model_download_manifest(replace(dev, cpu_nodegroups=()), ModelDownload.of("a/b"), image=IMAGE)
    assert "cpuNodegroups" in err.value.line()
