"""A stateful fake of the Kubernetes API server on loopback, as the training drain's Lambda
(cdk_constructs/teardown_handlers/training_drain.py) uses it: runs that own what they create,
the controllers that recreate it, and the garbage collector. The `kubernetes` fixture (conftest.py)
serves one."""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

NAMESPACE, CLAIM = "training", "fsx-pvc"


V1_KINDS = frozenset({"pytorchjobs", "mpijobs", "jobs"})
# Under trainingApi v2 the operator stays for the NCCL validation's MPIJob only (no PyTorchJob CRD).
V2_KINDS = frozenset({"trainjobs", "jobsets", "mpijobs", "jobs"})


class FakeKubernetes:
    """The part of the API server the drain uses, with state and the controllers that matter.

    Runs own what they create, as ownerReferences do: a TrainJob its JobSet, a JobSet its Job, a
    run its pods. Before each request the fake acts as the cluster between two requests: the
    garbage collector removes objects whose owner is gone and starts terminating such pods; then
    Trainer re-applies the JobSet of every TrainJob, JobSet creates the missing Job of every
    JobSet, and the Job controller starts a pod for each missing one of a JobSet Job's `nodes`. A
    terminating pod goes after it was listed `grace_lists` more times (its grace period, in polls);
    a pod with a finalizer never goes. A kind outside `served` answers 404, as a kind without its
    CRD does. Records every request with its bearer token."""

    def __init__(self, *, served=V1_KINDS, grace_lists: int = 1):
        self.served, self.grace_lists = set(served), grace_lists
        self.objects: dict[tuple[str, str], tuple[str, str] | None] = {}  # (resource, name) -> owner
        self.nodes: dict[str, int] = {}  # JobSet Job -> pods it keeps running
        self.pods: dict[str, dict] = {}  # name -> {"owner": (resource, name)|None, "claim", "stuck", "left"}
        self.elsewhere: set[tuple[str, str, str]] = set()  # (resource, namespace, name) outside NAMESPACE
        self.created = 0  # pods the Job controller started
        self.requests: list[tuple[str, str, str]] = []

    def add_run(self, resource: str, name: str, pods: int) -> None:
        self.objects[(resource, name)] = None
        for i in range(pods):
            self.add_pod(f"{name}-worker-{i}", owner=(resource, name))

    def add_trainjob(self, name: str, nodes: int) -> None:
        """A TrainJob whose JobSet of one Job of `nodes` pods the controllers create."""
        self.objects[("trainjobs", name)] = None
        self.nodes[f"{name}-node-0"] = nodes
        self._reconcile()

    def add_jobset(self, name: str, nodes: int) -> None:
        """A JobSet nobody owns (made by hand)."""
        self.objects[("jobsets", name)] = None
        self.nodes[f"{name}-node-0"] = nodes
        self._reconcile()

    def add_pod(self, name: str, *, owner: tuple[str, str] | None = None, claim: bool = True,
                stuck: bool = False) -> None:
        self.pods[name] = {"owner": owner, "claim": claim, "stuck": stuck, "left": None}

    def kinds_left(self) -> set[str]:
        return {resource for resource, _ in self.objects}

    def _terminate(self, name: str) -> None:
        if self.pods[name]["left"] is None:
            self.pods[name]["left"] = self.grace_lists

    def _reconcile(self) -> None:
        while orphans := [key for key, owner in self.objects.items() if owner and owner not in self.objects]:
            for key in orphans:
                del self.objects[key]
        for name, pod in self.pods.items():
            if pod["owner"] and pod["owner"] not in self.objects:
                self._terminate(name)
        for resource, name in list(self.objects):
            if resource == "trainjobs":
                self.objects.setdefault(("jobsets", name), ("trainjobs", name))
        for resource, name in list(self.objects):
            if resource == "jobsets":
                self.objects.setdefault(("jobs", f"{name}-node-0"), ("jobsets", name))
        for resource, name in list(self.objects):
            if resource == "jobs" and name in self.nodes:
                running = [p for p in self.pods.values() if p["owner"] == ("jobs", name) and p["left"] is None]
                for _ in range(self.nodes[name] - len(running)):
                    self.created += 1
                    self.add_pod(f"{name}-{self.created}", owner=("jobs", name))

    def answer(self, method: str, target: str, token: str) -> tuple[int, dict]:
        path, query = urlsplit(target).path, parse_qs(urlsplit(target).query)
        self.requests.append((method, path, token))
        self._reconcile()
        parts = path.strip("/").split("/")
        if method == "GET" and parts[-1] in self.served and path == f"{PREFIXES[parts[-1]]}/{parts[-1]}":
            names = sorted([(NAMESPACE, n) for r, n in self.objects if r == parts[-1]]
                           + [(ns, n) for r, ns, n in self.elsewhere if r == parts[-1]])
            limit = int(query["limit"][0])
            return 200, {"kind": "List", "metadata": {"continue": "next"} if len(names) > limit else {},
                         "items": [{"metadata": {"namespace": ns, "name": n}} for ns, n in names[:limit]]}
        if method == "GET" and path == f"/api/v1/namespaces/{NAMESPACE}/pods":
            for name, pod in list(self.pods.items()):
                if pod["left"] is not None and not pod["stuck"]:
                    if pod["left"] == 0:
                        del self.pods[name]
                    else:
                        pod["left"] -= 1
            volumes = [{"name": "fsx", "persistentVolumeClaim": {"claimName": CLAIM}}]
            return 200, {"kind": "PodList", "items": [
                {"metadata": {"name": n, **({"deletionTimestamp": "2026-11-25T22:00:00Z"} if p["left"] is not None else {})},
                 "spec": {"volumes": volumes if p["claim"] else [{"name": "tmp", "emptyDir": {}}]}}
                for n, p in self.pods.items()]}
        if method == "DELETE" and parts[-2:-1] == ["pods"]:
            if parts[-1] not in self.pods:
                return 404, {"kind": "Status", "message": "not found"}
            self._terminate(parts[-1])
            return 200, {"kind": "Pod"}
        if method == "DELETE" and parts[-1] in self.served and f"/{'/'.join(parts[:-3])}" == PREFIXES[parts[-1]]:
            for key in [k for k in self.objects if k[0] == parts[-1]]:
                del self.objects[key]  # background propagation: owners now, what they own at the next request
            return 200, {"kind": "Status", "status": "Success"}
        return 404, {"kind": "Status", "message": "the server could not find the requested resource"}


# Where each kind is served: its group and version (k8s/pods/trainjob.py, the contracts' CRDs).
PREFIXES = {"trainjobs": "/apis/trainer.kubeflow.org/v1alpha1", "jobsets": "/apis/jobset.x-k8s.io/v1alpha2",
            "pytorchjobs": "/apis/kubeflow.org/v1", "mpijobs": "/apis/kubeflow.org/v1", "jobs": "/apis/batch/v1"}


@contextmanager
def serving():
    """(url, FakeKubernetes) on a loopback HTTP server."""
    cluster = FakeKubernetes()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self):
            token = self.headers.get("Authorization", "").removeprefix("Bearer ")
            if self.headers.get("Content-Length"):
                self.rfile.read(int(self.headers["Content-Length"]))
            status, body = cluster.answer(self.command, self.path, token)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_DELETE = _serve  # noqa: N815 - http.server's naming

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", cluster
    finally:
        server.shutdown()
