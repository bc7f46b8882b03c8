"""Fixtures for the Kubernetes layer: the environments from cdk.json, parsed once."""

import pytest

from config import load_environment
from k8s_walk import raw_environments


@pytest.fixture(scope="session")
def environments():
    raw = raw_environments()
    return {name: load_environment(raw, name) for name in raw}


@pytest.fixture(scope="session")
def dev(environments):
    return environments["dev"]


@pytest.fixture(scope="session")
def prod(environments):
    return environments["prod"]
