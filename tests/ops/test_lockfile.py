"""ops.lockfile: pip-compile's output, filtered to what the trainer images take from PyPI."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ops import lockfile

COMPILED = """\
filelock==4.3.1 \\
    --hash=sha256:{a} \\
    --hash=sha256:{b}
    # via
    #   huggingface-hub
    #   torch
jinja2==3.1.6 \\
    --hash=sha256:{a}
    # via torch
nvidia-cublas==13.1.1.3 \\
    --hash=sha256:{a}
    # via
    #   cuda-toolkit
    #   torch
cuda-toolkit==13.0.3.0 \\
    --hash=sha256:{b}
    # via torch
cuda-pathfinder==1.9.1 \\
    --hash=sha256:{a}
    # via cuda-bindings
cuda-bindings==13.5.0 \\
    --hash=sha256:{b}
    # via torch
PyYAML==6.0.4 \\
    --hash=sha256:{b}
    # via -r trainer/requirements.txt
torch==2.13.0 \\
    --hash=sha256:{a}
    # via
    #   -r trainer/requirements.txt
    #   torchvision
torchvision==0.28.0 \\
    --hash=sha256:{b}
    # via -r trainer/requirements.txt
""".format(a="a" * 64, b="b" * 64)


def test_the_images_lock_keeps_what_torch_needs_on_every_build_and_drops_the_cuda_build():
    lock = lockfile.image_lock(lockfile.parse_lock(COMPILED))
    assert list(lock) == ["filelock", "jinja2", "pyyaml"]
    assert lock["filelock"].hashes == ["a" * 64, "b" * 64] and lock["filelock"].via == {"huggingface-hub", "torch"}


def test_a_cuda_named_package_that_requirements_txt_pins_itself_stays_in_the_lock():
    """nvidia-nvjpeg is what --decode nvimgcodec loads, pinned in trainer/requirements.txt; the
    nvidia-* packages only torch's CUDA build needs are still dropped."""
    compiled = lockfile.parse_lock(COMPILED + "nvidia-nvjpeg==13.3.2.43 \\\n    --hash=sha256:" + "c" * 64
                                   + "\n    # via -r trainer/requirements.txt\n")
    lock = lockfile.image_lock(compiled, {"nvidia-nvjpeg", "torch", "pyyaml"})
    assert list(lock) == ["filelock", "jinja2", "nvidia-nvjpeg", "pyyaml"]
    assert "nvidia-nvjpeg" not in lockfile.image_lock(compiled)


def test_a_rendered_lock_parses_back_to_the_same_pins_and_hashes():
    lock = lockfile.image_lock(lockfile.parse_lock(COMPILED))
    again = lockfile.parse_lock(lockfile.render_lock(lock))
    assert {n: (e.version, sorted(e.hashes)) for n, e in again.items()} == \
        {n: (e.version, sorted(e.hashes)) for n, e in lock.items()}


def test_pins_normalize_names():
    assert lockfile.pins("PyYAML==6.0.3\nhuggingface_hub==2.4.0\n# torch==1\n") == {
        "pyyaml": "6.0.3", "huggingface-hub": "2.4.0"}


def test_pins_read_a_pin_with_extras():
    """requirements.txt's moto[server]: missed before, so a check of its pins skipped moto."""
    assert lockfile.pins("moto[server]==5.2.5\ntorch==2.13.0 ; python_version<'3.12'\n") == {
        "moto": "5.2.5", "torch": "2.13.0"}


def test_the_cli_writes_both_files_from_a_compiled_input(tmp_path, monkeypatch, capsys):
    compiled = tmp_path / "compiled.txt"
    compiled.write_text(COMPILED)
    monkeypatch.setattr(lockfile, "LOCK", tmp_path / "requirements.lock")
    monkeypatch.setattr(lockfile, "TORCH_REQUIREMENTS", tmp_path / "requirements-torch.txt")
    assert lockfile.main(["--compiled", str(compiled)]) == 0
    assert list(lockfile.parse_lock((tmp_path / "requirements.lock").read_text())) == ["filelock", "jinja2", "pyyaml"]
    assert "torch==2.13.0\ntorchvision==0.28.0\n" in (tmp_path / "requirements-torch.txt").read_text()


def _file(directory, name: str, content: bytes):
    path = directory / name
    path.write_bytes(content)
    return path


@pytest.mark.parametrize("make_input, message", [
    (lambda d: d / "missing.txt", "no such file"),
    (lambda d: d, "no such file"),  # a directory
    (lambda d: _file(d, "binary", b"\xff\xfe\x00"), "cannot read it"),
    (lambda d: _file(d, "notes.txt", b"hello\n"), "not pip-compile output"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, make_input, message):
    path = make_input(tmp_path)
    result = subprocess.run([sys.executable, "-m", "ops.lockfile", "--compiled", str(path)],
                            capture_output=True, text=True, timeout=60, cwd=lockfile.REPO_ROOT)
    assert result.returncode == 2 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ") and message in line
