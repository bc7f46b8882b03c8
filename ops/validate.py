"""Post-deploy validation, run by the pipeline after each stage (and by hand after a deploy).

    python -m ops validate --dist dist/<env> [--timeout 1800]

Reads the validation objects the k8s layer wrote (dist/<env>/validation/, or the runner's copy;
k8s/pods/validation.py), counts Ready nodes per node group with kubectl, then creates afresh each GPU
check Job whose group has a node, the NCCL sweep of each EFA group with two Ready nodes or more
(the group's MPIJob pinned to each pair of its nodes, in rounds of disjoint pairs; ops/nccl.py
judges every pair's table and names a slow node or link), and the smoke run where its CPU group has
its nodes: a PyTorchJob, or under trainingApi v2 a TrainingRuntime and the TrainJob that uses it,
created in that order and judged by the TrainJob's Complete or Failed condition. No deploy applies these
objects; this command is what runs them. A group with no nodes yet (desiredSize 0) is reported and
skipped, not failed, as is a check whose `${NAME}` placeholder (the smoke run's trainer image) is
not in the environment. Any check that fails or times out fails the command (exit 1); no objects,
or kubectl missing or failing, is one line and exit 2.
Needs kubectl configured for the cluster (the pipeline does update-kubeconfig first).
"""

from __future__ import annotations

import copy
import json
import os
import posixpath
import re
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path

from config import paths
from config.kubernetes import (
    JOBSET_NAME_LABEL, NCCL_GROUP_LABEL, NCCL_INSTANCE_TYPE_ANNOTATION, NODEGROUP_LABEL, OPERATOR_JOB_NAME_LABEL,
    OPERATOR_REPLICA_TYPE_LABEL, RUN_ID_ENV,
)
from ops import nccl, proc
from ops.errors import OpsError

POLL_SECONDS = 10
# One kubectl call; `delete --wait` of an MPIJob waits for its pods' termination grace period.
KUBECTL_TIMEOUT_S = 300
# The kinds that run the trainer: the smoke run's, under trainingApi v1 or v2.
RUN_KINDS = ("PyTorchJob", "TrainJob")
# The label each kind's controller puts on its pods, by which `kubectl logs -l` finds them: the Job
# controller's, the Training Operator's, JobSet's (Trainer v2 names the JobSet after the TrainJob).
POD_LABEL = {"Job": "job-name", "MPIJob": OPERATOR_JOB_NAME_LABEL, "PyTorchJob": OPERATOR_JOB_NAME_LABEL,
             "TrainJob": JOBSET_NAME_LABEL}
# The replicated job of a TrainingRuntime that runs the trainer (k8s/pods/trainjob.py NODE; ops
# reads dist/ without the k8s package, which the runner does not carry).
TRAINER_NODE = "node"


@dataclass(frozen=True)
class Check:
    kind: str  # "Job", "MPIJob", "PyTorchJob" or "TrainJob"
    name: str
    namespace: str
    nodegroup: str
    nodes_needed: int
    manifest: dict
    runtime: dict | None = None  # a TrainJob's TrainingRuntime, created before it

    def objects(self) -> list[dict]:
        """What this check creates, in order: a TrainJob's runtime first (Trainer's webhook refuses a
        TrainJob whose runtime does not exist)."""
        return ([self.runtime] if self.runtime is not None else []) + [self.manifest]

    def placeholders(self) -> list[str]:
        """The `${NAME}` values this check needs from the environment."""
        return sorted(set(PLACEHOLDER.findall(json.dumps(self.objects()))))


# The dist placeholders (k8s/pods/images.py): upper-case names in ${...}. The launcher scripts' own
# shell variables are lower case.
PLACEHOLDER = re.compile(r"\$\{([A-Z][A-Z0-9_]*)\}")


def filled(manifest: dict, values: dict[str, str]) -> dict:
    """`manifest` with every placeholder replaced by its value."""
    # Each placeholder stands inside a JSON string: the value goes in escaped as one.
    text = PLACEHOLDER.sub(lambda m: json.dumps(values[m.group(1)])[1:-1], json.dumps(manifest))
    return json.loads(text)


