"""Every pod template we render is a valid PodTemplateSpec of the cluster's Kubernetes version,
unknown fields rejected: the operator would silently drop them when it decodes a job."""

from __future__ import annotations

import copy

import pytest

from config import ConfigError
from k8s.pods.podspec import pod_templates, validate_pod_templates
from k8s_walk import ENV_NAMES, build, objects, ops_objects


@pytest.fixture(scope="module")
def rendered(environments):
    """What the charts deploy and what ops creates (runs, validation), for every environment."""
    return [(environments[name], obj) for name in ENV_NAMES
            for obj in objects(build(environments[name])) + ops_objects(environments[name])]


def test_every_pod_template_of_every_environment_is_a_valid_podspec(rendered):
    kinds = set()
    for config, obj in rendered:
        if validate_pod_templates(obj, config.kubernetes_version):
            kinds.add(obj["kind"])
    assert kinds == {"Deployment", "DaemonSet", "Job", "PyTorchJob", "MPIJob"}


@pytest.mark.parametrize("mutate,field", [
    (lambda t: t["spec"]["containers"][0].update(imagePullPolice="Always"), "imagePullPolice"),
    (lambda t: t["spec"].update(nodeSelecter={"a": "b"}), "nodeSelecter"),
    (lambda t: t["spec"]["containers"][0]["env"].append({"name": "X", "valu": "1"}), "valu"),
    (lambda t: t["spec"]["containers"][0]["resources"].update(request={}), "request"),
])
def test_a_misspelt_pod_template_field_is_a_one_line_error_naming_it(rendered, mutate, field):
    config, job = next((c, o) for c, o in rendered if o["kind"] == "PyTorchJob")
    job = copy.deepcopy(job)
    [(_, template)] = pod_templates(job)
    mutate(template)
    with pytest.raises(ConfigError, match=field) as err:
        validate_pod_templates(job, config.kubernetes_version)
    assert f"PyTorchJob/{job['metadata']['name']} Worker" in str(err.value) and "\n" not in str(err.value)


def test_the_jobs_and_validation_charts_refuse_to_render_a_bad_template(dev, monkeypatch):
    import k8s.pods.pytorchjob
    import k8s.pods.validation

    def misspelt(instance, **_):
        return [{"name": "NCCL_DEBUG", "value": "INFO", "valueFrum": {}}]

    monkeypatch.setattr(k8s.pods.pytorchjob, "network_env", misspelt)
    with pytest.raises(ConfigError, match="valueFrum"):
        k8s.pods.pytorchjob.render_pytorchjob(dev, "llama3-8b-fsdp", image="img:1")
    monkeypatch.setattr(k8s.pods.validation, "network_env", misspelt)
    with pytest.raises(ConfigError, match="MPIJob/nccl-allreduce-.* Worker pod template"):
        k8s.pods.validation.validation_objects(dev)


def test_an_unknown_kubernetes_version_is_a_config_error(rendered):
    _, job = next((c, o) for c, o in rendered if o["kind"] == "PyTorchJob")
    with pytest.raises(ConfigError, match="kubernetesVersion"):
        validate_pod_templates(job, "1.99")
