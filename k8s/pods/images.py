"""Every container image the pods run, pinned by tag in one table so pin checks and upgrades look in
one place, and the placeholders that stand for the images an environment builds itself."""

from __future__ import annotations

import re

from config.errors import ConfigError

# Training Operator v1.9.4, the last v1 release: its image is built by the release's
# publish-core-images workflow from commit 93c5489 and tagged v1-<sha>
# (../shared/contracts/kubeflow-training-v1.9.4/operator/standalone-kustomization.yaml). The same
# workflow's kubectl-delivery image ships kubectl 1.30.7 (build/images/kubectl-delivery/Dockerfile),
# outside kubectl's skew of our clusters: each environment builds its own (k8s/images/kubectl-delivery).
TRAINING_OPERATOR_RELEASE_TAG = "v1-93c5489"

IMAGES = {
    # ../shared/contracts/nvidia-device-plugin-v0.19.3/nvidia-device-plugin.yml (NVIDIA/k8s-device-plugin v0.19.3).
    "nvidia-device-plugin": "nvcr.io/nvidia/k8s-device-plugin:v0.19.3",
    # The JobSet release Kubeflow Trainer v2.3.0 installs, retagged from the staging registry to the
    # release one: ../shared/contracts/kubeflow-trainer-v2.3.0/third-party-jobset-kustomization.yaml.
    "jobset": "registry.k8s.io/jobset/jobset:v0.12.0",
    # Kueue v0.19.2 (config/queueing.py KUEUE_VERSION). The release manifests name only the staging
    # image (../shared/contracts/kueue-v0.19.2/components-manager-kustomization.yaml); releases are
    # promoted to registry.k8s.io/kueue as <registry>/kueue:<tag> (kubernetes-sigs/kueue v0.19.2
    # Makefile IMAGE_REPO/IMAGE_TAG, hack/releasing/wait_for_images.sh --prod).
    "kueue": "registry.k8s.io/kueue/kueue:v0.19.2",
    # Kubeflow Trainer v2.3.0: the repository from
    # ../shared/contracts/kubeflow-trainer-v2.3.0/base-manager-manager.yaml, the tag from
    # overlays-manager-kustomization.yaml beside it.
    "trainer-controller-manager": "ghcr.io/kubeflow/trainer/trainer-controller-manager:v2.3.0",
    "training-operator": f"ghcr.io/kubeflow/training-v1/training-operator:{TRAINING_OPERATOR_RELEASE_TAG}",
    # etcd 3.5, the last minor with the v2 API torch's etcd rendezvous speaks (3.6 removed it).
    # 3.5.33 (2026-07-23) is the newest 3.5 patch, and its v2 API works for us: etcd-io/etcd#21249
    # ("/v2/keys broken on 3.5.26") was the reporter's own set-up (HTTP moved to a separate port
    # with --listen-client-http-urls, etcdctl pointed at the gRPC-only one; their words in
    # etcd-io/etcd#21250), its routing PR #21240 was closed unmerged, and release-3.5's
    # server/embed/serve.go still routes every HTTP/1.1 request on a plain-HTTP client listener
    # to the HTTP handler that serves /v2 (git log v3.5.25..v3.5.33 -- server/embed/serve.go: only
    # a read-header timeout and CRL checks changed). python-etcd speaks HTTP/1.1 to our plain
    # listener, and v3.5.33's own e2e tests (tests/e2e/v2_curl_test.go TestV2CurlNoTLS,
    # cmux_test.go ServerNonTLS) PUT and GET /v2/keys there. Image: scripts/release.sh pushes
    # quay.io/coreos/etcd:<version> (and gcr.io/etcd-development/etcd).
    "etcd": "quay.io/coreos/etcd:v3.5.33",
    # nvidia-smi comes from the node's container toolkit; the base image only needs a shell.
    # NVIDIA's GPU DRA driver, chart dra-driver-nvidia-gpu 0.4.1 (the release the EKS guide installs:
    # device-management-nvidia-dra-device-plugin): values.yaml image.repository, and the tag
    # "v" + Chart.yaml appVersion 0.4.1 (_helpers.tpl "dra-driver-nvidia-gpu.fullimage"),
    # kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1 deployments/helm/dra-driver-nvidia-gpu/.
    "dra-driver-nvidia-gpu": "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.1",
    "cuda-base": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
    # all_reduce_perf with libfabric, EFA and the aws-ofi-nccl plugin built in.
    "nccl-tests": "public.ecr.aws/hpc-cloud/nccl-tests:cuda12.8.1-efa1.43.2-ofiv1.16.3-ncclv2.27.7-1-testsv2.16.9",
}

