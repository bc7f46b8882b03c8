"""`ops validate --dist dist/<env> --drill preemption`: the cluster's half of surviving a preemption.

The trainer's half is proven offline (tests/trainer/test_preemption.py, tests/k8s/pods/
test_operator_exit_rule.py): a preempted run saves and exits 143 on every rank, only a finished run
exits 0, a restart resumes after the last snapshot. What no test here can show is the cluster doing
its part: the controller replacing a worker pod that went away, the job not ending Succeeded when
the survivors stop, and the replacement resuming from the snapshot on the shared file system.

The drill runs the smoke run (validation-cpu-ddp on the CPU group's two nodes: a PyTorchJob, or under
trainingApi v2 a TrainJob and its TrainingRuntime) sized to last minutes instead of seconds, with a
snapshot file and a rendezvous of its own, waits until a worker logs its first saved snapshot,
deletes that worker's pod as a spot reclaim or a drain would (SIGTERM, then the pod's grace period),
and judges from the job's status and the workers' logs (trainer/ddp.py's lines) that the job did not
end Succeeded before a worker logged the final epoch, that the replacement pod started at the
snapshot's epoch (not 0), and that the job ends Succeeded. The Training Operator recreates the
deleted pod under its name; JobSet restarts the TrainJob's whole gang, so the replacement is the new
attempt's pod of the same completion index, and every attempt keeps the run's TRAINER_RUN_ID. A
TrainJob's Succeeded is its Complete condition (Trainer v2.3.0 trainjob_types.go). One row per
assertion (ops/checks.py), exit 1 on a FAIL; every wait ends at --timeout.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

from k8s.pods.validation import SMOKE_PRESET, SMOKE_RUN
from ops import checks
from ops.errors import OpsError
from ops.validate import (  # noqa: F401  (worker_container, flag_value, with_flags: the tests read the run through them)
    POD_LABEL, RUN_KINDS, Check, create_objects, delete_objects, flag_value, fresh_run, kubectl, load_checks,
    outcome_of, plan, ready_nodes, stamp as validation_stamp, with_flags, worker_container,
)

POLL_SECONDS = 5
# The smoke run's 20 epochs of 4096 samples end in seconds, before a poll could catch a snapshot
# and a deletion land. 262144 samples are 1024 steps of 64 per rank per epoch on the smoke run's
# four ranks, seconds per epoch on its m5.2xlarge nodes (about 7 s for one rank measured on a
# shared 2-core VM), so the run lasts minutes and a deletion lands mid-run.
DRILL_EPOCHS = 30
DRILL_SAMPLES = 262144
REQUEST_TIMEOUT = "--request-timeout=60s"
# The Job controller's annotation of an Indexed Job's pod (a TrainJob's): the rank's node, which a
# JobSet restart gives a pod of a new name.
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
# The condition that says a run finished, as each kind's controller names it.
SUCCESS_CONDITION = {"PyTorchJob": "Succeeded", "TrainJob": "Complete"}

# trainer/ddp.py's lines: every rank logs each epoch it trains; rank 0 logs its saves and a resume.
EPOCH = re.compile(r"\] Epoch (\d+) \| Batchsize ")
SNAPSHOT_SAVED = re.compile(r"\] Epoch (\d+) \| Snapshot saved at (\S+)")
RESUMED = re.compile(r"Resuming from snapshot (\S+) at epoch (\d+)")

SNAPSHOT, NOT_EARLY, RESUMED_ROW, SUCCEEDED = ("first snapshot", "no early success", "resumed from snapshot",
                                               "ends Succeeded")


@dataclass(frozen=True)
class Pod:
    name: str
    uid: str
    log: str
    slot: str  # what a replacement has in common with the pod it replaces: the name, or the completion index

    def epochs(self) -> list[int]:
        return [int(m[1]) for m in EPOCH.finditer(self.log)]


@dataclass(frozen=True)
class DrillRun:
    check: Check
    snapshot: str
    epochs: int

    @property
    def kind(self) -> str:
        return self.check.kind

    @property
    def name(self) -> str:
        return self.check.name

    @property
    def namespace(self) -> str:
        return self.check.namespace

    @property
    def container(self) -> str:
        return worker_container(self.check.runtime or self.check.manifest)["name"]

    @property
    def succeeded(self) -> str:
        """`kind name Succeeded`, in the words of the kind's condition."""
        return f"{self.kind} {self.name} {SUCCESS_CONDITION[self.kind]}"


