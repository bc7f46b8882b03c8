"""The trainer-image copy Lambda, run against a moto server on loopback (ECR), a loopback HTTP
server standing in for the layers' pre-signed S3 download URLs, and one for CloudFormation's
response URL. moto answers every ECR call the handler makes except GetDownloadUrlForLayer; a
botocore before-call hook answers that one with the blob server's URL."""

from __future__ import annotations

import hashlib
import json
import time

import boto3
import pytest
from botocore.awsrequest import AWSResponse

import copy_image
from cfn_events import Context, event
from tests.ops.ops_fakes import loopback_get_server

SOURCE, DESTINATION, TAG = "cdk-hnb659fds-container-assets-123456789012-us-west-2", "trainer", "0123abcd"


@pytest.fixture
def blobs():
    """Blob bytes by digest, served over HTTP; `served` records every download."""
    store: dict[str, bytes] = {}
    served: list[str] = []

    def respond(path: str) -> bytes:
        digest = path.rsplit("/", 1)[-1]
        served.append(digest)
        return store[digest]

    with loopback_get_server(respond) as url:
        yield f"{url}/blobs", store, served


@pytest.fixture
def ecr(endpoint, blobs, monkeypatch):
    base, _, _ = blobs
    client = boto3.client("ecr")

    def download_url(params, **kwargs):  # what ECR answers: a pre-signed URL for the blob
        digest = json.loads(params["body"])["layerDigest"]
        return AWSResponse(base, 200, {}, None), {"downloadUrl": f"{base}/{digest}", "layerDigest": digest}

    client.meta.events.register("before-call.ecr.GetDownloadUrlForLayer", download_url)
    for name, mutability in ((SOURCE, "MUTABLE"), (DESTINATION, "IMMUTABLE")):
        try:
            client.delete_repository(repositoryName=name, force=True)
        except client.exceptions.RepositoryNotFoundException:
            pass
        client.create_repository(repositoryName=name, imageTagMutability=mutability)
    monkeypatch.setattr(copy_image.boto3, "client", lambda *a, **k: client)
    return client


def sha(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def image(store: dict, *layers: bytes) -> str:
    """A Docker v2 image manifest whose config and layers the blob server holds."""
    config = json.dumps({"architecture": "amd64", "os": "linux", "layers": len(layers)}).encode()
    for blob in (config, *layers):
        store[sha(blob)] = blob
    return json.dumps({
        "schemaVersion": 2, "mediaType": copy_image.DOCKER_MANIFEST,
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": len(config),
                   "digest": sha(config)},
        "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": len(layer),
                    "digest": sha(layer)} for layer in layers]})


def test_copies_the_image_under_its_tag_with_every_blob(ecr, blobs):
    _, store, served = blobs
    layers = (b"layer one" * 1000, b"layer two")
    manifest = image(store, *layers)
    ecr.put_image(repositoryName=SOURCE, imageManifest=manifest, imageTag=TAG)
    digest = copy_image.copy_image(ecr, SOURCE, DESTINATION, TAG, time.monotonic() + 60)
    [copied] = ecr.batch_get_image(repositoryName=DESTINATION, imageIds=[{"imageTag": TAG}])["images"]
    assert copied["imageManifest"] == manifest and copied["imageId"]["imageDigest"] == digest
    assert sorted(served) == sorted(store)
    found = ecr.batch_check_layer_availability(repositoryName=DESTINATION, layerDigests=list(store))
    assert {layer["layerDigest"] for layer in found["layers"]} == set(store)


def test_an_existing_tag_is_answered_not_pushed_again(ecr, blobs):
    """Immutable tags are pushed once; a rollback or a redeploy of a kept repository names a tag
    that is there already (the ECR push of an existing immutable tag fails)."""
    _, store, served = blobs
    manifest = image(store, b"layer")
    ecr.put_image(repositoryName=SOURCE, imageManifest=manifest, imageTag=TAG)
    first = copy_image.copy_image(ecr, SOURCE, DESTINATION, TAG, time.monotonic() + 60)
    served.clear()
    assert copy_image.copy_image(ecr, SOURCE, DESTINATION, TAG, time.monotonic() + 60) == first
    assert served == []


def test_only_blobs_missing_from_the_destination_are_copied(ecr, blobs):
    """A deploy that ran out of time left some blobs behind; the next one copies only the rest."""
    _, store, served = blobs
    shared, new = b"base layer", b"app layer"
    ecr.put_image(repositoryName=SOURCE, imageManifest=image(store, shared), imageTag="old")
    copy_image.copy_image(ecr, SOURCE, DESTINATION, "old", time.monotonic() + 60)
    served.clear()
    ecr.put_image(repositoryName=SOURCE, imageManifest=image(store, shared, new), imageTag=TAG)
    copy_image.copy_image(ecr, SOURCE, DESTINATION, TAG, time.monotonic() + 60)
    assert sha(shared) not in served and sha(new) in served


