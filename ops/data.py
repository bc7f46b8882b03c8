"""`ops data`: start a data source's preparation Job and follow it to the end.

The Job comes from k8s/pods/data_job.py (one fresh Job per run; that module says why). Following
means: print each phase change of the Job, stream every pod's log as it runs (a retried pod's too),
and end with the Job: 0 when it completed, 1 when it failed.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from config.kubernetes import TRAINING_NAMESPACE
from ops.errors import OpsError
from ops.kube import JOB_NAME_LABEL, api_call, follow_log, job_phase

POLL_SECONDS = 5.0


def source(env: Any, source_name: str) -> Any:
    """The environment's data source of that name, or one line listing its sources."""
    try:
        return env.data_source(source_name)
    except KeyError:
        known = ", ".join(s.name for s in env.data_sources) or "none (add dataSources to the environment)"
        raise OpsError(f"--source: {source_name!r} is not a data source of {env.name}; its sources: {known}") from None


def render(env: Any, source_name: str, *, image: str) -> dict:
    from k8s.pods.data_job import data_job_manifest

    chosen = source(env, source_name)
    if not image:
        raise OpsError("--image: must be a container image reference")
    return data_job_manifest(env, chosen, image=image)


def start(api: Any, manifest: dict) -> str:
    """Create the Job unless one for the same source is still running; returns its name."""
    from kubernetes import client
    from k8s.pods.data_job import DATA_SOURCE_LABEL

    batch = client.BatchV1Api(api)
    namespace = manifest["metadata"]["namespace"]
    source = manifest["metadata"]["labels"][DATA_SOURCE_LABEL]
    jobs = api_call(lambda: batch.list_namespaced_job(namespace, label_selector=f"{DATA_SOURCE_LABEL}={source}"))
    running = [j.metadata.name for j in jobs.items if job_phase(j)[0] in ("Pending", "Running")]
    if running:
        raise OpsError(f"data Job {running[0]} for source {source} is still running; two copies into one folder "
                       f"would race (wait for it, or `kubectl -n {namespace} delete job {running[0]}`)")
    created = api_call(lambda: batch.create_namespaced_job(namespace, manifest))
    return created.metadata.name


def follow(api: Any, name: str, namespace: str = TRAINING_NAMESPACE, *, echo: Callable[[str], None] = print,
           poll_seconds: float = POLL_SECONDS, sleep: Callable[[float], None] = time.sleep) -> int:
    """Stream the Job's pods' logs and phase changes until it ends; 0 complete, 1 failed."""
    from kubernetes import client

    from k8s.pods.data_job import CONTAINER

    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    streamed: set[str] = set()
    last = None
    while True:
        job = api_call(lambda: batch.read_namespaced_job(name, namespace))
        current, message = job_phase(job)
        pods = api_call(lambda: core.list_namespaced_pod(namespace,
                                                         label_selector=f"{JOB_NAME_LABEL}={name}")).items
        waiting = [p.metadata.name for p in pods if p.status and p.status.phase == "Pending"]
        shown = f"{current}" + (f" (pod {waiting[0]} Pending)" if waiting else "")
        if shown != last:
            echo(f"job {namespace}/{name}: {shown}")
            last = shown
        progressed = False
        for pod in sorted(pods, key=lambda p: p.metadata.name):
            if pod.metadata.name in streamed or not pod.status or pod.status.phase == "Pending":
                continue
            # A broken stream ends this follow, not the Job: the line says how to follow it on.
            follow_log(core, pod.metadata.name, namespace, CONTAINER, echo,
                       again=f"`kubectl -n {namespace} logs -f job/{name}`")
            streamed.add(pod.metadata.name)
            progressed = True
        if current in ("Complete", "Failed") and not progressed:
            if current == "Failed":
                echo(f"job {namespace}/{name} failed: {message}")
                return 1
            return 0
        if not progressed:
            sleep(poll_seconds)
