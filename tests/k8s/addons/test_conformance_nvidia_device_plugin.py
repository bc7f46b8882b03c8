"""The NVIDIA device plugin we deploy against NVIDIA's static DaemonSet for v0.19.3
(NVIDIA/k8s-device-plugin tag v0.19.3, deployments/static/nvidia-device-plugin.yml), from
../shared/contracts/nvidia-device-plugin-v0.19.3/. Intended differences: DEVIATIONS."""

from __future__ import annotations

import pytest

from conformance import ABSENT, PRESENT, Deviation, contract, declared_problems, differences, one, pod_view, yaml_docs

DEVIATIONS = (
    Deviation("pod.placement", PRESENT, ABSENT,
              "only our GPU node groups (by their node-group label); upstream lands on every node and "
              "idles where there is no GPU"),
    Deviation("pod.automountServiceAccountToken", False, True,
              "the plugin talks to the kubelet over its socket, never to the API server"),
    Deviation("security.seccompProfile", {"type": "RuntimeDefault"}, ABSENT,
              "every pod we render runs under the runtime's default seccomp profile; the plugin only "
              "uses NVML and a unix socket"),
)


def upstream_daemon_set() -> dict:
    return one(yaml_docs(contract("nvidia-device-plugin-v0.19.3", "nvidia-device-plugin.yml")), "DaemonSet")


@pytest.fixture(scope="module")
def ours() -> dict:
    from k8s.addons.nvidia_device_plugin import nvidia_device_plugin

    return nvidia_device_plugin(("p4d", "p5"))


def view(daemon_set: dict) -> dict:
    return {**pod_view(daemon_set["spec"]["template"]["spec"]),
            "namespace": daemon_set["metadata"]["namespace"],
            "updateStrategy": daemon_set["spec"].get("updateStrategy", {"type": "RollingUpdate"})["type"]}


def test_nvidia_plugin_matches_upstream_v0_19_3_except_the_declared_deviations(ours):
    problems = declared_problems(differences(view(ours), view(upstream_daemon_set())), DEVIATIONS)
    assert not problems, "\n".join(problems)


def test_the_nvidia_image_is_the_release_pin():
    from k8s.pods.images import IMAGES

    assert IMAGES["nvidia-device-plugin"] == upstream_daemon_set()["spec"]["template"]["spec"]["containers"][0]["image"]
