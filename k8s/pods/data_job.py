"""The data-preparation Job of one data source: copy its S3 prefix to FSx, then prepare it.

Pure Python (no cdk8s), like every builder in k8s/pods: `ops data` renders this dict and creates it, and the
chart tests validate the same dict. The Job is not part of a deployed chart: a Job's pod template
is immutable and a finished Job never runs again, so a Job applied on every `cdk deploy` would
fail the deploy whenever the trainer image changes, and would still need deleting before each
run. `ops data` creates a fresh one per run (generateName data-NAME-) instead; what the cluster
keeps is the ServiceAccount its Pod Identity role is bound to (k8s/addons/data_preparation.py).

One container runs the steps in order under `sh -e`: `trainer.s3sync` (skipped when FSx links
the prefix), then `trainer.data imagenet` or `trainer.data prepare` as the source asks. Both
steps resume, so a retried pod (backoffLimit) continues where the last one stopped.
"""

from __future__ import annotations

import shlex

from config.data_sources import DataSource
from config.environment import Environment
from config.kubernetes import LABEL_PREFIX
from k8s.pods.fsx_job import fsx_job
from k8s.pods.names import HTTPS_EGRESS_LABEL, POD_IDENTITY_LABEL
from k8s.pods.resources import node_share

DATA_SOURCE_LABEL = f"{LABEL_PREFIX}/data-source"
CONTAINER = "data"
BACKOFF_LIMIT = 3
# Finished Jobs (and their pods' logs) stay a week for `ops data` and kubectl to read.
TTL_AFTER_FINISHED_S = 7 * 24 * 3600
TMP_SIZE = "2Gi"


def steps(config: Environment, source: DataSource) -> list[list[str]]:
    """The commands the Job runs, in order."""
    commands = []
    if source.copies:
        commands.append(["python", "-m", "trainer.s3sync", "--src", source.s3_uri, "--dest", source.raw_path,
                         "--region", config.region, "--workers", str(source.workers)])
    if source.prepare == "imagenet":
        commands.append(["python", "-m", "trainer.data", "imagenet", "--src", source.raw_path,
                         "--out", source.fsx_path])
    elif source.prepare == "tokens":
        commands.append(["python", "-m", "trainer.data", "prepare", "--tokenizer", source.tokenizer,
                         "--input", source.raw_path, "--output", source.fsx_path,
                         "--text-field", source.text_field, "--skip-if-prepared"])
    return commands


def data_job_manifest(config: Environment, source: DataSource, *, image: str) -> dict:
    """The Job for `source` (k8s/pods/fsx_job.py: hardened, FSx and scratch mounted, strict PodSpec)."""
    cpu, memory = node_share(config.nodegroup(source.nodegroup).instance_type)
    where = (f"copy {source.s3_uri} to {source.raw_path}" if source.copies
             else f"read {source.raw_path} (FSx shows {source.s3_uri})")
    commands = steps(config, source)
    # The last step replaces the shell (exec): the kubelet's SIGTERM goes to the container's first
    # process, and sh, PID 1 there, neither forwards it nor dies of it, so the step went on until the
    # SIGKILL at the end of the grace period instead of removing its staging folder (trainer.prepare).
    script = "\n".join(shlex.join(command) for command in [*commands[:-1], ["exec", *commands[-1]]])
    metadata = {
        "generateName": f"data-{source.name}-",
        # Copying reaches S3 over HTTPS with the Pod Identity agent's credentials (k8s/pods/network_policy.py);
        # preparing alone reads and writes FSx only, so it reaches nothing.
        "labels": {DATA_SOURCE_LABEL: source.name,
                   **({HTTPS_EGRESS_LABEL: "true", POD_IDENTITY_LABEL: "true"} if source.copies else {})},
        "annotations": {f"{LABEL_PREFIX}/description": f"{where}, prepare {source.prepare} into {source.fsx_path}"},
    }
    return fsx_job(
        config, metadata=metadata, nodegroup=source.nodegroup, container=CONTAINER, image=image,
        command=["sh", "-ec", script],
        # Caches (tokenizers, matplotlib) go to the writable scratch volume.
        env=[{"name": "HOME", "value": "/tmp"}],
        cpu=cpu, memory=memory, tmp_size=TMP_SIZE, backoff_limit=BACKOFF_LIMIT,
        ttl_after_finished_s=TTL_AFTER_FINISHED_S,
        # The Pod Identity role's ServiceAccount. The Job makes no Kubernetes API calls, so it mounts
        # no API token; Pod Identity's token is a separate projected volume (k8s/pods/fsx_job.py).
        service_account=source.service_account if source.copies else None)
