"""Fixtures for the Kubernetes layer: the environments from cdk.json, parsed once."""

import json

import pytest

from config import load_environment
from tests.conftest import REPO_ROOT


def _environments() -> dict:
    return json.loads((REPO_ROOT / "cdk.json").read_text())["context"]["environments"]


ENV_NAMES = sorted(_environments())


@pytest.fixture(scope="session")
def environments():
    raw = _environments()
    return {name: load_environment(raw, name) for name in raw}


@pytest.fixture(scope="session")
def dev(environments):
    return environments["dev"]


@pytest.fixture(scope="session")
def prod(environments):
    return environments["prod"]
