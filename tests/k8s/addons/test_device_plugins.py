"""The NVIDIA and EFA device plugins' DaemonSets (k8s/addons/*_device_plugin.py, k8s/pods/device_plugin.py)."""

import pytest

from config.kubernetes import EFA_LABEL, GPU_TAINT_KEY
from k8s.addons.efa_device_plugin import efa_device_plugin
from k8s.addons.nvidia_device_plugin import nvidia_device_plugin
from k8s.pods.device_plugin import DevicePluginSpec, HostMount
from k8s.pods.images import efa_device_plugin_image
from k8s_walk import pod, target_nodegroups


def test_nvidia_plugin_runs_only_on_gpu_node_groups_tolerating_the_taint():
    spec = pod(nvidia_device_plugin(("p4d", "p5")))
    assert target_nodegroups(spec) == ["p4d", "p5"]
    assert [t["key"] for t in spec["tolerations"]] == [GPU_TAINT_KEY]
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["containers"][0]["image"].startswith("nvcr.io/nvidia/k8s-device-plugin:v0.")
    assert spec["automountServiceAccountToken"] is False
    assert spec["volumes"][0]["hostPath"]["path"] == "/var/lib/kubelet/device-plugins"


def test_nvidia_plugin_needs_a_gpu_node_group():
    with pytest.raises(ValueError, match="GPU node group"):
        nvidia_device_plugin(())


def test_efa_plugin_on_efa_nodes_with_host_paths_and_regional_image():
    spec = pod(efa_device_plugin(efa_device_plugin_image("eu-south-1")))
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


@pytest.mark.parametrize("mounts, dir_type", [((HostMount("x", "/x", "File"),), ""), ((), "Socket")])
def test_a_host_path_type_the_plugins_do_not_use_is_refused(mounts, dir_type):
    with pytest.raises(ValueError, match="host path types"):
        DevicePluginSpec(name="p", image="i", node_label="l", node_label_values=("v",), tolerate=(), security={},
                         run_as_root=False, address="a", plugins_dir_type=dir_type, extra_mounts=mounts)
