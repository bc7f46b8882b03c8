"""Empty the training namespace of runs before the FSx claim goes.

Pods that `ops submit`, `ops data` or anyone else started in the namespace mount the FSx claim.
CloudFormation does not know them, and while one exists the claim's pvc-protection finalizer
keeps the claim: the kubectl handler's `kubectl delete` of the volume waits on it until its Lambda
times out and the destroy fails (aws-cdk issue 9970). This handler runs when its resource is
deleted, which CloudFormation does before it deletes any manifest of the Workloads stack: it
deletes every run of the namespace (their pods go with them), then every pod still mounting the
claim, and waits until none is left. If one is still there at its deadline
it fails, naming the pods: the destroy stops there, and deleting the stack again waits again.

On Update it guards a switch of the environment's trainingApi (its TrainingApi property; absent
means v1, as in v1 environments and resources of earlier releases). CloudFormation updates this
resource after every manifest of the stack (it depends on them all, for the order of a delete) but
before it deletes the manifests the new template no longer has, which it does only once the
update has succeeded (UPDATE_COMPLETE_CLEANUP_IN_PROGRESS). A switch to v1 removes the manifests of
the TrainJob and JobSet CRDs, and deleting a CRD deletes every object of it; a switch to v2 takes
PyTorchJob from the Training Operator, which then runs none of them. So when the value changes and
runs of the old API's kind exist anywhere in the cluster, the update fails, naming them, and
CloudFormation rolls the deploy back with the old CRDs still there (the Update that rollback sends
back to this resource is not checked). `python -m ops preflight`
(ops/api_switch.py) asks the same before `make deploy`; this is the check the pipeline gets.

It talks to the Kubernetes API itself (the standard library, and boto3 to sign the token): the
endpoint and CA come from its properties, the bearer token is an EKS token, a presigned STS
GetCallerIdentity for the cluster (the format `aws eks get-token` prints), and an access entry maps
its role to a group that an RBAC Role in the namespace and a ClusterRole (the list of both APIs'
runs) let do exactly this.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import boto3

POLL_SECONDS = 10
REPLY_SECONDS = 60
TOKEN_PREFIX = "k8s-aws-v1."
# (API path prefix, resource): what is deleted, in this order; deleting a run deletes its pods. A
# cluster serves the kinds of its trainingApi only, and a kind it does not serve answers 404.
# Owners go before what they own, because each owner recreates what is missing while it exists:
# Kubeflow Trainer v2.3.0 re-applies a TrainJob's JobSet on every reconcile (TrainJobs carry no
# finalizer, pkg/controller/trainjob_controller.go), and JobSet v0.12.0 creates every Job of its
# replicated jobs that does not exist (pkg/controllers/jobset_controller.go reconcileReplicatedJobs).
# Deleting Jobs alone under v2 would only start new pods. JobSets come after TrainJobs as a
# backstop: one the garbage collector has not removed yet, or one made by hand.
RUNS = (
    ("/apis/trainer.kubeflow.org/v1alpha1", "trainjobs"),
    ("/apis/jobset.x-k8s.io/v1alpha2", "jobsets"),
    ("/apis/kubeflow.org/v1", "pytorchjobs"),
    ("/apis/kubeflow.org/v1", "mpijobs"),
    ("/apis/batch/v1", "jobs"),
)
TRAINING_API = "TrainingApi"
DEFAULT_TRAINING_API = "v1"


@dataclass(frozen=True)
class RunKind:
    """The runs of one trainingApi (ops/api_switch.py RUN_KINDS), and what a switch away does to them."""
    prefix: str
    resource: str
    kind: str
    switched_away: str


RUN_KINDS = {
    "v1": RunKind("/apis/kubeflow.org/v1", "pytorchjobs", "PyTorchJob",
                  "the deploy takes PyTorchJob from the Training Operator, which then runs none of them"),
    "v2": RunKind("/apis/trainer.kubeflow.org/v1alpha1", "trainjobs", "TrainJob",
                  "the deploy deletes the TrainJob CRD, and with it every TrainJob"),
}
RUNS_NAMED = 5
LIST_LIMIT = 500
# Background: the API server deletes the jobs now and the garbage collector their pods after.
DELETE_OPTIONS = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}


class Incomplete(Exception):
    """Pods still mount the claim at the deadline; the message names them."""


class SwitchRefused(Exception):
    """trainingApi changes while runs of the old API exist; the message names them."""


def eks_token(cluster_name: str, region: str) -> str:
    """A bearer token for the cluster: a presigned STS GetCallerIdentity URL whose signature covers
    the x-k8s-aws-id header naming the cluster, base64url-encoded behind TOKEN_PREFIX."""
    sts = boto3.session.Session().client("sts", region_name=region,
                                         endpoint_url=f"https://sts.{region}.amazonaws.com")

    def name_the_cluster(request, **_):
        request.headers["x-k8s-aws-id"] = cluster_name

    sts.meta.events.register("before-sign.sts.GetCallerIdentity", name_the_cluster)
    url = sts.generate_presigned_url("get_caller_identity", Params={}, ExpiresIn=60, HttpMethod="GET")
    return TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


class Api:
    """Minimal JSON client of the Kubernetes API."""

    def __init__(self, endpoint: str, token: str, certificate_authority: str | None = None, timeout: float = 30):
        self.endpoint, self.token, self.timeout = endpoint.rstrip("/"), token, timeout
        self.context = None
        if certificate_authority:
            with tempfile.NamedTemporaryFile("w", suffix=".pem", delete=False) as pem:
                pem.write(base64.b64decode(certificate_authority).decode())
            self.context = ssl.create_default_context(cafile=pem.name)

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        request = urllib.request.Request(
            self.endpoint + path, method=method, data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json",
                     "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self.context) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")


def _checked(status: int, answer: dict, what: str) -> dict:
    if status >= 300:
        raise RuntimeError(f"{what}: HTTP {status} {answer.get('message', '')}".strip())
    return answer


def delete_runs(api: Api, namespace: str) -> list[str]:
    """Delete every run of the namespace; returns the kinds the cluster serves ("trainjobs", ...)."""
    deleted = []
    for prefix, resource in RUNS:
        status, answer = api.call("DELETE", f"{prefix}/namespaces/{namespace}/{resource}", DELETE_OPTIONS)
        if status == 404:  # the cluster does not serve that kind: nothing of it to delete
            continue
        _checked(status, answer, f"delete {resource} in {namespace}")
        deleted.append(resource)
    return deleted


def pods_on_claim(api: Api, namespace: str, claim: str) -> dict[str, bool]:
    """Pods that mount `claim` -> whether their deletion has begun (deletionTimestamp set)."""
    answer = _checked(*api.call("GET", f"/api/v1/namespaces/{namespace}/pods"), f"list pods in {namespace}")
    return {pod["metadata"]["name"]: bool(pod["metadata"].get("deletionTimestamp"))
            for pod in answer.get("items", [])
            if any((v.get("persistentVolumeClaim") or {}).get("claimName") == claim
                   for v in pod.get("spec", {}).get("volumes", []))}


def drain(api: Api, namespace: str, claim: str, deadline: float, *, poll_seconds: float = POLL_SECONDS,
          sleep=time.sleep, clock=time.monotonic) -> str:
    kinds = delete_runs(api, namespace)
    asked: set[str] = set()
    while True:
        holding = pods_on_claim(api, namespace, claim)
        if not holding:
            return (f"deleted {', '.join(kinds) or 'no runs'} in {namespace}; no pod mounts {claim} "
                    f"({len(asked)} pod(s) deleted by name)")
        # Pods of the deleted runs are already on their way out; delete the others (a bare pod, a
        # pod of some other controller) once each.
        for name in (n for n, leaving in holding.items() if not leaving and n not in asked):
            status, answer = api.call("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}")
            if status != 404:
                _checked(status, answer, f"delete pod {name}")
            asked.add(name)
        if clock() + poll_seconds > deadline:
            raise Incomplete(f"pods in {namespace} still mount {claim}: {', '.join(holding)}. They are being "
                             f"deleted; delete the stack again to wait for them")
        sleep(poll_seconds)


def runs_of(api: Api, kind: RunKind, namespace: str) -> tuple[list[str], bool]:
    """(names, more): the runs of `kind` in every namespace, `name` in `namespace` and
    `namespace/name` elsewhere, at most LIST_LIMIT; `more` when the list went on. None of a kind
    the cluster does not serve."""
    status, answer = api.call("GET", f"{kind.prefix}/{kind.resource}?limit={LIST_LIMIT}")
    if status == 404:
        return [], False
    _checked(status, answer, f"list {kind.resource}")
    names = sorted(meta["name"] if meta.get("namespace") == namespace else f"{meta.get('namespace')}/{meta['name']}"
                   for meta in (item.get("metadata", {}) for item in answer.get("items", [])))
    return names, bool(answer.get("metadata", {}).get("continue"))


def check_switch(api: Api, namespace: str, old: str, new: str) -> str:
    """Raises SwitchRefused when `old` != `new` and runs of `old`'s kind exist; calls the API only
    when they differ."""
    if old == new:
        return f"trainingApi stays {new}; nothing to check"
    for value in (old, new):
        if value not in RUN_KINDS:
            raise ValueError(f"TrainingApi {value!r} is none of {', '.join(RUN_KINDS)}")
    kind = RUN_KINDS[old]
    names, more = runs_of(api, kind, namespace)
    if not names:
        return f"trainingApi {old} -> {new}: no {kind.kind} exists, nothing to lose"
    shown = ", ".join(names[:RUNS_NAMED])
    if more or len(names) > RUNS_NAMED:
        shown += " and more" if more else f" and {len(names) - RUNS_NAMED} more"
    raise SwitchRefused(
        f"trainingApi changes from {old} to {new} while {len(names)}{'+' if more else ''} {kind.kind}(s) exist "
        f"({shown}): {kind.switched_away}. Stop and delete them first (`python -m ops stop RUN`, then "
        f"`python -m ops delete RUN`; each preset's new run resumes from its checkpoints on FSx), or keep "
        f"trainingApi {old}. CloudFormation rolls this deploy back")


def rolling_back(stack_id: str, region: str, cloudformation=None) -> bool:
    """Whether the stack is rolling an update back. CloudFormation rolls a failed update back by
    updating each changed resource to its previous properties, this one included: that Update
    restores the API the cluster had, and refusing it would leave the stack UPDATE_ROLLBACK_FAILED.
    False when the status cannot be read (the check then runs)."""
    cloudformation = cloudformation or boto3.session.Session().client("cloudformation", region_name=region)
    try:
        [stack] = cloudformation.describe_stacks(StackName=stack_id)["Stacks"]
    except Exception as err:  # noqa: BLE001 - an unknown status only means the check runs
        print(f"could not read the status of {stack_id} ({type(err).__name__}: {err}); checking the switch")
        return False
    return stack["StackStatus"].startswith("UPDATE_ROLLBACK")


def handler(event, context):
    from cfn_response import run

    def on_delete(event):
        props = event["ResourceProperties"]
        token = eks_token(props["ClusterName"], os.environ["AWS_REGION"])
        api = Api(props["Endpoint"], token, props.get("CertificateAuthority"))
        budget = context.get_remaining_time_in_millis() / 1000 - REPLY_SECONDS
        return drain(api, props["Namespace"], props["ClaimName"], time.monotonic() + max(budget, 0))

    def on_update(event):
        props, old_props = event["ResourceProperties"], event.get("OldResourceProperties") or {}
        new, old = props.get(TRAINING_API, DEFAULT_TRAINING_API), old_props.get(TRAINING_API, DEFAULT_TRAINING_API)
        if old != new and rolling_back(event["StackId"], os.environ["AWS_REGION"]):
            return f"rollback to trainingApi {new}: the previous configuration comes back, not checked"
        # An update that switches nothing returns before any call to the cluster, so it cannot fail.
        api = Api(props["Endpoint"], eks_token(props["ClusterName"], os.environ["AWS_REGION"]),
                  props.get("CertificateAuthority"))
        return check_switch(api, props["Namespace"], old, new)

    # Replying SUCCESS with pods still on the claim would only move the failure to the volume's
    # delete, an hour later and without a reason.
    run(event, context, on_delete, failure_fails_delete=True, on_update=on_update)
