"""The image references a user may hand a pod (k8s/pods/images.py pinned_image_reference): OCI
references pinned by tag or digest, or one line saying why not."""

from __future__ import annotations

import pytest

from config import ConfigError
from k8s.pods.images import IMAGES, dranet_image, efa_device_plugin_image, pinned_image_reference

DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize("image", [
    *IMAGES.values(), efa_device_plugin_image("us-west-2"), dranet_image("eu-south-1"),
    # what the Registry stack publishes (stacks/registry.py): by tag, and by tag and digest
    "111111111111.dkr.ecr.us-west-2.amazonaws.com/cdk-hnb659fds-container-assets-111111111111-us-west-2:abc123",
    f"111111111111.dkr.ecr.us-west-2.amazonaws.com/trainer:abc123@{DIGEST}",
    "img:1", "registry/trainer:2", "localhost/trainer:1", "localhost:5000/team/trainer:v1",
    "Registry.Example:443/a/b__c/d---e.f_g:V1.2_x-", f"trainer@{DIGEST}", f"trainer:latest@{DIGEST}",
    "a:" + "t" * 128, "t:_t",
])
def test_a_pinned_oci_reference_is_taken_as_it_is(image):
    assert pinned_image_reference(image) == image


@pytest.mark.parametrize("image, why", [
    ("", "is empty"),
    ("a b:1", "not an OCI image reference"),
    ("UPPER:1", "not an OCI image reference"),
    ("registry/Trainer:1", "not an OCI image reference"),
    ("img:1\n", "not an OCI image reference"),
    ("img:1\nx", "not an OCI image reference"),
    (" img:1", "not an OCI image reference"),
    ("img:-1", "not an OCI image reference"),
    ("img:.1", "not an OCI image reference"),
    ("img:" + "t" * 129, "not an OCI image reference"),
    ("a_-b:1", "not an OCI image reference"),
    ("a___b:1", "not an OCI image reference"),
    ("a-:1", "not an OCI image reference"),
    ("a//b:1", "not an OCI image reference"),
    ("/a:1", "not an OCI image reference"),
    ("a/:1", "not an OCI image reference"),
    ("host:port/a:1", "not an OCI image reference"),
    ("-host.example/a:1", "not an OCI image reference"),
    ("a@sha256:" + "0" * 63, "not an OCI image reference"),
    ("a@sha256:" + "A" * 64, "not an OCI image reference"),
    ("a@md5:" + "0" * 32, "not an OCI image reference"),
    ("registry.example/" + "a" * 240 + ":1", "not an OCI image reference"),
    ("registry.example/trainer", "not pinned"),
    ("trainer", "not pinned"),
    ("localhost:5000/trainer", "not pinned"),
    ("registry.example/trainer:latest", "not pinned"),
])
def test_anything_else_is_refused_in_one_line_saying_why(image, why):
    with pytest.raises(ConfigError) as err:
        pinned_image_reference(image)
    assert err.value.path == "image" and why in err.value.message
    assert "\n" not in str(err.value) and repr(image)[1:-1] in err.value.message