def _pod_nodegroup(pod_spec: dict) -> str | None:
    selector = (pod_spec.get("nodeSelector") or {}).get(NODEGROUP_LABEL)
    if selector:
        return selector
    terms = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    for term in terms:
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") == NODEGROUP_LABEL and expr.get("operator") == "In" and expr.get("values"):
                return expr["values"][0]
    return None


def runtime_pod_template(runtime: dict) -> dict:
    """The pod template of a TrainingRuntime's trainer job."""
    jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    job = next((j for j in jobs if j.get("name") == TRAINER_NODE), None)
    if job is None:
        raise ValueError(f"TrainingRuntime {runtime['metadata'].get('name')} has no replicated job {TRAINER_NODE!r}")
    return job["template"]["spec"]["template"]


def checks_from_objects(objects: list[dict]) -> list[Check]:
    runtimes = {(_metadata(o).get("namespace", "default"), _metadata(o).get("name")): o
                for o in objects if o.get("kind") == "TrainingRuntime"}
    checks = []
    for obj in objects:
        try:
            check = _check_of(obj, runtimes)
        # dist/ is make synth's, but a hand-edited or truncated file is indexed into here as well
        except (KeyError, TypeError, AttributeError, IndexError) as err:
            what = f"no {err}" if isinstance(err, KeyError) else str(err)
            raise ValueError(f"{obj.get('kind')} {_metadata(obj).get('name')} is not of the shape make synth writes "
                             f"({what}); rerun make synth") from None
        if check is not None:
            checks.append(check)
    return checks


def _metadata(obj: dict) -> dict:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _check_of(obj: dict, runtimes: dict) -> Check | None:
    """The check an object of dist/ stands for; None for the objects beside the checks."""
    runtime = None
    kind, meta = obj.get("kind"), obj.get("metadata", {})
    if kind == "Job":
        group = _pod_nodegroup(obj["spec"]["template"]["spec"])
        nodes = 1
    elif kind == "MPIJob":
        worker = obj["spec"]["mpiReplicaSpecs"]["Worker"]
        group = _pod_nodegroup(worker["template"]["spec"])
        nodes = int(worker.get("replicas", 1))
    elif kind == "PyTorchJob":
        worker = obj["spec"]["pytorchReplicaSpecs"]["Worker"]
        group = _pod_nodegroup(worker["template"]["spec"])
        nodes = int((obj["spec"].get("elasticPolicy") or {}).get("minReplicas") or worker.get("replicas", 1))
    elif kind == "TrainJob":
        ref = obj["spec"].get("runtimeRef") or {}
        runtime = runtimes.get((meta.get("namespace", "default"), ref.get("name")))
        if ref.get("kind") != "TrainingRuntime" or runtime is None:
            raise ValueError(f"TrainJob {meta.get('name')} uses {ref.get('kind')} {ref.get('name')}, which is "
                             "not beside it (rerun make synth with this checkout)")
        group = _pod_nodegroup(runtime_pod_template(runtime)["spec"])
        nodes = int((obj["spec"].get("trainer") or {}).get("numNodes") or runtime["spec"]["mlPolicy"]["numNodes"])
    else:
        return None
    if group is None:
        raise ValueError(f"{kind} {meta.get('name')} selects no node group ({NODEGROUP_LABEL})")
    return Check(kind, meta["name"], meta.get("namespace", "default"), group, nodes, obj, runtime)


