"""A recording fake Kubernetes API server for the ops tests.

It replaces only HTTP: it stands in for the urllib3 PoolManager under a kubernetes ApiClient, so the
real kubernetes client and kubeflow-training SDK run above it as they would against a cluster.
Routes answer by (method, path); every request is recorded.
"""

from __future__ import annotations

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


class FakeApiServer:
    """Stands in for urllib3.PoolManager: answers by (method, path), records every request."""

    def __init__(self):
        self.calls: list[Call] = []
        self.routes: dict[tuple[str, str], tuple[int, object]] = {}

    def on(self, method: str, path: str, body: object, status: int = 200) -> None:
        self.routes[(method, path)] = (status, body)

    def request(self, method, url, fields=None, body=None, preload_content=True, headers=None, **_):
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query)) | dict(fields or [])
        self.calls.append(Call(method, parts.path, query, json.loads(body) if body else None, dict(headers or {})))
        status, payload = self.routes.get((method, parts.path), (404, {
            "kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404,
            "message": f"{parts.path} not found"}))
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