def drill_run(smoke_run: Check, stamp: str) -> DrillRun:
    """The smoke run as the drill runs it: longer, with a snapshot file and a rendezvous of its own
    (a snapshot left by an earlier run would let it resume at its end and prove nothing)."""
    try:
        check, snapshot = fresh_run(smoke_run, f"drill-{stamp}",
                                    {"--epochs": str(DRILL_EPOCHS), "--samples": str(DRILL_SAMPLES)})
    except ValueError as err:
        raise OpsError(f"--drill preemption: {err}") from None
    return DrillRun(check, snapshot, DRILL_EPOCHS)


def smoke_run_check(dist) -> Check:
    """The smoke run of dist/<env>/validation/, its image filled in, where the cluster can run it now."""
    found = [c for c in load_checks(dist) if c.kind in RUN_KINDS and c.name == SMOKE_RUN]
    if not found:
        raise OpsError(f"--drill preemption: {dist} holds no smoke run ({' or '.join(RUN_KINDS)} {SMOKE_RUN}): the "
                       f"environment has no node group for the {SMOKE_PRESET} preset")
    runnable, skipped = plan(found, ready_nodes())
    if skipped:
        raise OpsError(f"--drill preemption cannot run the smoke run: {skipped[0]}")
    return runnable[0]


def _job_outcome(run: DrillRun) -> tuple[str | None, str]:
    """'passed', 'failed' or None, and the Failed condition's message."""
    status = json.loads(kubectl("get", run.kind.lower(), run.name, "-n", run.namespace, "-o", "json",
                                REQUEST_TIMEOUT)).get("status") or {}
    failed = [c for c in status.get("conditions") or [] if c.get("type") == "Failed" and c.get("status") == "True"]
    return outcome_of(status), " ".join((failed[0].get("message") or "").split()) if failed else ""


def _pods(run: DrillRun) -> list[Pod]:
    """The run's worker pods with their current container's whole log ('' before it starts)."""
    items = json.loads(kubectl("get", "pods", "-n", run.namespace, "-l", f"{POD_LABEL[run.kind]}={run.name}",
                               "-o", "json", REQUEST_TIMEOUT))["items"]
    pods = []
    for item in items:
        name = item["metadata"]["name"]
        try:
            log = kubectl("logs", name, "-n", run.namespace, "-c", run.container, REQUEST_TIMEOUT)
        except RuntimeError:  # not started yet, or being replaced
            log = ""
        slot = name if run.kind == "PyTorchJob" else \
            (item["metadata"].get("annotations") or {}).get(COMPLETION_INDEX_ANNOTATION, name)
        pods.append(Pod(name, item["metadata"].get("uid", ""), log, slot))
    return sorted(pods, key=lambda p: p.name)


def _saved(pods: list[Pod], snapshot: str) -> tuple[Pod, int] | None:
    """The pod that logged a save to this drill's snapshot, and the epochs that snapshot holds."""
    for pod in pods:
        epochs = [int(m[1]) + 1 for m in SNAPSHOT_SAVED.finditer(pod.log) if m[2] == snapshot]
        if epochs:
            return pod, max(epochs)
    return None


def _wait(deadline: float) -> None:
    time.sleep(max(0.0, min(POLL_SECONDS, deadline - time.monotonic())))


def run_drill(dist, timeout_s: float) -> int:
    """The drill's table; 0 when every row passed, 1 when one failed. OpsError (one line, exit 2) when
    dist holds no smoke run, the cluster cannot run it, or kubectl cannot reach the cluster."""
    try:
        check = smoke_run_check(dist)
        rows = preempt(drill_run(check, validation_stamp()), timeout_s)
    except RuntimeError as err:  # kubectl could not do what the drill needs: the cluster, not a verdict
        raise OpsError(str(err)) from None
    return checks.report(rows, as_json=False, about={}, title=f"preemption drill on {check.kind} {SMOKE_RUN}")


