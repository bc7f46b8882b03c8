"""The one hardened securityContext (k8s/pods/security.py) is on every pod we render, from the
charts and from `ops` alike; only the device plugins run as their upstream manifests do."""

from __future__ import annotations

import pytest

from k8s.pods.security import RUNTIME_DEFAULT_SECCOMP, container_security_context, pod_security_context
from k8s_walk import ENV_NAMES, containers
from rendered import cluster_objects, templates

DEVICE_PLUGINS = ("DaemonSet/nvidia-device-plugin", "DaemonSet/aws-efa-k8s-device-plugin")


@pytest.fixture(scope="module")
def rendered_templates(environments) -> dict[str, list]:
    return {name: [pod for obj in cluster_objects(environments[name]) for pod in templates(obj)] for name in ENV_NAMES}


@pytest.mark.parametrize("env_name", ENV_NAMES)
def test_every_pod_template_carries_the_one_hardened_context(rendered_templates, env_name):
    checked = 0
    for pod in rendered_templates[env_name]:
        if pod.where in DEVICE_PLUGINS:
            continue
        context = pod.spec["securityContext"]
        assert pod_security_context(context["runAsUser"]).items() <= context.items(), pod.where
        for container in containers(pod.spec):
            assert container_security_context().items() <= container["securityContext"].items(), pod.where
        checked += 1
    assert checked >= 10


@pytest.mark.parametrize("env_name", ENV_NAMES)
def test_the_device_plugins_differ_only_where_upstream_does_and_still_use_runtime_default_seccomp(
        rendered_templates, env_name):
    plugins = [pod for pod in rendered_templates[env_name] if pod.where in DEVICE_PLUGINS]
    assert plugins
    for pod in plugins:
        assert pod.spec["securityContext"]["seccompProfile"] == RUNTIME_DEFAULT_SECCOMP
        assert pod.spec["automountServiceAccountToken"] is False
