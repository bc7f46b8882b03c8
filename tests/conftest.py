"""Shared test set-up: the repository root on sys.path, and where the upstream contracts live."""

import contextlib
import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
CONTRACTS_DIR = REPO_ROOT.parent / "shared" / "contracts"


def contract(*parts: str) -> Path:
    """The path of an upstream artifact under CONTRACTS_DIR; the test skips, saying which, when it is
    not there (a clone without ../shared/contracts/, as on a fresh CI machine)."""
    import pytest

    path = CONTRACTS_DIR.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"upstream contract {path} not found (../shared/contracts/ is absent): "
                    "conformance not checked")
    return path

if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

# transformers imports torchvision whenever it is installed, and PyPI's torchvision needs this
# before it imports beside the CPU torch (trainer/torchvision_compat.py).
from trainer.torchvision_compat import prepare  # noqa: E402

prepare()

os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")



_SCRATCH: list[str] = []


@pytest.hookimpl(trylast=True)  # after pytest's tmpdir plugin has made its factory
def pytest_configure(config):
    """Everything the suite makes with `tempfile` lands in one folder per test process, removed when
    that process ends: synth outputs (about 60 MB each, a few hundred MB a module), jsii's and cdk8s's
    scratch folders and torchrun's log folders were left in /tmp, about 4 GB a run, until a CI machine
    ran out of disk. The children the tests start inherit TMPDIR; xdist's workers make theirs inside
    the controller's. pytest's own tmp_path folders stay where pytest puts them (fixed here, before
    TMPDIR moves), and pytest.ini keeps only those of failed tests."""
    import tempfile

    config._tmp_path_factory.getbasetemp()
    scratch = tempfile.mkdtemp(prefix="eks-tests-")
    _SCRATCH.append(scratch)
    os.environ["TMPDIR"] = tempfile.tempdir = scratch


def pytest_unconfigure(config):
    import shutil

    for scratch in _SCRATCH:
        shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def _job_vars_kept():
    """A test or a module that calls trainer.dist.init here leaves RANK, WORLD_SIZE and LOCAL_RANK in
    this test process's environment, and every child a later test starts with a copy of it would
    take them for a job to join (seen: a module-scoped init in test_retention, then the preemption
    drill's children failed for want of MASTER_ADDR). Until 1b2e084 init also left a MASTER_PORT
    chosen free, which every later child then bound. Each test and each module ends with these
    variables as it found them."""
    from trainer.dist import JOB_VARS

    before = {k: os.environ.get(k) for k in JOB_VARS}
    yield
    for k, v in before.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(autouse=True, scope="module")
def _no_job_vars_leak_from_a_module():
    with _job_vars_kept():
        yield


@pytest.fixture(autouse=True)
def _no_job_vars_leak_from_a_test():
    with _job_vars_kept():
        yield
