"""A recording Kubernetes API server on loopback, for running the real kubectl against.

kube_fakes.py stands in for HTTP under the Python client; kubectl is a Go binary, so this one
serves real HTTP: discovery for the kinds the project touches, a small object store (create, get,
list with label selectors, delete, pod logs) and job status on request. Every request is recorded
as it arrived, and `rbac_requests` turns the recording into the (verb, API group, resource,
namespace, name) an RBAC authorizer would judge.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable
from urllib.parse import parse_qsl, urlsplit

# group/version -> resource -> (kind, namespaced, verbs); "" is the core group.
RESOURCES = {
    "v1": {"nodes": ("Node", False), "pods": ("Pod", True), "pods/log": ("Pod", True),
           "secrets": ("Secret", True), "namespaces": ("Namespace", False)},
    "batch/v1": {"jobs": ("Job", True)},
    "kubeflow.org/v1": {"mpijobs": ("MPIJob", True), "pytorchjobs": ("PyTorchJob", True)},
}
# A trainingApi v2 cluster: Kubeflow Trainer's kinds, and the Training Operator serving MPIJobs only
# (k8s/pods/training_operator.py), so there is no PyTorchJob kind to find.
RESOURCES_V2 = {
    **{gv: kinds for gv, kinds in RESOURCES.items() if gv != "kubeflow.org/v1"},
    "kubeflow.org/v1": {"mpijobs": ("MPIJob", True)},
    "trainer.kubeflow.org/v1alpha1": {"trainingruntimes": ("TrainingRuntime", True), "trainjobs": ("TrainJob", True)},
}
VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict


@dataclass(frozen=True)
class RbacRequest:
    """A resource request as the RBAC authorizer sees it (Kubernetes "Authorization" docs, "Determine
    the request verb": GET on a collection is list, or watch with watch=true; on a name it is get)."""

    verb: str
    group: str
    resource: str  # with its subresource, e.g. pods/log
    namespace: str
    name: str


@dataclass(frozen=True)
class Answer:
    """What `RecordingApiServer(answer=...)` says to a request instead of the store: a status with a
    body and headers (429 with Retry-After, 500, 409, 410), or, with `reset_after`, that many bytes
    of `body` as the first chunk of a chunked answer and then a TCP reset, as when a load balancer
    or the API server drops a connection mid-answer."""

    status: int = 200
    body: dict | bytes = b""
    headers: dict = field(default_factory=dict)
    reset_after: int | None = None


def status_body(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "message": message,
            "code": code}


def rbac_requests(requests: list[Request]) -> list[RbacRequest]:
    """Resource requests only: discovery and OpenAPI documents are non-resource URLs that every
    authenticated user may read (the default system:discovery ClusterRole)."""
    found = []
    for request in requests:
        parts = request.path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 3:
            group, rest = "", parts[2:]
        elif parts[0] == "apis" and len(parts) >= 4:
            group, rest = parts[1], parts[3:]
        else:
            continue
        namespace = ""
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        resource, name = rest[0], rest[1] if len(rest) > 1 else ""
        if len(rest) > 2:
            resource = f"{resource}/{rest[2]}"
        if request.method == "GET":
            verb = "get" if name else ("watch" if request.query.get("watch") in ("true", "1") else "list")
        else:
            verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
                    "DELETE": "delete" if name else "deletecollection"}[request.method]
        found.append(RbacRequest(verb, group, resource, namespace, name))
    return found


def _matches(selector: str, labels: dict) -> bool:
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if key.endswith("!"):
            if labels.get(key[:-1]) == value:
                return False
        elif "=" in term and labels.get(key) != value.lstrip("="):
            return False
        elif "=" not in term and key not in labels:
            return False
    return True


