"""Where an environment's pods pull their images from, by option: trainingApi v2 and efaAllocation
dra add no kind of image source that a v1, device-plugin environment does not already use.

Every image a chart renders is one of:
- an upstream release image from the pinned table k8s/pods/images.py IMAGES, by the release tag its
  conformance test pins against ../shared/contracts/ (the Training Operator, etcd, the NVIDIA
  device plugin under v1; JobSet and Kubeflow Trainer under v2), or against the upstream facts it
  restates (NVIDIA's GPU DRA driver on gpuAllocation dra groups);
- an Amazon EKS add-on image from the region's EKS registry (eks_addon_image: the EFA device
  plugin, and the EFA DRA driver on dra groups), pinned to its chart's appVersion;
- a placeholder for an image the environment builds itself (the trainer repository's copy, by
  digest from `ops`; the MPI launcher's kubectl-delivery asset).

Only the trainer images go through the Registry stack's copy by digest (cdk_constructs/image_copy.py):
upstream images of either API are pulled by their release tags (checkov-accepted.yaml CKV_K8S_43).
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from config import Environment
from k8s.addons import ClusterValues
from k8s.charts import apply_order
from k8s.pods.images import EKS_ADDON_REGISTRY_ACCOUNTS, IMAGES
from k8s_walk import containers, pod_specs
from ops.envconfig import load

PLACEHOLDER = re.compile(r"^\$\{([A-Z0-9_]+)\}$")
EKS_REGISTRY = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com/eks/(?P<repo>[a-z0-9-]+):"
                          r"(?P<tag>[^:@]+)$")
UPSTREAM = {image: key for key, image in IMAGES.items()}


def source(image: str, region: str) -> tuple[str, str]:
    """(kind of source, which) of one image; AssertionError for an image of no known source."""
    if m := PLACEHOLDER.match(image):
        return "built by the environment", m.group(1)
    if m := EKS_REGISTRY.match(image):
        assert m["region"] == region and m["account"] == EKS_ADDON_REGISTRY_ACCOUNTS[region], image
        return "EKS add-on registry", m["repo"]
    assert image in UPSTREAM, f"{image} is in no pinned table: add it to k8s/pods/images.py IMAGES and pin it"
    return "upstream release", UPSTREAM[image]


def sources(config: Environment) -> set[tuple[str, str]]:
    values = ClusterValues.placeholders()
    found = set()
    for addon, _ in apply_order(config):
        for obj in addon.objects(config, values):
            for _, spec in pod_specs(obj):
                found |= {source(c["image"], config.region) for c in containers(spec)}
    return found


def variant(name: str, api: str, efa: str = "devicePlugin") -> Environment:
    env = load(name)
    return replace(env, training_api=api,
                   gpu_nodegroups=tuple(replace(g, efa_allocation=efa) for g in env.gpu_nodegroups))


@pytest.fixture(scope="module")
def prod_v1():
    return sources(variant("prod", "v1"))


def test_a_v1_environment_pulls_upstream_images_by_their_pinned_release_tags(prod_v1):
    assert {which for kind, which in prod_v1 if kind == "upstream release"} == {
        "training-operator", "etcd", "nvidia-device-plugin"}
    assert ("EKS add-on registry", "aws-efa-k8s-device-plugin") in prod_v1


def test_trainer_v2_adds_only_its_two_pinned_controllers(prod_v1):
    added = sources(variant("prod", "v2")) - prod_v1
    assert added == {("upstream release", "jobset"), ("upstream release", "trainer-controller-manager")}


def test_the_dra_driver_comes_from_the_eks_registry_as_the_efa_device_plugin_does(prod_v1):
    dra = sources(variant("prod", "v2", "dra"))
    assert dra - prod_v1 == {("upstream release", "jobset"), ("upstream release", "trainer-controller-manager"),
                             ("EKS add-on registry", "dranet")}
    assert ("EKS add-on registry", "aws-efa-k8s-device-plugin") not in dra  # no device-plugin group is left


def test_gpu_allocation_dra_adds_only_nvidias_pinned_dra_driver(prod_v1):
    env = variant("prod", "v1", "dra")
    aligned = replace(env, gpu_nodegroups=tuple(replace(g, gpu_allocation="dra") for g in env.gpu_nodegroups))
    added = sources(aligned) - prod_v1
    assert added == {("EKS add-on registry", "dranet"), ("upstream release", "dra-driver-nvidia-gpu")}
    assert ("upstream release", "nvidia-device-plugin") not in sources(aligned)  # no device-plugin GPU group left


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_every_image_of_every_option_has_a_known_source(name):
    for api in ("v1", "v2"):
        for efa in ("devicePlugin", "dra"):
            assert sources(variant(name, api, efa))  # source() asserts on any other image