def test_from_an_image_index_only_the_linux_amd64_image_is_copied(ecr, blobs):
    _, store, _ = blobs
    manifest = image(store, b"amd64 layer")
    ecr.put_image(repositoryName=SOURCE, imageManifest=manifest, imageTag="amd64", imageDigest=sha(manifest.encode()))
    index = json.dumps({"schemaVersion": 2, "mediaType": copy_image.OCI_INDEX, "manifests": [
        {"mediaType": copy_image.DOCKER_MANIFEST, "digest": sha(manifest.encode()), "size": len(manifest),
         "platform": {"architecture": "amd64", "os": "linux"}},
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + "a" * 64, "size": 1,
         "platform": {"architecture": "unknown", "os": "unknown"},
         "annotations": {"vnd.docker.reference.type": "attestation-manifest"}}]})
    ecr.put_image(repositoryName=SOURCE, imageManifest=index, imageTag=TAG)
    copy_image.copy_image(ecr, SOURCE, DESTINATION, TAG, time.monotonic() + 60)
    [copied] = ecr.batch_get_image(repositoryName=DESTINATION, imageIds=[{"imageTag": TAG}])["images"]
    assert copied["imageManifest"] == manifest


def test_a_blob_that_does_not_match_its_digest_is_never_pushed(ecr, blobs):
    _, store, _ = blobs
    manifest = image(store, b"good layer")
    store[sha(b"good layer")] = b"tampered layer"
    ecr.put_image(repositoryName=SOURCE, imageManifest=manifest, imageTag=TAG)
    with pytest.raises(copy_image.CopyFailed, match=f"blob {sha(b'good layer')} downloaded with digest "):
        copy_image.copy_image(ecr, SOURCE, DESTINATION, TAG, time.monotonic() + 60)
    assert ecr.batch_get_image(repositoryName=DESTINATION, imageIds=[{"imageTag": TAG}])["images"] == []


def test_the_handler_answers_the_digest_on_create_and_fails_with_a_reason(ecr, blobs, cloudformation):
    _, store, _ = blobs
    url, replies = cloudformation
    props = {"SourceRepository": SOURCE, "DestinationRepository": DESTINATION, "Tag": TAG}
    copy_image.handler(event(url, "Create", **props), Context())  # nothing published under TAG yet
    assert replies[0]["Status"] == "FAILED"
    assert replies[0]["Reason"] == f"CopyFailed: no image {SOURCE}:{TAG} to copy (was the asset published?)"
    ecr.put_image(repositoryName=SOURCE, imageManifest=image(store, b"layer"), imageTag=TAG)
    copy_image.handler(event(url, "Create", **props), Context())
    [digest] = ecr.batch_get_image(repositoryName=DESTINATION, imageIds=[{"imageTag": TAG}])["images"]
    assert replies[1]["Status"] == "SUCCESS" and replies[1]["PhysicalResourceId"] == f"{DESTINATION}:{TAG}"
    assert replies[1]["Data"] == {"ImageDigest": digest["imageId"]["imageDigest"]}


def test_a_copy_out_of_time_fails_the_deploy_and_says_to_deploy_again(ecr, blobs, cloudformation):
    _, store, served = blobs
    url, replies = cloudformation
    ecr.put_image(repositoryName=SOURCE, imageManifest=image(store, b"layer"), imageTag=TAG)
    props = {"SourceRepository": SOURCE, "DestinationRepository": DESTINATION, "Tag": TAG}
    copy_image.handler(event(url, "Update", **props), Context(remaining_ms=30_000))  # under the reply reserve
    [reply] = replies
    assert reply["Status"] == "FAILED" and reply["Reason"].endswith(
        "the blobs copied so far stay: deploy again to continue")
    assert "out of time" in reply["Reason"]


def test_delete_keeps_the_image(ecr, blobs, cloudformation):
    _, store, _ = blobs
    url, replies = cloudformation
    ecr.put_image(repositoryName=DESTINATION, imageManifest=image(store, b"layer"), imageTag=TAG)
    copy_image.handler(event(url, "Delete", SourceRepository=SOURCE, DestinationRepository=DESTINATION, Tag=TAG),
                       Context())
    assert replies[0]["Status"] == "SUCCESS"
    assert len(ecr.batch_get_image(repositoryName=DESTINATION, imageIds=[{"imageTag": TAG}])["images"]) == 1
