"""Runs under `trainingApi: v2`: a TrainJob and the TrainingRuntime of its own (k8s/pods/trainjob.py),
through the plain kubernetes client (CustomObjectsApi), as ops/runs.py drives them.

A run is three objects, created in this order so that no pod starts before its peers may reach it
and Trainer's webhook finds the runtime the TrainJob names: the peers NetworkPolicy, the
TrainingRuntime, the TrainJob. The TrainJob then owns the other two, so they also go when it is
deleted by other means than `ops delete`.

Stopping differs with Kueue (`"queueing": "kueue"`). Without it, `spec.suspend` (mutable,
trainjob_types.go in ../shared/contracts/kubeflow-trainer-v2.3.0): Trainer suspends the JobSet, the
Job controller deletes the pods, each rank saves on SIGTERM, and suspended pods are not failures.
With Kueue, Kueue owns `spec.suspend` (it unsuspends a suspended job whose Workload is admitted), so
a stop deactivates the Workload the TrainJob owns (`spec.active: false`: "Changing active from true
to false will evict any running workloads", kueue-v0.19.2 Workload CRD), and Kueue then suspends the
TrainJob; a start activates it again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from k8s.pods.kueue import VISIBILITY_GROUP, VISIBILITY_VERSION
from k8s.pods.kueue_queues import CLUSTER_QUEUE, LOCAL_QUEUE
from k8s.pods.network_policy import trainjob_peers_policy
from k8s.pods.trainjob import (
    API_VERSION, GROUP, JOBSET_NAME_LABEL, KIND, NODE, RESTART_ATTEMPT_LABEL, RUNTIME_KIND, node_pod_template,
)
from ops.errors import OpsError
from ops.run_state import Run

VERSION = API_VERSION.split("/")[1]
TRAINJOBS, RUNTIMES = "trainjobs", "trainingruntimes"
# JobSet v0.12.0 serves and stores jobset.x-k8s.io/v1alpha2 (its CRD in the contracts); a TrainJob's
# JobSet has the TrainJob's name, and its status counts whole-gang restarts.
JOBSET_GROUP, JOBSET_VERSION, JOBSETS = "jobset.x-k8s.io", "v1alpha2", "jobsets"
# Kueue v0.19.2 stores v1beta2 Workloads (its CRD in the contracts). The visibility API's pending
# workloads of a LocalQueue: config/components/visibility/apiservice_v1beta2.yaml (APIService
# v1beta2.visibility.kueue.x-k8s.io) and apis/visibility/v1beta2/types.go (PendingWorkload:
# positionInClusterQueue, counted from 0), kubernetes-sigs/kueue at v0.19.2.
KUEUE_GROUP, KUEUE_VERSION, WORKLOADS = "kueue.x-k8s.io", "v1beta2", "workloads"
VISIBILITY_API = f"{VISIBILITY_GROUP}/{VISIBILITY_VERSION}"
PENDING_PATH = f"/apis/{VISIBILITY_API}/namespaces/{{namespace}}/localqueues/{{queue}}/pendingworkloads"
# The Job controller's annotation of an Indexed Job's pod: index 0 is rank 0's node.
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


@dataclass(frozen=True)
class TrainJobRun:
    """A rendered v2 run: what `ops start` or `ops submit` creates, in `objects` order."""
    runtime: dict
    trainjob: dict
    kueue: bool

    @property
    def name(self) -> str:
        return self.trainjob["metadata"]["name"]

    @property
    def namespace(self) -> str:
        return self.trainjob["metadata"]["namespace"]

    @property
    def image(self) -> str:
        return node_pod_template(self.runtime)["spec"]["containers"][0]["image"]

    def objects(self) -> list[dict]:
        return [trainjob_peers_policy(self.trainjob), self.runtime, self.trainjob]


def _error(err: Any) -> str:
    from ops.kube import api_error_line

    return api_error_line(err)


def _call(fn: Callable[[], Any], hints: dict[int, str] | None = None) -> Any:
    """An API failure as one OpsError line, with what to do for an HTTP status where `hints` says."""
    from kubernetes.client.exceptions import ApiException

    try:
        return fn()
    except ApiException as err:
        hint = (hints or {}).get(err.status)
        raise OpsError(f"Kubernetes API: {_error(err)}" + (f"; {hint}" if hint else "")) from None


def _delete_command(kind: str, name: str, namespace: str) -> str:
    return f"kubectl delete {kind.lower()} {name} -n {namespace}"


class TrainJobs:
    """The runs of a trainingApi v2 environment on one kubernetes ApiClient."""

    kind = KIND
    flags = " --env ENV"  # the stop, status, logs and delete verbs find TrainJobs through the environment

    def __init__(self, api_client: Any, *, kueue: bool):
        from kubernetes.client import CoreV1Api, CustomObjectsApi, NetworkingV1Api

        self.api_client, self.kueue = api_client, kueue
        self.custom, self.core, self.networking = (
            CustomObjectsApi(api_client), CoreV1Api(api_client), NetworkingV1Api(api_client))

    # --- create ----------------------------------------------------------------------------------

    def create(self, run: TrainJobRun) -> str:
        """Create the run's peers policy, runtime and TrainJob, in that order, then make the TrainJob
        their owner. A create that fails deletes what this call created before it; what it cannot
        delete is named in the error line with the command that removes it."""
        from kubernetes.client.exceptions import ApiException

        namespace, name = run.namespace, run.name
        policy, runtime, trainjob = run.objects()
        creates = [
            ("NetworkPolicy", policy, lambda: self.networking.create_namespaced_network_policy(namespace, policy),
             lambda n: self.networking.delete_namespaced_network_policy(n, namespace)),
            (RUNTIME_KIND, runtime,
             lambda: self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, RUNTIMES, runtime),
             lambda n: self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, RUNTIMES, n)),
            (KIND, trainjob,
             lambda: self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, TRAINJOBS, trainjob),
             lambda n: self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, TRAINJOBS, n)),
        ]
        created: list[tuple[str, str, Callable[[str], Any]]] = []
        for kind, body, make, remove in creates:
            try:
                make()
            except ApiException as err:
                if err.status == 409 and kind == "NetworkPolicy":
                    continue  # an earlier run of this name left it: never ours to delete
                hint = ("a run of this name (this spec) exists: `ops start PRESET --env ENV` resumes it; "
                        "`ops submit --name` names another") if err.status == 409 else ""
                raise OpsError(self._undo(created, namespace, f"creating {kind} {namespace}/{body['metadata']['name']} "
                                                   f"failed ({_error(err)})" + (f"; {hint}" if hint else ""))) from None
            except OpsError as err:  # unreachable, 401/403 (ops.kube._Reach)
                raise OpsError(self._undo(created, namespace, str(err))) from None
            created.append((kind, body["metadata"]["name"], remove))
        try:
            uid = _call(lambda: self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, TRAINJOBS, name))["metadata"]["uid"]
            owner = {"metadata": {"ownerReferences": [
                {"apiVersion": API_VERSION, "kind": KIND, "name": name, "uid": uid}]}}
            _call(lambda: self.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, RUNTIMES, name, owner))
            _call(lambda: self.networking.patch_namespaced_network_policy(policy["metadata"]["name"], namespace, owner))
        except OpsError as err:
            raise OpsError(f"created TrainJob {namespace}/{name}, but could not make it the owner of its runtime and "
                           f"peers policy ({err}): the run goes on; `python -m ops delete {name} --env ENV` removes "
                           "all three") from None
        return f"{namespace}/{name}"

    @staticmethod
    def _undo(created: list, namespace: str, reason: str) -> str:
        """Delete what this create made, newest first; the line says what could not be deleted."""
        from kubernetes.client.exceptions import ApiException

        left = []
        for kind, name, remove in reversed(created):
            try:
                remove(name)
            except (ApiException, OpsError):
                left.append((kind, name))
        if not left:
            return reason + ("; deleted what this call had created" if created else "")
        return (f"{reason}; left behind: {', '.join(f'{k} {namespace}/{n}' for k, n in left)}: remove with "
                + "; ".join(f"`{_delete_command(k, n, namespace)}`" for k, n in left))

    # --- read ------------------------------------------------------------------------------------

    def _list(self, group: str, version: str, plural: str, namespace: str) -> list[dict]:
        return _call(lambda: self.custom.list_namespaced_custom_object(group, version, namespace, plural))["items"]

    def trainjob(self, name: str, namespace: str) -> dict:
        return _call(lambda: self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, TRAINJOBS, name),
                     {404: f"`python -m ops status --env ENV` lists the runs in {namespace}"})

    def workloads(self, namespace: str) -> dict[str, dict]:
        """TrainJob name -> the Kueue Workload it controls; empty without Kueue."""
        if not self.kueue:
            return {}
        found = {}
        for workload in self._list(KUEUE_GROUP, KUEUE_VERSION, WORKLOADS, namespace):
            for ref in workload["metadata"].get("ownerReferences") or []:
                if ref.get("kind") == KIND and ref.get("apiVersion", "").startswith(GROUP + "/"):
                    found[ref["name"]] = workload
        return found

    def observed(self, namespace: str, name: str | None = None) -> list[Observed]:
        """Every TrainJob of `namespace` (or the one named), oldest first, with its runtime's image,
        its JobSet's restarts and, under Kueue, its Workload."""
        trainjobs = [self.trainjob(name, namespace)] if name else self._list(GROUP, VERSION, TRAINJOBS, namespace)
        trainjobs.sort(key=lambda t: str(t["metadata"].get("creationTimestamp") or ""))
        images = {}
        for runtime in self._list(GROUP, VERSION, RUNTIMES, namespace):
            containers = node_pod_template(runtime)["spec"]["containers"] if _has_node(runtime) else []
            images[runtime["metadata"]["name"]] = containers[0].get("image", "") if containers else ""
        jobsets = {j["metadata"]["name"]: j for j in self._list(JOBSET_GROUP, JOBSET_VERSION, JOBSETS, namespace)}
        workloads = self.workloads(namespace)
        return [Observed(t, images.get(t["spec"].get("runtimeRef", {}).get("name", ""), ""),
                         jobsets.get(t["metadata"]["name"]), workloads.get(t["metadata"]["name"]), self.kueue)
                for t in trainjobs]

    def runs(self, namespace: str) -> list:
        return [o.run() for o in self.observed(namespace)]

    # --- stop and start --------------------------------------------------------------------------

    def set_suspended(self, name: str, suspend: bool, namespace: str) -> str:
        """Stop (suspend) or start (resume) a TrainJob: `spec.suspend`, or under Kueue its Workload's
        `spec.active`. A merge patch of that one field."""
        [run] = self.observed(namespace, name)
        phase, _ = run.phase()
        if phase in ("Succeeded", "Failed"):
            raise OpsError(f"TrainJob {namespace}/{name} has finished ({phase}); a finished run does not run "
                           f"again: `python -m ops delete {name} --env ENV`, then "
                           "`python -m ops start PRESET --env ENV`")
        if self.kueue:
            return self._set_active(run, not suspend, namespace, phase)
        if bool(run.trainjob["spec"].get("suspend")) == suspend:
            return f"TrainJob {namespace}/{name} is already {'suspended' if suspend else 'started'} ({phase})"
        _call(lambda: self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, TRAINJOBS, name, {"spec": {"suspend": suspend}}))
        return f"TrainJob {namespace}/{name} {'suspended: its pods stop' if suspend else 'resumed: its pods start'}"

    def _set_active(self, run: Observed, active: bool, namespace: str, phase: str) -> str:
        name = run.trainjob["metadata"]["name"]
        if run.workload is None:
            raise OpsError(f"TrainJob {namespace}/{name} has no Kueue Workload yet (Kueue creates it when it sees the "
                           "TrainJob); retry in a moment, and if it stays so, check that Kueue is running")
        workload = run.workload["metadata"]["name"]
        if run.workload["spec"].get("active", True) == active:
            return f"TrainJob {namespace}/{name} is already {'started' if active else 'stopped'} ({phase})"
        _call(lambda: self.custom.patch_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, namespace, WORKLOADS, workload, {"spec": {"active": active}}))
        if active:
            return f"TrainJob {namespace}/{name} resumed: its Workload {workload} is active again and queues for quota"
        return f"TrainJob {namespace}/{name} stopped: Kueue evicts its Workload {workload}, and its pods stop"

    # --- status ----------------------------------------------------------------------------------

    def positions(self, namespace: str) -> dict[str, int]:
        """TrainJob name -> its place in the ClusterQueue (1: admitted next), from Kueue's visibility
        API. Absent API: one OpsError line."""
        from kubernetes.client.exceptions import ApiException

        try:
            summary = self.api_client.call_api(
                PENDING_PATH.replace("{namespace}", namespace).replace("{queue}", LOCAL_QUEUE), "GET",
                response_type="object", auth_settings=["BearerToken"], _return_http_data_only=True,
                _preload_content=True)
        except ApiException as err:
            raise OpsError(f"Kueue's visibility API ({VISIBILITY_API}) is not available ({_error(err)}), so queue "
                           f"positions are unknown; `kubectl get apiservice v1beta2.visibility.kueue.x-k8s.io` says "
                           "why") from None
        found = {}
        for item in (summary or {}).get("items") or []:
            for ref in (item.get("metadata") or {}).get("ownerReferences") or []:
                if ref.get("kind") == KIND:
                    found[ref["name"]] = int(item.get("positionInClusterQueue", 0)) + 1
        return found

    def status(self, namespace: str, name: str | None = None) -> tuple[list[TrainJobStatus], str | None]:
        """The rows of `ops status`, and the one problem line when queue positions were wanted and
        Kueue's visibility API could not give them."""
        observed = self.observed(namespace, name)
        problem, positions = None, {}
        if any(o.phase()[0] == "Queued" for o in observed):
            try:
                positions = self.positions(namespace)
            except OpsError as err:
                problem = str(err)
        rows = []
        for o in observed:
            phase, message = o.phase()
            if phase == "Queued":
                where = positions.get(o.trainjob["metadata"]["name"])
                message = (f"queued, position {where} in {CLUSTER_QUEUE}" if where else "queued (position unknown)") \
                    + (f"; {message}" if message else "")
            created = o.trainjob["metadata"].get("creationTimestamp")
            rows.append(TrainJobStatus(o.trainjob["metadata"]["name"], phase, o.restarts(), message,
                                       str(created) if created else "-"))
        from ops.pod_notes import with_pod_notes

        return with_pod_notes(rows, name, lambda selector: self.pods(namespace, selector), container=NODE,
                              flags=self.flags), problem

    def pods(self, namespace: str, label_selector: str) -> list:
        return _call(lambda: self.core.list_namespaced_pod(namespace, label_selector=label_selector)).items

    # --- logs and delete -------------------------------------------------------------------------

    def logs(self, name: str, namespace: str, follow: bool, echo: Callable[[str], None]) -> None:
        """Rank 0's node pod (completion index 0, the newest JobSet attempt), container `node`."""
        from ops.kube import echo_logs, follow_log, log_in_cloudwatch

        pods = _call(lambda: self.core.list_namespaced_pod(
            namespace, label_selector=f"{JOBSET_NAME_LABEL}={name}")).items
        rank0 = [p for p in pods if (p.metadata.annotations or {}).get(COMPLETION_INDEX_ANNOTATION) == "0"]
        if not rank0:
            # Read only here: the Job controller deletes the pods still running when another rank fails
            # the Job, and the pods of nodes scaled away go with them.
            phase, _ = Observed(self.trainjob(name, namespace), "", None, None).phase()
            if phase in ("Succeeded", "Failed"):
                raise OpsError(log_in_cloudwatch(f"TrainJob {name}", phase, "rank 0", f"{name}-{NODE}-0-0"))
            raise OpsError(f"TrainJob {name} has no pod of index 0 (yet); see `python -m ops status {name} --env ENV`")
        pod = max(rank0, key=lambda p: int((p.metadata.labels or {}).get(RESTART_ATTEMPT_LABEL) or 0))
        if pod.status is not None and pod.status.phase == "Pending":
            from ops.pod_notes import waits_because

            why = waits_because(pod, NODE)
            raise OpsError(f"pod {pod.metadata.name} is Pending{f': it {why}' if why else ''}; its log starts when "
                           "it runs")
        pod_name = pod.metadata.name
        if not follow:
            text = _call(lambda: self.core.read_namespaced_pod_log(pod_name, namespace, container=NODE))
            echo_logs({pod_name: text}, echo)
            return
        follow_log(self.core, pod_name, namespace, NODE, echo, again=f"`python -m ops logs {name} -f{self.flags}`")

    def delete(self, name: str, namespace: str) -> str:
        """The TrainJob (its JobSet, pods and Workload go with it), then its runtime and peers policy,
        which its owner reference would also remove: deleted here so none waits on the collector."""
        from kubernetes.client.exceptions import ApiException

        _call(lambda: self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, TRAINJOBS, name),
              {404: f"`python -m ops status --env ENV` lists the runs in {namespace}"})
        for remove in (lambda: self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, RUNTIMES, name),
                       lambda: self.networking.delete_namespaced_network_policy(f"{name}-peers", namespace)):
            try:
                remove()
            except ApiException as err:
                if err.status != 404:
                    runtime = _delete_command(RUNTIME_KIND, name, namespace)
                    policy = _delete_command("NetworkPolicy", f"{name}-peers", namespace)
                    raise OpsError(f"deleted TrainJob {namespace}/{name}, but not all it owned: Kubernetes API: "
                                   f"{_error(err)}; they go with their owner, or `{runtime}` and `{policy}`") from None
        return f"deleted TrainJob {namespace}/{name}, its TrainingRuntime and its peers NetworkPolicy"


