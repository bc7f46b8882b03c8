"""What a run's pods say that the run's own status does not, for `ops status`: each worker's last
exit status with its meaning (config.kubernetes.STATUS_MEANINGS), whether restarting can help,
why a pod waits for a node (the scheduler's Unschedulable reason) or why its container does not
start (an image that cannot be pulled), and that a run whose pods all wait is Pending, not Running.
A PyTorchJob restarts a pod that exits with a permanent status until its backoff limit, a
TrainJob's condition names only the podFailurePolicy rule, and neither says that no node fits or
that no image can be pulled: the pods are where a user learns it early.

One pod list per `ops status`, whatever the number of runs: the pods carry their run's name
(JOB_LABEL, on PyTorchJob and TrainJob pods alike)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from config.kubernetes import STATUS_MEANINGS, PERMANENT_EXITS
from k8s.pods.pytorchjob import JOB_LABEL

# Phases whose run has no pods worth reading: finished cleanly, stopped, or not yet admitted.
_NO_PODS = ("Succeeded", "Suspended", "Stopped", "Queued")


def with_pod_notes(rows: list, name: str | None, list_pods: Callable[[str], list], *, container: str,
                   flags: str) -> list:
    """`rows` (dataclasses with name, phase and message) with what their pods say appended to the
    message. `list_pods(label_selector)` is called once, and not at all when no row can have pods."""
    if not any(r.phase not in _NO_PODS for r in rows):
        return rows
    by_run: dict[str, list] = {}
    for pod in list_pods(f"{JOB_LABEL}={name}" if name else JOB_LABEL):
        by_run.setdefault((pod.metadata.labels or {}).get(JOB_LABEL), []).append(pod)
    found = []
    for row in rows:
        pods = sorted(by_run.get(row.name, []), key=lambda p: p.metadata.name)
        notes = _notes(row.name, pods, container, flags)
        if notes and row.phase not in _NO_PODS:
            row = dataclasses.replace(row, message="; ".join(filter(None, [row.message, *notes])))
        if row.phase == "Running" and _all_wait(pods):
            row = dataclasses.replace(row, phase="Pending")
        found.append(row)
    return found


def _all_wait(pods: list) -> bool:
    """Pods that wait and none that runs: a TrainJob's child Job counts Pending pods as active, and a
    PyTorchJob keeps its Running condition while its pods are made again, so their Running would
    say that a run trains which waits for nodes or its image."""
    phases = [pod.status.phase if pod.status else None for pod in pods]
    return "Pending" in phases and "Running" not in phases


def _notes(run: str, pods: list, container: str, flags: str) -> list[str]:
    exits: dict[tuple[int, str], list[str]] = {}
    waiting: dict[str, int] = {}
    stuck: dict[str, int] = {}
    looping: dict[str, int] = {}  # pod name: its container's restarts so far
    for pod in pods:
        terminated = _last_terminated(pod, container)
        if terminated is not None:
            exits.setdefault((terminated.exit_code, terminated.reason or ""), []).append(pod.metadata.name)
        unschedulable = _unschedulable(pod)
        if unschedulable is not None:
            waiting[unschedulable] = waiting.get(unschedulable, 0) + 1
        cannot_start = _cannot_start(pod, container)
        if cannot_start is not None:
            stuck[cannot_start] = stuck.get(cannot_start, 0) + 1
        restarts = _crash_looping(pod, container)
        if restarts is not None:
            looping[pod.metadata.name] = restarts
    notes = [f"{', '.join(names)} exited {code} ({STATUS_MEANINGS.get(code) or reason or 'unknown'})"
             for (code, reason), names in exits.items()]
    permanent = sorted({code for code, _ in exits if code in PERMANENT_EXITS})
    if permanent:
        notes.append(f"exit {', '.join(map(str, permanent))} will not get better by restarting: "
                     f"`python -m ops logs {run}{flags}` says why")
    if looping:
        # A crash and a recovery read alike in the exit notes; this says the pod keeps failing.
        notes.append(f"{', '.join(looping)} in CrashLoopBackOff after {max(looping.values())} restart(s) in place: "
                     "the kubelet starts it again after each exit, waiting longer each time, up to 5 minutes")
    notes.extend(f"{n} pod{'s' if n > 1 else ''} unschedulable: {why}" for why, n in waiting.items())
    notes.extend(f"{n} pod{'s' if n > 1 else ''} {why}" for why, n in stuck.items())
    if any(why.startswith("cannot pull") for why in stuck):
        notes.append(f"a run keeps its image: push it, or `python -m ops delete {run}{flags}` and start again")
    return notes


def waits_because(pod: Any, container: str) -> str | None:
    """Why a Pending pod waits, as `ops logs` says it after "it": "is unschedulable: <the scheduler's
    reason>", "cannot pull image <image> (<the kubelet's reason>)"; None when neither says."""
    unschedulable = _unschedulable(pod)
    return f"is unschedulable: {unschedulable}" if unschedulable is not None else _cannot_start(pod, container)


def _unschedulable(pod: Any) -> str | None:
    """The scheduler's reason in one line, without the preemption half it appends ("preemption:
    0/3 nodes are available: 3 No preemption victims found ..."), which repeats the first."""
    for condition in (pod.status.conditions if pod.status else None) or []:
        if (condition.type, condition.status, condition.reason) == ("PodScheduled", "False", "Unschedulable"):
            message = " ".join((condition.message or "").split())
            return message.split(" preemption:")[0].rstrip(".") or "no reason given"
    return None


# The kubelet's reasons for a container that waits because its image cannot be pulled.
_PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
# Reasons of a container that is on its way (or, CrashLoopBackOff, whose exit the notes already give).
_STARTING = ("ContainerCreating", "PodInitializing", "CrashLoopBackOff")


def _cannot_start(pod: Any, container: str) -> str | None:
    """Why the container of a scheduled pod does not start, with the kubelet's reason and message:
    its pod stays Pending, and neither a PyTorchJob nor a TrainJob says so."""
    for status in (pod.status.container_statuses if pod.status else None) or []:
        waiting = status.state.waiting if status.name == container and status.state else None
        if waiting is not None and waiting.reason and waiting.reason not in _STARTING:
            pull = waiting.reason in _PULL_FAILURES
            what = f"cannot pull image {status.image}" if pull else "cannot start its container"
            message = " ".join((waiting.message or "").split())
            return f"{what} ({waiting.reason}{': ' + message if message else ''})"
    return None


def _crash_looping(pod: Any, container: str) -> int | None:
    """The container's restarts when the kubelet holds it back between restarts in place
    (CrashLoopBackOff: 10 s, doubled after each exit, capped at 300 s; Kubernetes "Pod Lifecycle",
    container restarts); None otherwise."""
    for status in (pod.status.container_statuses if pod.status else None) or []:
        waiting = status.state.waiting if status.name == container and status.state else None
        if waiting is not None and waiting.reason == "CrashLoopBackOff":
            return status.restart_count or 0
    return None


def _last_terminated(pod: Any, container: str) -> Any:
    """The container's termination: its current state, or the one before its restart in place."""
    for status in (pod.status.container_statuses if pod.status else None) or []:
        if status.name == container:
            for state in (status.state, status.last_state):
                if state is not None and state.terminated is not None:
                    return state.terminated
    return None
