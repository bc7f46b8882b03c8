"""A recording fake Kubernetes API server for the ops tests.

It replaces only HTTP: it stands in for the urllib3 PoolManager under a kubernetes ApiClient, so the
real kubernetes client and kubeflow-training SDK run above it as they would against a cluster.
Routes answer by (method, path); every request is recorded.
"""

from __future__ import annotations

import http.client
import io
import json
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlsplit

import urllib3


@dataclass
class Call:
    method: str
    path: str
    query: dict
    body: object
    headers: dict = field(default_factory=dict)


class _Body(io.BytesIO):
    """A response body that reports itself closed once read to the end, as http.client's does:
    urllib3 streams until the body says so, and a BytesIO never would."""

    def __init__(self, data: bytes):
        super().__init__(data)
        self._size = len(data)

    def isclosed(self) -> bool:
        return self.closed or self.tell() >= self._size


@dataclass(frozen=True)
class Reset:
    """A route's body that breaks after `data`: the connection reset mid-answer (a followed log
    when the API server, a load balancer or the kubelet drops it)."""
    data: bytes


class _ResetAfter(io.RawIOBase):
    """A socket's read side that gives its bytes and then fails as a reset connection does."""

    def __init__(self, data: bytes):
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self._data.readinto(buffer)
        if n == 0:
            raise ConnectionResetError(104, "Connection reset by peer")
        return n


def _reset_response(status: int, data: bytes, preload_content: bool) -> urllib3.HTTPResponse:
    """`data` as the one chunk of a chunked answer (as the API server streams a followed log), read by
    http.client as urllib3 reads a real connection, and then the reset."""
    wire = (b"HTTP/1.1 %d OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n"
            % (status, len(data), data))
    sock = type("Socket", (), {"makefile": lambda self, mode: io.BufferedReader(_ResetAfter(wire))})()
    raw = http.client.HTTPResponse(sock, method="GET")
    raw.begin()
    return urllib3.HTTPResponse(body=raw, headers=dict(raw.getheaders()), status=raw.status,
                                preload_content=preload_content, original_response=raw)


class FakeApiServer:
    """Stands in for urllib3.PoolManager: answers by (method, path), records every request."""

    def __init__(self):
        self.calls: list[Call] = []
        self.routes: dict[tuple[str, str], tuple[int, object]] = {}
        self.handlers: list = []

    def on(self, method: str, path: str, body: object, status: int = 200) -> None:
        self.routes[(method, path)] = (status, body)

    def answer(self, handler) -> None:
        """`handler(call)` answers (status, body), or None to pass, for requests no route names
        (paths that carry a generated name)."""
        self.handlers.append(handler)

    def request(self, method, url, fields=None, body=None, preload_content=True, headers=None, **_):
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query)) | dict(fields or [])
        call = Call(method, parts.path, query, json.loads(body) if body else None, dict(headers or {}))
        self.calls.append(call)
        answered = self.routes.get((method, parts.path)) or next(
            (a for a in (h(call) for h in self.handlers) if a is not None), None)
        status, payload = answered or (404, {
            "kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404,
            "message": f"{parts.path} not found"})
        if isinstance(payload, Reset):
            return _reset_response(status, payload.data, preload_content)
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        return urllib3.HTTPResponse(body=_Body(data), status=status, preload_content=preload_content,
                                    headers={"Content-Type": "application/json"})


def training_client_on(server: FakeApiServer, namespace: str = "training"):
    """A real kubeflow-training TrainingClient whose HTTP is `server`, with the ops CLI's guard
    (ops.kube.guard) between them as `ops` itself wires it."""
    from kubeflow.training import TrainingClient
    from kubernetes.client import Configuration

    from ops import kube

    config = Configuration()
    config.host = "https://k8s.test"
    client = TrainingClient(client_configuration=config, namespace=namespace)
    # custom_api and core_api share one ApiClient, hence one REST client and one pool manager.
    client.custom_api.api_client.rest_client.pool_manager = server
    return kube.guard(client)


def api_client_on(server: FakeApiServer):
    """A real kubernetes ApiClient (core, apps, batch APIs) whose HTTP is `server`, guarded as
    `ops.kube.api_client` guards the one `ops` builds from a kubeconfig."""
    from kubernetes.client import ApiClient, Configuration

    from ops import kube

    config = Configuration()
    config.host = "https://k8s.test"
    client = ApiClient(config)
    client.rest_client.pool_manager = server
    return kube.guard(client)


JOBS_PATH = "/apis/kubeflow.org/v1/namespaces/training/pytorchjobs"
POLICIES_PATH = "/apis/networking.k8s.io/v1/namespaces/training/networkpolicies"


def jobs_and_their_policies(server: FakeApiServer):
    """An answer (FakeApiServer.answer) for what `ops submit` asks around the job's create: the job
    it created, with a uid, by name, and the peers NetworkPolicy's create, patch and delete."""
    def answer(call: Call):
        if call.method == "GET" and call.path.startswith(JOBS_PATH + "/"):
            name = call.path.rsplit("/", 1)[1]
            posted = [c.body for c in server.calls
                      if (c.method, c.path) == ("POST", JOBS_PATH) and c.body["metadata"]["name"] == name]
            if posted:
                return 200, {**posted[-1], "metadata": {**posted[-1]["metadata"], "uid": f"uid-{name}"}}
        if call.path == POLICIES_PATH and call.method == "POST":
            return 201, call.body
        if call.path.startswith(POLICIES_PATH + "/") and call.method in ("PATCH", "DELETE"):
            return 200, {"kind": "NetworkPolicy", "metadata": {"name": call.path.rsplit("/", 1)[1]}}
        return None
    return answer


def created_jobs(server: FakeApiServer) -> list[dict]:
    return [c.body for c in server.calls if (c.method, c.path) == ("POST", JOBS_PATH)]


def worker_status(container: str, *, exited: int | None = None, last_exited: int | None = None,
                  unschedulable: str | None = None, waiting: tuple[str, str] | None = None,
                  image: str = "i", restarts: int | None = None) -> dict:
    """A training pod's status as the kubelet and scheduler write it: its container `exited` (state
    terminated), or running again after it `last_exited` (lastState terminated, a restart in place),
    or the pod `unschedulable` (PodScheduled False with the scheduler's message), or its container
    `waiting` (reason, message): a pod scheduled whose container has not started (Pending), or, after
    `last_exited`, one restarted in place that waits to start again (Running)."""
    if unschedulable is not None:
        return {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable}]}
    terminated = {"exitCode": exited if exited is not None else last_exited, "reason": "Error"}
    state = {"terminated": terminated} if exited is not None else {"running": {}}
    phase = "Failed" if exited is not None else "Running"
    if waiting is not None:
        state = {"waiting": {"reason": waiting[0], "message": waiting[1]}}
        phase = "Running" if last_exited is not None else "Pending"
    return {"phase": phase, "conditions": [{"type": "PodScheduled", "status": "True"}], "containerStatuses": [
        {"name": container, "ready": exited is None and waiting is None,
         "restartCount": restarts if restarts is not None else 0 if last_exited is None else 1, "image": image, "imageID": "", "state": state,
         "lastState": {"terminated": terminated} if last_exited is not None else {}}]}
