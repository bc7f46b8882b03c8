"""Copy a trainer image from the CDK assets repository into the app's own ECR repository.

`cdk deploy` pushes Docker image assets to the bootstrap's container-assets repository, which
neither scans on push nor keeps tags immutable. This handler, behind the Registry stack's
`Custom::TrainerImageCopy` resources, copies the linux/amd64 image there into the trainer
repository (scan on push, immutable tags, KMS) under the same tag, and answers the digest.

With immutable tags a tag is pushed once: a tag that is already there (a rollback, a redeploy of
a kept repository) is the image built from the same source, so the handler answers its digest
instead of pushing again and failing. Blobs already in the destination are not copied again, so
a deploy that ran out of time continues where the last one stopped.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import boto3
from botocore.exceptions import ClientError

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST_TYPES = [DOCKER_MANIFEST, OCI_MANIFEST, DOCKER_MANIFEST_LIST, OCI_INDEX]
INDEX_TYPES = (DOCKER_MANIFEST_LIST, OCI_INDEX)
PLATFORM = {"os": "linux", "architecture": "amd64"}
DEFAULT_PART_BYTES = 10 * 1024 * 1024
COPY_THREADS = 4
# Kept back from the Lambda's own time to reply to CloudFormation.
REPLY_SECONDS = 60
DOWNLOAD_TIMEOUT_S = 60


class CopyFailed(Exception):
    """The image could not be copied; the message says why."""


def _manifest(ecr, repository: str, image_id: dict) -> tuple[str, str, str] | None:
    """(manifest, media type, digest) of an image, or None when the repository has no such image."""
    found = ecr.batch_get_image(repositoryName=repository, imageIds=[image_id], acceptedMediaTypes=MANIFEST_TYPES)
    if not found.get("images"):
        return None
    image = found["images"][0]
    manifest = image["imageManifest"]
    media_type = image.get("imageManifestMediaType") or json.loads(manifest).get("mediaType", DOCKER_MANIFEST)
    return manifest, media_type, image["imageId"]["imageDigest"]


def platform_manifest(ecr, repository: str, tag: str) -> tuple[str, str, str]:
    """The linux/amd64 image of `repository:tag`, out of its image index when it has one (an index
    also lists build attestations, which pods never pull)."""
    found = _manifest(ecr, repository, {"imageTag": tag})
    if found is None:
        raise CopyFailed(f"no image {repository}:{tag} to copy (was the asset published?)")
    manifest, media_type, _ = found
    if media_type not in INDEX_TYPES:
        return found
    entries = [m for m in json.loads(manifest).get("manifests", [])
               if {k: m.get("platform", {}).get(k) for k in PLATFORM} == PLATFORM]
    if not entries:
        raise CopyFailed(f"{repository}:{tag} is an image index without a linux/amd64 image")
    child = _manifest(ecr, repository, {"imageDigest": entries[0]["digest"]})
    if child is None:
        raise CopyFailed(f"{repository}:{tag} lists {entries[0]['digest']}, which the repository does not hold")
    return child


def blob_digests(manifest: str) -> list[str]:
    """The config and layer blobs an image manifest names."""
    parsed = json.loads(manifest)
    return [parsed["config"]["digest"], *(layer["digest"] for layer in parsed.get("layers", []))]


def missing_blobs(ecr, repository: str, digests: list[str]) -> list[str]:
    missing = []
    for start in range(0, len(digests), 100):  # BatchCheckLayerAvailability takes up to 100 digests
        batch = digests[start:start + 100]
        found = ecr.batch_check_layer_availability(repositoryName=repository, layerDigests=batch)
        available = {layer["layerDigest"] for layer in found.get("layers", [])
                     if layer.get("layerAvailability") == "AVAILABLE"}
        missing += [d for d in batch if d not in available]
    return missing


def copy_blob(ecr, source: str, destination: str, digest: str, deadline: float) -> int:
    """Stream one blob from the source repository's download URL into an upload to the
    destination, checking its digest on the way; the number of bytes copied."""
    url = ecr.get_download_url_for_layer(repositoryName=source, layerDigest=digest)["downloadUrl"]
    upload = ecr.initiate_layer_upload(repositoryName=destination)
    part_bytes = upload.get("partSize") or DEFAULT_PART_BYTES
    sha256, first = hashlib.sha256(), 0
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
        while True:
            if time.monotonic() > deadline:
                raise CopyFailed(f"out of time while copying blob {digest}")
            part = response.read(part_bytes)
            if not part:
                break
            while len(part) < part_bytes:  # read() may return less than asked before the end
                more = response.read(part_bytes - len(part))
                if not more:
                    break
                part += more
            sha256.update(part)
            ecr.upload_layer_part(repositoryName=destination, uploadId=upload["uploadId"], partFirstByte=first,
                                  partLastByte=first + len(part) - 1, layerPartBlob=part)
            first += len(part)
    if f"sha256:{sha256.hexdigest()}" != digest:
        raise CopyFailed(f"blob {digest} downloaded with digest sha256:{sha256.hexdigest()}")
    ecr.complete_layer_upload(repositoryName=destination, uploadId=upload["uploadId"], layerDigests=[digest])
    return first


def copy_image(ecr, source: str, destination: str, tag: str, deadline: float) -> str:
    """Copy `source:tag` (linux/amd64) to `destination:tag` and return the destination digest."""
    existing = _manifest(ecr, destination, {"imageTag": tag})
    if existing is not None:
        print(f"{destination}:{tag} exists ({existing[2]}); immutable tags are pushed once, nothing to copy")
        return existing[2]
    manifest, media_type, digest = platform_manifest(ecr, source, tag)
    missing = missing_blobs(ecr, destination, blob_digests(manifest))
    copied, lock = [0], threading.Lock()

    def one(blob: str) -> None:
        size = copy_blob(ecr, source, destination, blob, deadline)
        with lock:
            copied[0] += size

    with ThreadPoolExecutor(max_workers=COPY_THREADS) as pool:
        for future in [pool.submit(one, blob) for blob in missing]:
            future.result()
    try:
        pushed = ecr.put_image(repositoryName=destination, imageManifest=manifest,
                               imageManifestMediaType=media_type, imageTag=tag)
        digest = pushed["image"]["imageId"]["imageDigest"]
    except ClientError as err:
        if err.response["Error"]["Code"] != "ImageAlreadyExistsException":
            raise
    print(f"copied {source}:{tag} to {destination}:{tag} ({digest}): {len(missing)} blob(s), {copied[0]} bytes")
    return digest


def handler(event, context):
    from cfn_response import send

    props = event["ResourceProperties"]
    physical_id = event.get("PhysicalResourceId") or f"{props['DestinationRepository']}:{props['Tag']}"
    if event["RequestType"] == "Delete":
        # The image stays: a running job may still pull it; the repository's lifecycle expires it.
        send(event, "SUCCESS", "images are kept", physical_id)
        return
    physical_id = f"{props['DestinationRepository']}:{props['Tag']}"
    deadline = time.monotonic() + max(context.get_remaining_time_in_millis() / 1000 - REPLY_SECONDS, 0)
    try:
        ecr = boto3.client("ecr", region_name=os.environ.get("AWS_REGION"))
        digest = copy_image(ecr, props["SourceRepository"], props["DestinationRepository"], props["Tag"], deadline)
    except Exception as err:  # noqa: BLE001 - reported to CloudFormation, never raised
        reason = f"{type(err).__name__}: {err}"
        if isinstance(err, CopyFailed) and "out of time" in str(err):
            reason += "; the blobs copied so far stay: deploy again to continue"
        print(reason)
        send(event, "FAILED", reason, physical_id)
        return
    send(event, "SUCCESS", f"{props['DestinationRepository']}:{props['Tag']} is {digest}", physical_id,
         data={"ImageDigest": digest})
