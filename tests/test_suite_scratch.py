"""The suite cleans up after itself: what its tests make with `tempfile` (synth outputs, jsii's and
cdk8s's folders, torchrun's logs), in its own process, its xdist workers and their children, is gone
when it ends, and so is a passing test's tmp_path. A run used to leave about 4 GB in /tmp, and a CI
machine ran out of disk in the middle of one."""

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

LEAKY = '''
import subprocess, sys, tempfile
from pathlib import Path


def test_leaves_folders(tmp_path):
    (Path(tempfile.mkdtemp(prefix="synth-")) / "template.json").write_text("{}")
    (tmp_path / "kept-only-if-failed").write_text("x")
    subprocess.run([sys.executable, "-c", "import tempfile; tempfile.mkdtemp(prefix='torchelastic_')"],
                   check=True, timeout=60)


def test_also(tmp_path):
    tempfile.NamedTemporaryFile(delete=False).write(b"x")
'''


def test_a_run_on_two_workers_leaves_nothing_in_tmpdir(tmp_path):
    outside, tests = tmp_path / "tmp", tmp_path / "tests"
    outside.mkdir()
    tests.mkdir()
    (tests / "test_leaky.py").write_text(LEAKY)
    env = {**os.environ, "TMPDIR": str(outside), "PYTHONPATH": str(REPO_ROOT / "tests")}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "-c", str(REPO_ROOT / "pytest.ini"),
         "-p", "conftest", "--rootdir", str(tmp_path), str(tests)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout
    left = sorted(str(p.relative_to(outside)) for p in outside.rglob("*"))
    # pytest's numbered-folder root may stay (empty); nothing else may.
    assert all(p.startswith("pytest-of-") and not Path(outside, p).is_file() for p in left), left
    assert len(left) <= 1, left