class RecordingApiServer:
    """Serves until `close()`. `objects[(group/version, resource, namespace, name)]` is the store;
    `status_for(kind, name)` gives each created job its status; `logs` answers pods/log; `pods_for`
    makes a created job's pods."""

    def __init__(self, *, status_for=None, logs: str | Callable[[dict], str] = "PASS\n", linger: bool = False,
                 pods_for: Callable[[str, dict], list[dict]] | None = None,
                 before: Callable[[Request], None] | None = None, resources: dict = RESOURCES,
                 answer: Callable[[Request], Answer | None] | None = None):
        self.requests: list[Request] = []
        # answer(request): an Answer that replaces the store's for this request, or None.
        self.answer = answer
        self.resources = resources  # what discovery serves: RESOURCES, or RESOURCES_V2
        # before(request): called with each request before it is answered, so a test can move the
        # cluster along as a client polls it (a job's status, a replaced pod).
        self.before = before
        # linger: a deleted object is still there for one more read (finalizers, graceful
        # deletion), as on a real cluster, so clients that wait for it to go take their wait path.
        self.linger = linger
        self.deleting: dict[tuple[str, str, str, str], dict] = {}
        self.objects: dict[tuple[str, str, str, str], dict] = {}
        self.status_for = status_for or (lambda kind, name: {"conditions": [{"type": "Complete", "status": "True"}]})
        # logs: every pod's log, or a function of the pod. pods_for(kind, created job): the pods a
        # controller would make of it, stored beside the job.
        self.logs = logs
        self.pods_for = pods_for or (lambda kind, obj: [])
        self._lock = threading.Lock()
        handler = type("Handler", (_Handler,), {"api": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "runner"}}],
            "users": [{"name": "runner", "user": {"token": "fake"}}]}))
        return path

    def add(self, group_version: str, resource: str, namespace: str, obj: dict) -> None:
        obj = {**obj, "metadata": {**obj["metadata"], **({"namespace": namespace} if namespace else {}),
                                   "uid": str(uuid.uuid4()), "resourceVersion": "1"}}
        self.objects[(group_version, resource, namespace, obj["metadata"]["name"])] = obj

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


