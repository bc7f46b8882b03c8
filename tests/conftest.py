"""Shared test set-up: the repository root on sys.path, and where the upstream contracts live."""

import os
import sys
from pathlib import Path

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