def _has_node(runtime: dict) -> bool:
    jobs = ((runtime.get("spec") or {}).get("template") or {}).get("spec", {}).get("replicatedJobs") or []
    return any(j.get("name") == NODE for j in jobs)


@dataclass(frozen=True)
class TrainJobStatus:
    name: str
    phase: str
    restarts: str
    message: str
    created: str


@dataclass(frozen=True)
class Observed:
    """A TrainJob as the API server has it, with what status reads beside it."""
    trainjob: dict
    image: str
    jobset: dict | None
    workload: dict | None
    kueue: bool = False

    def phase(self) -> tuple[str, str]:
        """Trainer v2.3.0's condition types (trainjob_types.go: Suspended, Complete, Failed) as ops'
        phases: Complete is Succeeded; under Kueue a deactivated Workload is Stopped, one not admitted
        Queued; otherwise Suspended, or Running while a child Job has active pods, else Pending."""
        true = {c["type"]: c for c in (self.trainjob.get("status") or {}).get("conditions") or []
                if c.get("status") == "True"}
        for kind, phase in (("Complete", "Succeeded"), ("Failed", "Failed")):
            if kind in true:
                return phase, _message(true[kind])
        if self.kueue and self.workload is None:
            return "Queued", "Kueue has not created its Workload yet"
        if self.workload is not None:
            wl_true = {c["type"]: c for c in (self.workload.get("status") or {}).get("conditions") or []
                       if c.get("status") == "True"}
            if self.workload["spec"].get("active", True) is False:
                return "Stopped", "its Kueue Workload is deactivated (`python -m ops start` activates it)"
            if "Admitted" not in wl_true:
                evicted = wl_true.get("Evicted")
                if evicted:
                    return "Queued", f"evicted ({evicted.get('reason', '')}): {_message(evicted)}"
                # Why Kueue reserves no quota for it ("couldn't assign flavors ... request > maximum
                # capacity": a run that asks for more than the ClusterQueue has waits forever).
                unreserved = [c for c in (self.workload.get("status") or {}).get("conditions") or []
                              if (c.get("type"), c.get("status")) == ("QuotaReserved", "False")]
                return "Queued", _message(unreserved[0]) if unreserved else ""
        if "Suspended" in true or self.trainjob["spec"].get("suspend"):
            return "Suspended", _message(true["Suspended"]) if "Suspended" in true else ""
        jobs = (self.trainjob.get("status") or {}).get("jobsStatus") or []
        return ("Running" if any((j.get("active") or 0) > 0 for j in jobs) else "Pending"), ""

    def restarts(self) -> str:
        """Whole-gang restarts of the JobSet, and how many count toward maxRestarts when not all do."""
        status = (self.jobset or {}).get("status") or {}
        total, counted = status.get("restarts") or 0, status.get("restartsCountTowardsMax") or 0
        return str(total) if total == counted else f"{total} ({counted} counted)"

    def run(self) -> Run:
        phase, _ = self.phase()
        return Run.labelled(self.trainjob["metadata"]["name"], self.trainjob["metadata"].get("labels") or {}, phase,
                            phase in ("Suspended", "Stopped"), self.image)


def _message(condition: dict) -> str:
    return " ".join(str(condition.get("message") or condition.get("reason") or "").split())


def render_status(rows: list[TrainJobStatus]) -> str:
    from ops.kube import render_table

    return render_table(rows, (("phase", 10), ("restarts", 8), ("created", 25), ("message", 0)), "no TrainJobs")
