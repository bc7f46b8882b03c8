"""Empty the training namespace of runs before the FSx claim goes.

Pods that `ops submit`, `ops data` or anyone else started in the namespace mount the FSx claim.
CloudFormation does not know them, and while one exists the claim's pvc-protection finalizer
keeps the claim: the kubectl handler's `kubectl delete` of the volume waits on it until its Lambda
times out and the destroy fails (aws-cdk issue 9970). This handler runs when its resource is
deleted, which CloudFormation does before it deletes any manifest of the Workloads stack: it
deletes every run of the namespace (their pods go with them), then every pod still mounting the
claim, and waits until none is left. If one is still there at its deadline
it fails, naming the pods: the destroy stops there, and deleting the stack again waits again.

It talks to the Kubernetes API itself (the standard library, and boto3 to sign the token): the
endpoint and CA come from its properties, the bearer token is an EKS token, a presigned STS
GetCallerIdentity for the cluster (the format `aws eks get-token` prints), and an access entry maps
its role to a group that an RBAC Role in the namespace lets do exactly this.
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
# Background: the API server deletes the jobs now and the garbage collector their pods after.
DELETE_OPTIONS = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}


class Incomplete(Exception):
    """Pods still mount the claim at the deadline; the message names them."""


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


def handler(event, context):
    from cfn_response import run

    def on_delete(event):
        props = event["ResourceProperties"]
        token = eks_token(props["ClusterName"], os.environ["AWS_REGION"])
        api = Api(props["Endpoint"], token, props.get("CertificateAuthority"))
        budget = context.get_remaining_time_in_millis() / 1000 - REPLY_SECONDS
        return drain(api, props["Namespace"], props["ClaimName"], time.monotonic() + max(budget, 0))

    # Replying SUCCESS with pods still on the claim would only move the failure to the volume's
    # delete, an hour later and without a reason.
    run(event, context, on_delete, failure_fails_delete=True)