# The EFA device plugin as the aws/eks-charts chart v0.5.30 deploys it (its appVersion and
# values.yaml image.tag; ../shared/contracts/aws-efa-k8s-device-plugin-chart-v0.5.30/). v0.5.6,
# pinned before, miscounts devices on newer instance families.
EFA_DEVICE_PLUGIN_TAG = "v0.5.20"
# Amazon EKS add-on images live in a per-region ECR account (EKS guide, "Amazon container image
# registries"). Regions not listed here fail loudly rather than pull from the wrong partition.
EKS_ADDON_REGISTRY_ACCOUNTS = {
    "af-south-1": "877085696533",
    "ap-east-1": "800184023465",
    "ap-northeast-1": "602401143452",
    "ap-northeast-2": "602401143452",
    "ap-northeast-3": "602401143452",
    "ap-south-1": "602401143452",
    "ap-southeast-1": "602401143452",
    "ap-southeast-2": "602401143452",
    "ap-southeast-3": "296578399912",
    "ca-central-1": "602401143452",
    "eu-central-1": "602401143452",
    "eu-north-1": "602401143452",
    "eu-south-1": "590381155156",
    "eu-west-1": "602401143452",
    "eu-west-2": "602401143452",
    "eu-west-3": "602401143452",
    "me-south-1": "558608220178",
    "sa-east-1": "602401143452",
    "us-east-1": "602401143452",
    "us-east-2": "602401143452",
    "us-west-1": "602401143452",
    "us-west-2": "602401143452",
}


# The EFA DRA driver as the aws/eks-charts aws-dranet chart 1.0.0 deploys it (its appVersion and
# values.yaml image.tag; ../shared/contracts/aws-dranet-chart-v1.0.0/), from the same registries.
DRANET_TAG = "v1.2.0-eksbuild.2"


def eks_addon_image(region: str, repository: str, tag: str) -> str:
    """An image of the EKS add-on registry of `region` (eks/<repository>:<tag>)."""
    if region not in EKS_ADDON_REGISTRY_ACCOUNTS:
        raise KeyError(f"no EKS add-on registry account known for region {region}; add it to "
                       "k8s/pods/images.py EKS_ADDON_REGISTRY_ACCOUNTS")
    account = EKS_ADDON_REGISTRY_ACCOUNTS[region]
    return f"{account}.dkr.ecr.{region}.amazonaws.com/eks/{repository}:{tag}"


def efa_device_plugin_image(region: str) -> str:
    return eks_addon_image(region, "aws-efa-k8s-device-plugin", EFA_DEVICE_PLUGIN_TAG)


def dranet_image(region: str) -> str:
    return eks_addon_image(region, "dranet", DRANET_TAG)


# The images an environment builds itself are known only to its stacks. Where no stack gives them
# (dist/ YAML, the validation objects) they are named placeholders `${NAME}`, which `envsubst`,
# `ops validate` or the validation runner fill (k8s/addons ClusterValues names each).
IMAGE_VARIANTS = ("cpu", "gpu")


def image_placeholder(variant: str) -> str:
    return f"TRAINER_IMAGE_{variant.upper()}"


# The MPI launcher's kubectl-delivery image, built per environment (k8s/images/kubectl-delivery).
KUBECTL_DELIVERY_IMAGE = "KUBECTL_DELIVERY_IMAGE"


def placeholder(name: str) -> str:
    """The text that stands for the value of placeholder `name`."""
    return f"${{{name}}}"


# An image reference a user gives (`ops submit --image` and the like), read as the kubelet reads it.
# OCI distribution spec (https://github.com/opencontainers/distribution-spec/blob/main/spec.md,
# "Pulling manifests"): a repository <name> matches
# [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(\/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*, a tag is at most 128
# characters and matches [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}, and many clients limit registry host,
# port, '/' and <name> together to 255 characters. The spec leaves the host out of <name>: container
# runtimes take the first component as the registry when it holds a '.' or a ':' or is localhost.
_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
_IMAGE_REFERENCE = re.compile(
    rf"(?P<name>(?:(?:{_HOST_LABEL}(?:\.{_HOST_LABEL})+(?::[0-9]+)?|{_HOST_LABEL}:[0-9]+|localhost)/)?"
    rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9._-]{0,127}))?(?:@(?P<digest>sha256:[a-f0-9]{64}))?")
MAX_IMAGE_NAME = 255
IMAGE_REFERENCE_FORM = "[REGISTRY[:PORT]/]PATH:TAG or [REGISTRY[:PORT]/]PATH[:TAG]@sha256:DIGEST"


def pinned_image_reference(image: str) -> str:
    """`image` when it is an OCI image reference pinned by a tag other than latest or by a digest;
    otherwise ConfigError("image", why) (the project pins every image, and an image the kubelet
    cannot parse fails every pod with InvalidImageName)."""
    if not isinstance(image, str) or not image:
        raise ConfigError("image", f"is empty: must be an image reference {IMAGE_REFERENCE_FORM}")
    match = _IMAGE_REFERENCE.fullmatch(image)
    if not match or len(match["name"]) > MAX_IMAGE_NAME:
        raise ConfigError("image", f"is not an OCI image reference {IMAGE_REFERENCE_FORM} (PATH: lowercase "
                                   "letters and digits in '/'-separated parts, joined by '.', '_', '__' or '-'; "
                                   "TAG: 1-128 letters, digits, '_', '.' or '-', not starting with '.' or '-'; "
                                   f"registry and path at most {MAX_IMAGE_NAME} characters), got {image!r}")
    if not match["digest"] and match["tag"] in (None, "latest"):
        raise ConfigError("image", f"is not pinned: name a tag other than latest, or a digest "
                                   f"(@sha256:...), got {image!r}")
    return image