def preempt(run: DrillRun, timeout_s: float) -> list[checks.Check]:
    deadline = time.monotonic() + timeout_s
    delete_objects(run.check)
    create_objects(run.check)
    print(f"created {run.kind} {run.name} ({run.epochs} epochs, snapshot {run.snapshot}); awaiting its first snapshot")
    while True:
        outcome, message = _job_outcome(run)
        saved = _saved(_pods(run), run.snapshot)
        if outcome or saved or time.monotonic() >= deadline:
            break
        _wait(deadline)
    if outcome or not saved:
        if outcome == "passed":
            why = f"{run.succeeded} before a worker could be preempted (the run is too short)"
        elif outcome:
            why = f"{run.kind} {run.name} Failed before a worker could be preempted: {message}"
        else:
            why = f"no worker logged a snapshot saved to {run.snapshot} within {timeout_s:g} s (timed out)"
        return [checks.Check(SNAPSHOT, checks.FAIL, why)] + [
            checks.Check(name, checks.FAIL, "not checked: no worker was preempted")
            for name in (NOT_EARLY, RESUMED_ROW, SUCCEEDED)]
    victim, epochs_saved = saved
    kubectl("delete", "pod", victim.name, "-n", run.namespace, "--wait=false")
    print(f"deleted pod {victim.name} after it saved {epochs_saved} epoch(s); awaiting the job's end")
    rows = [checks.Check(SNAPSHOT, checks.PASS, f"{victim.name} saved {epochs_saved} epoch(s) to {run.snapshot}; "
                                                "its pod was deleted")]
    while True:
        outcome, message = _job_outcome(run)
        if outcome or time.monotonic() >= deadline:
            break
        _wait(deadline)
    # Read as soon as the job has ended: whether a worker had reached the final epoch by then.
    pods = _pods(run)
    return rows + [_not_early(outcome, pods, run, timeout_s), _resumed(pods, victim, epochs_saved),
                   _ended(outcome, message, run, timeout_s)]


def _not_early(outcome: str | None, pods: list[Pod], run: DrillRun, timeout_s: float) -> checks.Check:
    final = run.epochs - 1
    last = max((e for pod in pods for e in pod.epochs()), default=None)
    if outcome == "passed" and (last is None or last < final):
        return checks.Check(NOT_EARLY, checks.FAIL, f"{run.succeeded} after the deletion, but no "
                                                    f"worker had logged its final epoch {final} (last logged: "
                                                    f"{'none' if last is None else last}): a preempted run "
                                                    "reported as finished")
    if outcome == "passed":
        return checks.Check(NOT_EARLY, checks.PASS, f"{SUCCESS_CONDITION[run.kind]} only once a worker had logged "
                                                    f"the final epoch {final}")
    if outcome:
        return checks.Check(NOT_EARLY, checks.PASS, f"never {SUCCESS_CONDITION[run.kind]} (it Failed)")
    return checks.Check(NOT_EARLY, checks.WARN, f"not {SUCCESS_CONDITION[run.kind]} within {timeout_s:g} s, but the "
                                                "drill timed out first")


def _resumed(pods: list[Pod], victim: Pod, epochs_saved: int) -> checks.Check:
    replacement = next((p for p in pods if p.slot == victim.slot and p.uid != victim.uid), None)
    if replacement is None:
        return checks.Check(RESUMED_ROW, checks.FAIL, f"no replacement for the deleted pod {victim.name} appeared")
    epochs = replacement.epochs()
    if not epochs:
        return checks.Check(RESUMED_ROW, checks.FAIL, f"the replacement {replacement.name} logged no epoch")
    first = epochs[0]
    if first < epochs_saved:
        start = "started over at epoch 0" if first == 0 else f"started at epoch {first}"
        return checks.Check(RESUMED_ROW, checks.FAIL, f"the replacement {replacement.name} {start}, but the snapshot "
                                                      f"held {epochs_saved} epoch(s): work was lost")
    resumed = RESUMED.search(replacement.log)
    said = f" ('Resuming from snapshot {resumed[1]} at epoch {resumed[2]}')" if resumed else ""
    return checks.Check(RESUMED_ROW, checks.PASS, f"the replacement {replacement.name} started at epoch {first}, "
                                                  f"at or after the snapshot's {epochs_saved}{said}")


def _ended(outcome: str | None, message: str, run: DrillRun, timeout_s: float) -> checks.Check:
    if outcome == "passed":
        return checks.Check(SUCCEEDED, checks.PASS, run.succeeded)
    if outcome:
        return checks.Check(SUCCEEDED, checks.FAIL, f"{run.kind} {run.name} Failed: {message or 'no message'}")
    return checks.Check(SUCCEEDED, checks.FAIL, f"{run.kind} {run.name} had not ended {timeout_s:g} s after the drill "
                                                "began (timed out)")
