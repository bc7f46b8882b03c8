"""`python -m ops model token|download|status|logs`: gated Hugging Face models onto FSx.

token: the `hf-token` Secret from a local environment variable or file. The token is read here
and handed to the Kubernetes client only: it is never printed, logged, or put in a subprocess's
arguments. download: renders the model-download Job (k8s/pods/model_download.py, which says why
ops and not `cdk deploy` creates it) and creates it.
status and logs: like `ops status` and `ops logs` for the training jobs.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from config.kubernetes import HF_TOKEN_KEY, HF_TOKEN_SECRET
from config.paths import PathProblem, read_text
from ops.errors import OpsError
from ops.kube import JOB_NAME_LABEL, api_error_line, job_phase
from ops.kube import api_call as _api

TOKEN_LIMIT_BYTES = 4096  # Hugging Face tokens are tens of characters


def api_client(kubeconfig: str | None, context: str | None, environment: Any = None) -> Any:
    """With `environment`, only a context on its cluster (ops.kube.check_cluster)."""
    from ops import kube

    return kube.api_client(kubeconfig, context, environment=environment)


def _created(fn: Callable[[], Any]) -> bool:
    """True when created, False when it already exists (HTTP 409); the response is dropped
    unread (a Secret's would hold the token)."""
    from kubernetes.client.exceptions import ApiException

    try:
        fn()
        return True
    except ApiException as err:
        if err.status != 409:
            raise OpsError(f"Kubernetes API: {api_error_line(err)}") from None
        return False


# --- token ---------------------------------------------------------------------------------------

def read_token(from_env: str | None, from_file: str | None) -> tuple[str, str]:
    """(token, where it came from). Only where it came from may ever be shown."""
    if from_file is not None:
        source, field = f"file {from_file}", "--from-file"
        try:
            token = read_text(from_file, limit=TOKEN_LIMIT_BYTES, pipes=True).strip()
        except PathProblem as problem:
            raise OpsError(f"--from-file: {problem}") from None
    else:
        source, field = f"environment variable {from_env}", "--from-env"
        token = os.environ.get(from_env, "").strip()
    if not token:
        raise OpsError(f"{field}: the Hugging Face token from {source} is missing or empty; "
                       "create one at https://huggingface.co/settings/tokens")
    if any(c.isspace() for c in token):
        raise OpsError(f"{field}: the Hugging Face token from {source} must be one word without spaces or line breaks")
    try:  # a byte the locale cannot decode arrives as a lone surrogate; the API server stores U+FFFD for it
        token.encode("utf-8")
    except UnicodeEncodeError:
        raise OpsError(f"{field}: the Hugging Face token from {source} is not UTF-8 text") from None
    return token, source


def put_token(core: Any, namespace: str, token: str) -> str:
    """Create the Secret, or replace its token if it exists. Returns "created" or "replaced"."""
    body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": HF_TOKEN_SECRET, "namespace": namespace,
                         "labels": {"app.kubernetes.io/part-of": "eks-distributed-training"}},
            "stringData": {HF_TOKEN_KEY: token}}
    if _created(lambda: core.create_namespaced_secret(namespace, body)):
        return "created"
    _api(lambda: core.replace_namespaced_secret(HF_TOKEN_SECRET, namespace, body))
    return "replaced"


# --- download ------------------------------------------------------------------------------------

def start(batch: Any, manifest: dict) -> str:
    """Create the Job; an existing one for the same repository and name is reported, not duplicated."""
    from config.presets import CLUSTER_MODELS_ROOT
    from k8s.pods.model_download import MODEL_LABEL, REPO_ANNOTATION

    meta = manifest["metadata"]
    name, namespace, repo = meta["name"], meta["namespace"], meta["annotations"][REPO_ANNOTATION]
    if _created(lambda: batch.create_namespaced_job(namespace, manifest)):
        return f"created Job {namespace}/{name}: {repo} -> {_out_dir(manifest)}"
    existing = _api(lambda: batch.read_namespaced_job(name, namespace))
    theirs = (existing.metadata.annotations or {}).get(REPO_ANNOTATION)
    # Names that differ only in case or in '.', '_' against '-' are two directories but one Job.
    their_model = (existing.metadata.labels or {}).get(MODEL_LABEL)
    if (theirs, their_model) != (repo, meta["labels"][MODEL_LABEL]):
        raise OpsError(f"Job {namespace}/{name} already downloads {theirs} into {CLUSTER_MODELS_ROOT}/{their_model}; "
                       "choose another --name")
    phase, message = job_phase(existing)
    if phase == "Failed":
        raise OpsError(f"Job {namespace}/{name} failed ({message}); delete it (`kubectl -n {namespace} delete job "
                       f"{name}`) and download again: it resumes from what is on FSx")
    return f"Job {namespace}/{name} already exists and is {phase}"


def _out_dir(manifest: dict) -> str:
    command = manifest["spec"]["template"]["spec"]["containers"][0]["command"]
    return command[command.index("--out") + 1]


# --- status and logs -----------------------------------------------------------------------------

def status(batch: Any, namespace: str, model: str | None) -> list[tuple[str, ...]]:
    from k8s.pods.model_download import COMPONENT, COMPONENT_LABEL, MODEL_LABEL, REPO_ANNOTATION

    jobs = [_api(lambda: batch.read_namespaced_job(_job(model), namespace))] if model else \
        _api(lambda: batch.list_namespaced_job(namespace, label_selector=f"{COMPONENT_LABEL}={COMPONENT}")).items
    rows = []
    for job in jobs:
        phase, message = job_phase(job)
        started = job.status.start_time if job.status else None
        rows.append(((job.metadata.labels or {}).get(MODEL_LABEL, job.metadata.name),
                     (job.metadata.annotations or {}).get(REPO_ANNOTATION, "-"), phase,
                     str(started) if started else "-", message))
    return rows


def render_status(rows: list[tuple[str, ...]]) -> str:
    if not rows:
        return "no model-download Jobs"
    header = ("MODEL", "REPO", "PHASE", "STARTED", "MESSAGE")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    return "\n".join("  ".join(f"{cell:<{w}}" for cell, w in zip(r[:4], widths)) + f"  {r[4]}"
                     for r in [header, *rows]).rstrip()


def logs(core: Any, namespace: str, model: str, follow: bool = False, echo: Callable[[str], None] = print) -> None:
    """The newest pod's log (each retry is a new pod); with follow, line by line as it is written."""
    from k8s.pods.model_download import CONTAINER
    from ops.kube import follow_log

    job = _job(model)
    pods = _api(lambda: core.list_namespaced_pod(namespace, label_selector=f"{JOB_NAME_LABEL}={job}")).items
    if not pods:
        raise OpsError(f"Job {job} has no pod (yet); see `python -m ops model status {model}`")
    pod = max(pods, key=lambda p: str(p.metadata.creation_timestamp or ""))
    if pod.status is not None and pod.status.phase == "Pending":
        raise OpsError(f"pod {pod.metadata.name} is Pending; its log starts when it runs")
    if follow:
        follow_log(core, pod.metadata.name, namespace, CONTAINER, echo,
                   again=f"`python -m ops model logs {model} -f`", prefix=False)
        return
    text = _api(lambda: core.read_namespaced_pod_log(pod.metadata.name, namespace, container=CONTAINER))
    for line in text.splitlines():
        echo(line)


def _job(model: str) -> str:
    from k8s.pods.model_download import JOB_PREFIX, job_name

    return model if model.startswith(JOB_PREFIX) else job_name(model)
