"""Fixtures for the ops tests: a real moto server on loopback, reset per test.

Nothing here is autouse: tests/ops also holds other packages' tests, which ask for none of it.
"""

from __future__ import annotations

import os
import urllib.request

import pytest

from ops_fakes import isolated_aws_env


@pytest.fixture(scope="module")
def moto_endpoint(tmp_path_factory):
    """One moto server per test module, on a free loopback port, with this process's boto3
    pointed at it (and away from any real credentials, config or instance metadata) for as
    long as the module runs."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    with pytest.MonkeyPatch.context() as mp:
        for key in [k for k in os.environ if k.startswith(("AWS_", "MOTO_"))]:
            mp.delenv(key)
        for key, value in isolated_aws_env(tmp_path_factory.mktemp("home"), endpoint).items():
            if key.startswith("AWS_"):
                mp.setenv(key, value)
        yield endpoint
    server.stop()


@pytest.fixture
def aws(monkeypatch, moto_endpoint):
    """A freshly reset moto server answering as account 222222222222 (prod's account in
    cdk.json). The server runs in this process and reads MOTO_ACCOUNT_ID per request, so a test
    can set another to play someone else's credentials."""
    urllib.request.urlopen(urllib.request.Request(f"{moto_endpoint}/moto-api/reset", method="POST")).read()
    monkeypatch.setenv("MOTO_ACCOUNT_ID", "222222222222")
    return moto_endpoint
