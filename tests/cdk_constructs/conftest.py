"""Shared by the custom-resource handler tests: a moto server on loopback for AWS, and a
loopback HTTP server standing in for CloudFormation's pre-signed response URL."""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from tests.conftest import REPO_ROOT

HANDLERS = REPO_ROOT / "cdk_constructs" / "teardown_handlers"
sys.path.insert(0, str(HANDLERS))  # the Lambdas' own import root


@pytest.fixture(scope="module")
def endpoint():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    with pytest.MonkeyPatch.context() as mp:
        for key in [k for k in os.environ if k.startswith("AWS_")]:
            mp.delenv(key)
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.setenv("AWS_REGION", "us-west-2")
        mp.setenv("AWS_DEFAULT_REGION", "us-west-2")
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        mp.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
        yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def cloudformation():
    """A loopback HTTP server that records the custom-resource replies PUT to it."""
    replies: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self):  # noqa: N802 - http.server's naming
            replies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/reply", replies
    server.shutdown()


@pytest.fixture
def kubernetes():
    """(url, FakeKubernetes): the fake Kubernetes API server of fake_kubernetes.py on loopback."""
    from fake_kubernetes import serving

    with serving() as served:
        yield served