def plan(checks: list[Check], ready_nodes: dict[str, list[str]],
         environ: dict[str, str] | None = None) -> tuple[list[Check], list[str]]:
    """Which checks can run now (placeholders filled from `environ`), and a reason for each that cannot."""
    environ = os.environ if environ is None else environ
    runnable, skipped = [], []
    for check in checks:
        have = len(ready_nodes.get(check.nodegroup, ()))
        missing = [name for name in check.placeholders() if not environ.get(name)]
        if have < check.nodes_needed:
            skipped.append(f"{check.kind} {check.name}: node group {check.nodegroup} has {have} Ready "
                           f"node(s), needs {check.nodes_needed}")
        elif missing:
            skipped.append(f"{check.kind} {check.name}: {', '.join(missing)} not set (the validation runner sets "
                           "it; by hand, export it as dist/<env>/README.md shows)")
        else:
            runnable.append(replace(check, manifest=filled(check.manifest, environ),
                                    runtime=None if check.runtime is None else filled(check.runtime, environ)))
    return runnable, skipped


def ready_nodes_by_group(nodes: dict) -> dict[str, list[str]]:
    """Node group -> the names of its Ready nodes, sorted."""
    found: dict[str, list[str]] = {}
    for node in nodes.get("items", []):
        group = node["metadata"].get("labels", {}).get(NODEGROUP_LABEL)
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", []))
        if group and ready:
            found.setdefault(group, []).append(node["metadata"].get("name", ""))
    return {group: sorted(names) for group, names in found.items()}


def load_validation_objects(dist: Path) -> list[dict]:
    try:
        if paths.exists(dist) and not paths.is_dir(dist):
            raise OpsError(f"--dist: {dist} is not a directory (the dist/<env> folder make synth writes)")
    except paths.PathProblem as problem:
        raise OpsError(f"--dist: {problem}") from None
    files = sorted(dist.rglob("*validation*.yaml"))
    if not files:
        raise OpsError(f"--dist: no cluster-validation YAML under {dist} (run make synth first)")
    objects = []
    for f in files:
        try:
            documents = paths.read_yaml(f)
        except paths.PathProblem as problem:
            raise OpsError(f"--dist: {problem}") from None
        for doc in documents:
            if doc is not None and not isinstance(doc, dict):
                raise OpsError(f"--dist: {f} holds a {type(doc).__name__} where a Kubernetes object belongs")
            objects += [doc] if doc else []
    return objects


def load_checks(dist: Path) -> list[Check]:
    """The checks of dist/<env>/validation/; OpsError naming --dist when there are none or one is malformed."""
    try:
        return checks_from_objects(load_validation_objects(dist))
    except ValueError as err:
        raise OpsError(f"--dist: {err}") from None


def ready_nodes() -> dict[str, list[str]]:
    return ready_nodes_by_group(json.loads(kubectl("get", "nodes", "-l", NODEGROUP_LABEL, "-o", "json")))


def kubectl(*args: str, stdin: str | None = None) -> str:
    """kubectl ARGS (stdin optional): its stdout; RuntimeError (one line) when it fails or gives no
    answer in time, OpsError when there is no kubectl."""
    try:
        done = proc.run(["kubectl", *args], input=stdin, timeout=KUBECTL_TIMEOUT_S)
    except FileNotFoundError:
        raise OpsError("kubectl not found on PATH; install it and run `aws eks update-kubeconfig` first") from None
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"kubectl {' '.join(args)}: no answer in {KUBECTL_TIMEOUT_S} s") from None
    if done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {' '.join(done.stderr.split())[:300]}")
    return done.stdout


def outcome_of(status: dict) -> str | None:
    """'passed', 'failed' or None while running, from a job's status conditions."""
    for cond in status.get("conditions") or []:
        if cond.get("status") != "True":
            continue
        if cond["type"] in ("Complete", "Succeeded"):
            return "passed"
        if cond["type"] == "Failed":
            return "failed"
    return None


def _outcome(kind: str, name: str, namespace: str) -> str | None:
    return outcome_of(json.loads(kubectl("get", kind.lower(), name, "-n", namespace, "-o", "json")).get("status", {}))


def _await(kind: str, names: list[str], namespace: str, timeout_s: float) -> list[str]:
    """Each object's outcome once all have one, or 'timed out' for those still running at the deadline."""
    deadline = time.monotonic() + timeout_s
    outcomes: dict[str, str] = {}
    while True:
        for name in names:
            if name not in outcomes and (outcome := _outcome(kind, name, namespace)) is not None:
                outcomes[name] = outcome
        if len(outcomes) == len(names) or time.monotonic() > deadline:
            return [outcomes.get(name, "timed out") for name in names]
        time.sleep(POLL_SECONDS)


