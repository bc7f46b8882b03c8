"""PyTorchJobs through the Kubeflow Training Operator's own SDK (kubeflow-training).

The manifest comes from the k8s chart code, so `submit` creates exactly what the chart renders;
this module only turns it into the SDK's model and calls TrainingClient.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from config.kubernetes import TRAINING_NAMESPACE
from ops.errors import OpsError
from trainer.nccl_net import CHECK_FAILED, CHECK_PASSED

PYTORCHJOB_MODEL = "KubeflowOrgV1PyTorchJob"
# Condition types the operator sets on a job.
_PHASES = ("Created", "Running", "Restarting", "Suspended", "Succeeded", "Failed")


def training_client(kubeconfig: str | None = None, context: str | None = None,
                    namespace: str = TRAINING_NAMESPACE) -> Any:
    from kubeflow.training import TrainingClient
    from kubernetes.config.config_exception import ConfigException

    try:
        return TrainingClient(config_file=kubeconfig, context=context, namespace=namespace)
    except (ConfigException, FileNotFoundError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise OpsError(f"no usable kubeconfig ({first}); run `python -m ops kubeconfig --env NAME` first") from None


def to_model(manifest: dict) -> Any:
    """The SDK model for a rendered manifest: create_job accepts only its own model classes."""
    from kubeflow.training import ApiClient

    class _Response:  # what ApiClient.deserialize reads: a .data JSON string
        data = json.dumps(manifest)

    return ApiClient().deserialize(_Response(), PYTORCHJOB_MODEL)


def _check_lossless(manifest: dict, job: Any) -> None:
    """The SDK's models silently drop fields they do not know; refuse rather than create a job
    that differs from what the chart rendered."""
    from kubernetes.client import ApiClient

    if ApiClient().sanitize_for_serialization(job) != manifest:
        raise OpsError("the kubeflow-training SDK model would drop fields of the rendered PyTorchJob; "
                       "check `submit --dry-run` against the SDK version")


def render(env: Any, preset: str, *, image: str, job_name: str | None, overrides: dict | None) -> dict:
    """The chart's PyTorchJob for `preset` with the `--set` overrides applied. Its pod template is
    validated against the PodSpec schema of the environment's Kubernetes version (k8s/podspec.py),
    unknown fields rejected: the operator would drop them silently. A failure is a ConfigError."""
    from k8s.jobs import render_pytorchjob

    return render_pytorchjob(env, preset, image=image, job_name=job_name, overrides=overrides)


def submit(client: Any, manifest: dict) -> str:
    job = to_model(manifest)
    _check_lossless(manifest, job)
    namespace = job.metadata.namespace or client.namespace
    _call(lambda: client.create_job(job=job, namespace=namespace))
    return f"{namespace}/{job.metadata.name}"


@dataclass(frozen=True)
class JobStatus:
    name: str
    phase: str
    message: str
    created: str


def phase_of(job: Any) -> tuple[str, str]:
    conditions = [c for c in ((job.status.conditions if job.status else None) or [])
                  if c.status == "True" and c.type in _PHASES]
    if not conditions:
        return "Pending", ""
    # A finished job keeps its Running condition True beside Succeeded/Failed; the end state wins,
    # otherwise the operator appends conditions in order and the last one is current.
    ended = [c for c in conditions if c.type in ("Succeeded", "Failed")]
    latest = (ended or conditions)[-1]
    return latest.type, " ".join((latest.message or "").split())


def status(client: Any, name: str | None = None, namespace: str | None = None) -> list[JobStatus]:
    jobs = [_call(lambda: client.get_job(name, namespace=namespace))] if name else \
        _call(lambda: client.list_jobs(namespace=namespace))
    rows = []
    for job in jobs:
        phase, message = phase_of(job)
        created = job.metadata.creation_timestamp
        rows.append(JobStatus(job.metadata.name, phase, message, str(created) if created else "-"))
    return rows


def render_status(rows: list[JobStatus]) -> str:
    if not rows:
        return "no PyTorchJobs"
    width = max(4, *(len(r.name) for r in rows))
    lines = [f"{'NAME':<{width}}  {'PHASE':<10}  {'CREATED':<25}  MESSAGE"]
    lines += [f"{r.name:<{width}}  {r.phase:<10}  {r.created:<25}  {r.message}" for r in rows]
    return "\n".join(lines)


def logs(client: Any, name: str, namespace: str | None = None, follow: bool = False,
         echo: Callable[[str], None] = print) -> None:
    """Worker 0's log (rank 0 logs the metrics). Our PyTorchJobs have only Worker replicas, and
    the operator marks no pod of those as master. With follow the SDK streams each line."""
    leader = {"replica_type": "worker", "replica_index": 0}
    pods = _call(lambda: client.get_job_pods(name, namespace=namespace, is_master=False, **leader))
    if not pods:
        raise OpsError(f"job {name} has no worker 0 pod (yet); see `python -m ops status {name}`")
    if all(p.status is not None and p.status.phase == "Pending" for p in pods):
        raise OpsError(f"worker pod {pods[0].metadata.name} is Pending; its log starts when it runs")
    found, _ = _call(lambda: client.get_job_logs(name, namespace=namespace, is_master=False, follow=follow,
                                                 **leader))
    if not follow:
        lines = [f"[{pod}] {line}" for pod, text in found.items() for line in text.splitlines()]
        # The trainer's EFA verdict (trainer/nccl_net.py) comes first: it explains whatever follows.
        for line in lines:
            if CHECK_FAILED in line or CHECK_PASSED in line:
                echo(f"==> {line}")
        for line in lines:
            echo(line)


def delete(client: Any, name: str, namespace: str | None = None) -> None:
    _call(lambda: client.delete_job(name, namespace=namespace))


def _call(fn: Callable[[], Any]) -> Any:
    """SDK failures arrive as RuntimeError wrapping the API error's multi-line text; keep one line."""
    try:
        return fn()
    except (RuntimeError, TimeoutError) as err:
        raise OpsError(_one_line(err)) from None


def _one_line(err: Exception) -> str:
    cause = err.__cause__
    status_code = getattr(cause, "status", None)
    if status_code is not None:
        message = getattr(cause, "reason", "") or ""
        body = getattr(cause, "body", None)
        try:
            message = json.loads(body).get("message", message) if body else message
        except (ValueError, AttributeError):
            pass
        head = str(err).split(". Error:", 1)[0]
        return f"{head}: HTTP {status_code} {' '.join(str(message).split())}"
    return " ".join(str(err).split())[:300]
