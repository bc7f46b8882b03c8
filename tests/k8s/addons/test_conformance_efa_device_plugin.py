"""The EFA device plugin we deploy against what the aws/eks-charts chart renders with its default
values (chart v0.5.30, plugin v0.5.20; stable/aws-efa-k8s-device-plugin at commit 5239609), from
../shared/contracts/aws-efa-k8s-device-plugin-chart-v0.5.30/. The Helm template is rendered here
(tests/k8s/helm_subset.py), without helm. Intended differences: DEVIATIONS."""

from __future__ import annotations

import pytest
import yaml

from conformance import ABSENT, PRESENT, Deviation, contract, declared_problems, differences, one, pod_view
from helm_subset import Chart

CHART = "aws-efa-k8s-device-plugin-chart-v0.5.30"
# values.yaml's image is the us-west-2 registry; ours is regional, so compare in that region.
REGION = "us-west-2"

DEVIATIONS = (
    Deviation("pod.placement", PRESENT, PRESENT,
              "our EFA node groups carry a label we select on; the chart's list of instance types "
              "would need editing for every new EFA type, and an entry there does not mean our "
              "node group has EFA interfaces attached"),
    Deviation("pod.tolerations",
              [("CriticalAddonsOnly", "Exists", "", ""), ("nvidia.com/gpu", "Exists", "", "NoSchedule")],
              [("CriticalAddonsOnly", "Exists", "", "")],
              "our EFA node groups are GPU node groups and carry the GPU taint, which the chart's "
              "default tolerations do not tolerate (values.yaml leaves `tolerations` to the user)"),
    Deviation("security.seccompProfile", {"type": "RuntimeDefault"}, ABSENT,
              "every pod we render says RuntimeDefault; the container is privileged, and privileged "
              "containers always run Unconfined (Kubernetes docs, 'Seccomp and Kubernetes', "
              "https://kubernetes.io/docs/reference/node/seccomp/), so this changes nothing for it"),
)


def upstream_daemon_set() -> dict:
    def load(name):
        return yaml.safe_load(contract(CHART, name).read_text())

    chart = Chart(load("Chart.yaml"), load("values.yaml"), release="aws-efa-k8s-device-plugin",
                  namespace="kube-system")
    return one(chart.render(contract(CHART, "templates-daemonset.yaml").read_text()), "DaemonSet")


@pytest.fixture(scope="module")
def ours() -> dict:
    from k8s.addons.efa_device_plugin import efa_device_plugin
    from k8s.pods.images import efa_device_plugin_image

    return efa_device_plugin(efa_device_plugin_image(REGION))


def view(daemon_set: dict) -> dict:
    return {**pod_view(daemon_set["spec"]["template"]["spec"]),
            "updateStrategy": daemon_set["spec"].get("updateStrategy", {"type": "RollingUpdate"})["type"]}


def test_efa_plugin_matches_the_chart_v0_5_30_except_the_declared_deviations(ours):
    problems = declared_problems(differences(view(ours), view(upstream_daemon_set())), DEVIATIONS)
    assert not problems, "\n".join(problems)


def test_the_efa_plugin_tag_is_the_charts_app_version():
    from k8s.pods.images import EFA_DEVICE_PLUGIN_TAG

    chart = yaml.safe_load(contract(CHART, "Chart.yaml").read_text())
    values = yaml.safe_load(contract(CHART, "values.yaml").read_text())
    assert EFA_DEVICE_PLUGIN_TAG == values["image"]["tag"] == chart["appVersion"]


def test_the_chart_renders_what_the_plugin_needs_privileged_root_host_network_and_its_mounts():
    """The renderer itself must be able to fail: these are what values.yaml and the template say."""
    spec = upstream_daemon_set()["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert spec["hostNetwork"] is True
    assert container["securityContext"] == {"allowPrivilegeEscalation": True, "privileged": True,
                                            "runAsNonRoot": False, "runAsUser": 0}
    assert [m["mountPath"] for m in container["volumeMounts"]] == [
        "/var/lib/kubelet/device-plugins", "/dev/infiniband/", "/opt/aws/neuron/"]