def worker_container(manifest: dict) -> dict:
    """The trainer's container: a PyTorchJob's worker's, a TrainingRuntime's node's."""
    if manifest.get("kind") == "TrainingRuntime":
        return runtime_pod_template(manifest)["spec"]["containers"][0]
    return manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]


def flag_value(command: list[str], flag: str) -> str | None:
    return command[command.index(flag) + 1] if flag in command[:-1] else None


def with_flags(command: list[str], values: dict[str, str]) -> list[str]:
    """`command` with each flag's value replaced, or the flag appended where it has none."""
    command = list(command)
    for flag, value in values.items():
        if flag in command[:-1]:
            command[command.index(flag) + 1] = value
        else:
            command += [flag, value]
    return command


def stamp() -> str:
    """This validation's name among earlier ones: UTC to the second."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime())


def fresh_run(smoke_run: Check, label: str, flags: dict[str, str] | None = None) -> tuple[Check, str]:
    """The smoke run with a snapshot file and a rendezvous of its own (under `label`), and that
    snapshot's path. dist/ names one fixed snapshot: a run that found an earlier validation's would
    resume at its last epoch and exit 0 without training a step, and proves nothing."""
    manifest = copy.deepcopy(smoke_run.runtime if smoke_run.runtime is not None else smoke_run.manifest)
    container = worker_container(manifest)
    command = container.get("command") or []
    smoke_snapshot = flag_value(command, "--snapshot-path")
    if "trainer.ddp" not in command or smoke_snapshot is None:
        raise ValueError(f"{smoke_run.kind} {smoke_run.name} does not run `trainer.ddp --snapshot-path ...` "
                         "(rerun make synth with this checkout)")
    snapshot = posixpath.join(posixpath.dirname(smoke_snapshot), label, "snapshot.pt")
    container["command"] = with_flags(command, {**(flags or {}), "--snapshot-path": snapshot})
    run_id = f"{smoke_run.name}-{label}"
    if smoke_run.runtime is None:
        manifest["spec"]["elasticPolicy"]["rdzvId"] = run_id
        return replace(smoke_run, manifest=manifest), snapshot
    # A TrainJob's pods rendezvous under the run's id and JobSet's restart attempt
    # (k8s/pods/trainjob.py): a new run id is a new rendezvous, kept by every attempt of this one.
    run_env = next((e for e in container.get("env") or [] if e.get("name") == RUN_ID_ENV), None)
    if run_env is None:
        raise ValueError(f"TrainingRuntime {smoke_run.runtime['metadata']['name']} sets no {RUN_ID_ENV} "
                         "(rerun make synth with this checkout)")
    run_env["value"] = run_id
    return replace(smoke_run, runtime=manifest), snapshot


def delete_objects(check: Check) -> None:
    """What `check` creates, deleted and gone: a TrainJob before the runtime it holds."""
    for obj in reversed(check.objects()):
        kubectl("delete", obj["kind"].lower(), obj["metadata"]["name"], "-n", check.namespace, "--ignore-not-found",
                "--wait=true")


def create_objects(check: Check) -> None:
    for obj in check.objects():
        kubectl("create", "-f", "-", stdin=json.dumps(obj))


def run_check(check: Check, timeout_s: float) -> bool:
    # Delete first: a Job that passed on an earlier deploy must run again to prove this one.
    delete_objects(check)
    if check.kind in RUN_KINDS:
        check, _ = fresh_run(check, f"run-{stamp()}")
    create_objects(check)
    [outcome] = _await(check.kind, [check.name], check.namespace, timeout_s)
    selector = f"{POD_LABEL[check.kind]}={check.name}"
    try:
        print(kubectl("logs", "-n", check.namespace, "-l", selector, "--tail=50", "--all-containers"))
    except RuntimeError as err:
        print(f"(no logs: {err})")
    print(f"{check.kind} {check.name} on {check.nodegroup}: {outcome}")
    return outcome == "passed"


def _launcher_log(name: str, namespace: str) -> str:
    # A label selector makes kubectl logs default to the last 10 lines; the table needs them all.
    selector = f"{OPERATOR_JOB_NAME_LABEL}={name},{OPERATOR_REPLICA_TYPE_LABEL}=launcher"
    try:
        return kubectl("logs", "-n", namespace, "-l", selector, "--tail=-1")
    except RuntimeError as err:
        return f"(no launcher log: {err})"


def run_nccl_sweep(check: Check, nodes: list[str], timeout_s: float) -> bool:
    """The group's NCCL MPIJob once per pair of `nodes`, a round of disjoint pairs at a time; the
    verdict is ops/nccl.py's, the one `ops doctor` reads back from the same launcher logs."""
    from config.instance_types import INSTANCE_TYPES

    instance = (check.manifest["metadata"].get("annotations") or {}).get(NCCL_INSTANCE_TYPE_ANNOTATION)
    if instance not in INSTANCE_TYPES or INSTANCE_TYPES[instance].nccl_busbw_floor_gbps is None:
        raise ValueError(f"MPIJob {check.name} names no instance type with an NCCL floor ({instance!r})")
    floor = INSTANCE_TYPES[instance].nccl_busbw_floor_gbps
    group, namespace = check.nodegroup, check.namespace
    # A sweep replaces the last one: its pairs, and the single test earlier releases ran.
    kubectl("delete", "mpijob", "-n", namespace, "-l", f"{NCCL_GROUP_LABEL}={group}", "--ignore-not-found",
             "--wait=true")
    kubectl("delete", "mpijob", check.name, "-n", namespace, "--ignore-not-found", "--wait=true")
    results, index = [], 0
    for pairs in nccl.pairs_in_rounds(nodes):
        jobs = []
        for pair in pairs:
            job = nccl.pinned(check.manifest, pair, index, group)
            index += 1
            kubectl("create", "-f", "-", stdin=json.dumps(job))
            jobs.append((pair, job["metadata"]["name"]))
        outcomes = _await("MPIJob", [name for _, name in jobs], namespace, timeout_s)
        for (pair, name), outcome in zip(jobs, outcomes):
            verdict = nccl.judge(_launcher_log(name, namespace), floor)
            if outcome != "passed":
                verdict = nccl.Verdict(False, f"MPIJob {name} {outcome}; {verdict.line}", verdict.busbw)
            print(f"  {name} {pair[0]}<->{pair[1]}: {'pass' if verdict.ok else 'FAIL'}: {verdict.line}")
            results.append(nccl.PairResult(pair, verdict))
    sweep = nccl.sweep_verdict(results)
    print(f"NCCL sweep on {group} ({len(nodes)} nodes, {instance}): {'passed' if sweep.ok else 'failed'}: {sweep.line}")
    return sweep.ok


def run_checks(dist: Path, timeout_s: float) -> int:
    """Every check of dist/<env>/validation/ that has nodes to run on: 0 when all passed, 1 when one
    failed; OpsError (one line, exit 2) when there are none or kubectl cannot do what a check needs."""
    checks = load_checks(dist)
    try:
        ready = ready_nodes()
        runnable, skipped = plan(checks, ready)
        for reason in skipped:
            print(f"skipped: {reason}")
        failures = [c.name for c in runnable
                    if not (run_nccl_sweep(c, ready[c.nodegroup], timeout_s) if c.kind == "MPIJob"
                            else run_check(c, timeout_s))]
    except RuntimeError as err:  # kubectl could not do what a check needs: the cluster, not a check
        raise OpsError(str(err)) from None
    except ValueError as err:
        raise OpsError(f"--dist: {err}") from None
    print(f"validation finished: {len(runnable) - len(failures)} passed, {len(failures)} failed, {len(skipped)} skipped")
    return 1 if failures else 0