class _Handler(BaseHTTPRequestHandler):
    api: RecordingApiServer

    def log_message(self, *args) -> None:
        pass

    def _send(self, status: int, body, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int, reason: str, message: str) -> None:
        self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                          "message": message, "code": code})

    def _route(self, method: str) -> None:
        parts = urlsplit(self.path)
        query = dict(parse_qsl(parts.query))
        with self.api._lock:
            self.api.requests.append(Request(method, parts.path, query))
            if self.api.before is not None:
                self.api.before(self.api.requests[-1])
            answer = self.api.answer(self.api.requests[-1]) if self.api.answer is not None else None
        if answer is not None:
            return self._answer(answer)
        body = None
        if method in ("POST", "PUT", "PATCH"):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
        segments = parts.path.strip("/").split("/")
        if method == "GET" and self._discovery(segments):
            return
        if segments[0] == "api" and len(segments) >= 3:
            group_version, rest = segments[1], segments[2:]
        elif segments[0] == "apis" and len(segments) >= 4:
            group_version, rest = f"{segments[1]}/{segments[2]}", segments[3:]
        else:
            return self._status(404, "NotFound", f"{parts.path} not found")
        namespace = ""
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        self._resource(method, group_version, rest, namespace, query, body)

    def _answer(self, answer: Answer) -> None:
        data = answer.body if isinstance(answer.body, bytes) else json.dumps(answer.body).encode()
        self.send_response(answer.status)
        self.send_header("Content-Type", "application/json")
        for name, value in answer.headers.items():
            self.send_header(name, value)
        if answer.reset_after is None:
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        # Chunked, as the API server streams a followed log or a long list: the client has the first
        # chunk in hand when the connection goes.
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        first = data[:answer.reset_after]
        self.wfile.write(b"%x\r\n%s\r\n" % (len(first), first))
        self.wfile.flush()
        # SO_LINGER with a zero timeout: close() sends RST, not FIN.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True

    def _discovery(self, segments: list[str]) -> bool:
        if segments == ["api"]:
            self._send(200, {"kind": "APIVersions", "versions": ["v1"],
                             "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})
        elif segments == ["apis"]:
            groups = [gv for gv in self.api.resources if "/" in gv]
            self._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": gv.split("/")[0], "versions": [{"groupVersion": gv, "version": gv.split("/")[1]}],
                 "preferredVersion": {"groupVersion": gv, "version": gv.split("/")[1]}} for gv in groups]})
        elif (segments[0] == "api" and len(segments) == 2) or (segments[0] == "apis" and len(segments) == 3):
            gv = "/".join(segments[1:])
            if gv not in self.api.resources:
                self._status(404, "NotFound", gv)
                return True
            self._send(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": [
                {"name": name, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": VERBS}
                for name, (kind, namespaced) in self.api.resources[gv].items()]})
        elif segments[:2] == ["openapi", "v3"]:
            self._openapi("/".join(segments[2:]))
        elif segments[0] in ("openapi", "version"):
            self._status(404, "NotFound", "/".join(segments))
        else:
            return False
        return True

    def _openapi(self, group_version_path: str) -> None:
        """Just enough OpenAPI v3 for kubectl to learn that the server validates fields itself
        (a fieldValidation parameter on each kind's operations), so it sends fieldValidation=Strict
        instead of validating against schemas on the client."""
        documents = {("api/" if "/" not in gv else "apis/") + gv: gv for gv in self.api.resources}
        if not group_version_path:
            return self._send(200, {"paths": {path: {"serverRelativeURL": f"/openapi/v3/{path}?hash=0"}
                                              for path in documents}})
        gv = documents.get(group_version_path)
        if gv is None:
            return self._status(404, "NotFound", group_version_path)
        group, _, version = gv.rpartition("/")
        paths = {}
        for resource, (kind, namespaced) in self.api.resources[gv].items():
            if "/" in resource:
                continue
            scope = "namespaces/{namespace}/" if namespaced else ""
            # kubectl looks for the parameter on the kind's PATCH operation.
            paths[f"/{group_version_path}/{scope}{resource}/{{name}}"] = {"patch": {
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": kind},
                "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}],
                "responses": {"200": {"description": "OK"}}}}
        self._send(200, {"openapi": "3.0.0", "info": {"title": "fake", "version": "v0"}, "paths": paths,
                         "components": {"schemas": {}}})

    def _resource(self, method: str, gv: str, rest: list[str], namespace: str, query: dict, body) -> None:
        resource, name = rest[0], rest[1] if len(rest) > 1 else ""
        key = (gv, resource, namespace, name)
        if gv not in self.api.resources or resource.split("/")[0] not in self.api.resources[gv]:
            return self._status(404, "NotFound", f"the server could not find the requested resource ({gv} {resource})")
        kind = self.api.resources[gv][resource][0]
        if len(rest) > 2 and rest[2] == "log":
            logs = self.api.logs
            text = logs if isinstance(logs, str) else logs(self.api.objects.get(key, {"metadata": {"name": name}}))
            return self._send(200, text.encode(), "text/plain")
        if method == "POST":
            name = body["metadata"]["name"]
            key = (gv, resource, namespace, name)
            if key in self.api.objects:
                return self._status(409, "AlreadyExists", f'{resource} "{name}" already exists')
            created = {**body, "metadata": {**body["metadata"], "namespace": namespace, "uid": str(uuid.uuid4()),
                                            "resourceVersion": "1"}}
            created["status"] = self.api.status_for(kind, name)
            self.api.objects[key] = created
            for pod in self.api.pods_for(kind, created):
                self.api.add("v1", "pods", namespace, pod)
            return self._send(201, created)
        if method == "DELETE":
            if key not in self.api.objects:
                return self._status(404, "NotFound", f'{resource} "{name}" not found')
            gone = self.api.objects.pop(key)
            if self.api.linger:
                self.api.deleting[key] = {**gone, "metadata": {**gone["metadata"],
                                                               "deletionTimestamp": "2026-01-01T00:00:00Z"}}
            return self._send(200, gone)
        if method == "GET" and key in self.api.deleting:
            return self._send(200, self.api.deleting.pop(key))
        if method == "GET" and name:
            if key not in self.api.objects:
                return self._status(404, "NotFound", f'{resource} "{name}" not found')
            return self._send(200, self.api.objects[key])
        if method == "GET":
            if query.get("watch") in ("true", "1"):
                return self._send(200, b"", "application/json")
            field = dict(t.split("=", 1) for t in filter(None, query.get("fieldSelector", "").split(",")))
            items = [o for (g, r, ns, n), o in self.api.objects.items()
                     if (g, r) == (gv, resource) and (not namespace or ns == namespace)
                     and _matches(query.get("labelSelector", ""), o["metadata"].get("labels", {}))
                     and field.get("metadata.name", n) == n]
            return self._send(200, {"kind": f"{kind}List", "apiVersion": gv, "metadata": {"resourceVersion": "1"},
                                    "items": items})
        return self._status(405, "MethodNotAllowed", method)

    def do_GET(self) -> None:  # noqa: N802
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._route("PUT")

    def do_PATCH(self) -> None:  # noqa: N802
        self._route("PATCH")

    def do_DELETE(self) -> None:  # noqa: N802
        self._route("DELETE")
