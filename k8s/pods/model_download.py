"""The model-download Job: a Hugging Face repository onto FSx under /fsx/models/NAME.

`ops model download` renders it with `model_download_manifest` and creates it. The Job runs
`python -m trainer.hf_download` from the CPU trainer image on a CPU node group, mounts the FSx
claim, and reads HF_TOKEN from the `hf-token` Secret when it exists (public repositories need none).

Why ops creates the Job rather than `cdk deploy` (no add-on carries it):
- a Job's pod template is immutable, so a Job applied on deploy would make the next deploy with a
  new trainer image fail ("field is immutable"), suspended or not;
- a gated download can only succeed once the token Secret exists, which ops creates after deploy;
- which repository and revision to fetch is the user's choice at run time.
A Job retried after a pod failure resumes (trainer/hf_download.py); an access refusal (exit 2)
fails the Job at once through its pod failure policy instead of retrying.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from config.environment import Environment
from config.errors import ConfigError
from config.kubernetes import HF_TOKEN_KEY, HF_TOKEN_SECRET, LABEL_PREFIX
from config.presets import CLUSTER_MODELS_ROOT
from k8s.pods.fsx_job import fsx_job
from k8s.pods.names import COMPONENT_LABEL, HTTPS_EGRESS_LABEL

COMPONENT = "model-download"
MODEL_LABEL = f"{LABEL_PREFIX}/model"
REPO_ANNOTATION = f"{LABEL_PREFIX}/hf-repo"
REVISION_ANNOTATION = f"{LABEL_PREFIX}/hf-revision"
CONTAINER = "download"
JOB_PREFIX = "model-download-"
# Retries resume where the last pod stopped; five covers node loss and hub hiccups.
BACKOFF_LIMIT = 5
# Downloading is network- and disk-bound: a small share of a CPU node.
CPU, MEMORY = "2", "4Gi"
# huggingface_hub's home (its Xet chunk cache included) on an emptyDir: the root file system is read-only.
HF_HOME = "/tmp/hf-home"
TMP_SIZE = "16Gi"

_REPO = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9._-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
# NAME is the model label's value, so it ends in a letter or digit, and the end of the Job's name
# model-download-<NAME, lowercased, '.' and '_' as '-'>, a DNS label of at most 63 characters, so it
# fits there whole: a longer one, cut, would share its Job with every name of the same beginning.
MAX_NAME = 63 - len(JOB_PREFIX)
_NAME = re.compile(rf"[A-Za-z0-9](?:[A-Za-z0-9._-]{{0,{MAX_NAME - 2}}}[A-Za-z0-9])?")
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$")


@dataclass(frozen=True)
class ModelDownload:
    """One repository to fetch: `name` is its directory under /fsx/models."""

    repo: str
    name: str
    revision: str = "main"

    @classmethod
    def of(cls, repo: str, name: str | None = None, revision: str = "main") -> "ModelDownload":
        """Validated; ConfigError names the field. `name` defaults to the repository's own name."""
        if not isinstance(repo, str) or not _REPO.fullmatch(repo) or ".." in repo:
            raise ConfigError("--repo", f"must be a Hugging Face repository id like owner/name, got {repo!r}")
        name = repo.rsplit("/", 1)[-1] if name is None else name
        if not _NAME.fullmatch(name) or ".." in name:
            raise ConfigError("--name", f"must be 1-{MAX_NAME} letters, digits, '.', '_' or '-' starting and "
                                        f"ending with a letter or digit (a directory under {CLUSTER_MODELS_ROOT}, "
                                        f"and the model's label value), got {name!r}")
        if not _REVISION.fullmatch(revision) or ".." in revision:
            raise ConfigError("--revision", f"must be a branch, tag or commit, got {revision!r}")
        return cls(repo=repo, name=name, revision=revision)

    @property
    def out_dir(self) -> str:
        return f"{CLUSTER_MODELS_ROOT}/{self.name}"

    @property
    def job_name(self) -> str:
        """A DNS label: the Job's name and its pods' job-name label value (at most 63 characters)."""
        return job_name(self.name)


def job_name(model: str) -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", model.lower()).strip("-")
    return (JOB_PREFIX + slug)[:63].rstrip("-")


def download_nodegroup(config: Environment):
    if not config.cpu_nodegroups:
        raise ConfigError(f"environments.{config.name}.cpuNodegroups",
                          "the model-download Job runs on a CPU node group; this environment has none")
    return config.cpu_nodegroups[0]


def model_download_manifest(config: Environment, download: ModelDownload, *, image: str) -> dict:
    """The batch/v1 Job fetching `download` (k8s/pods/fsx_job.py: hardened, FSx and scratch mounted,
    exit 2 fails it at once, strict PodSpec)."""
    if not isinstance(image, str) or not image:
        raise ConfigError("image", "must be a container image reference")
    metadata = {"name": download.job_name,
                # The hub and its CDN, over HTTPS (k8s/pods/network_policy.py).
                "labels": {COMPONENT_LABEL: COMPONENT, MODEL_LABEL: download.name, HTTPS_EGRESS_LABEL: "true"},
                "annotations": {REPO_ANNOTATION: download.repo, REVISION_ANNOTATION: download.revision}}
    return fsx_job(
        config, metadata=metadata, nodegroup=download_nodegroup(config).name, container=CONTAINER, image=image,
        command=["python", "-m", "trainer.hf_download", "--repo", download.repo,
                 "--revision", download.revision, "--out", download.out_dir],
        env=[{"name": "HF_HOME", "value": HF_HOME},
             {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
             # optional: public repositories download without the Secret.
             {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
                 "name": HF_TOKEN_SECRET, "key": HF_TOKEN_KEY, "optional": True}}}],
        cpu=CPU, memory=MEMORY, tmp_size=TMP_SIZE, backoff_limit=BACKOFF_LIMIT)
