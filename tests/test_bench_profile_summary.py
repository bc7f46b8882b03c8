"""bench/profile_summary.py: py-spy's raw stacks summed per thread, the profiled process's threads
apart from its children's (the loader processes), and a bad file refused in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import profile_summary  # noqa: E402

TOP = 'process 10:"python -m trainer.vision"'
CHILD = f'{TOP};process 11:"python -m trainer.vision"'
RAW = "\n".join([
    f"{TOP};thread (10): MainThread;main (trainer/vision.py:80);step (trainer/vision.py:102);backward (torch/x.py:1) 6",
    f"{TOP};thread (10): MainThread;main (trainer/vision.py:80);wait (threading.py:359) 2",
    f"{TOP};thread (12): Thread-1 (_pin_memory_loop);select (selectors.py:415) 2",
    f"{CHILD};thread (11): MainThread;__getitem__ (trainer/vision_decode.py:150);read (io.py:1) 10",
]) + "\n"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "bench/profile_summary.py", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60)


def test_threads_are_summed_apart_and_a_child_process_is_named_so(tmp_path):
    profile = tmp_path / "profile.txt"
    profile.write_text(RAW)
    listed = _run(str(profile))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [" 50.0%  child MainThread", " 40.0%  MainThread",
                                          " 10.0%  Thread-1 (_pin_memory_loop)"]
    rows = profile_summary.read_stacks(profile)
    main = profile_summary.summary(rows, "MainThread", 5, exact=True)
    assert main.splitlines()[0] == "MainThread: 8 samples"
    assert " 75.0%  backward (torch/x.py:1)" in main and " 25.0%  wait (threading.py:359)" in main
    assert " 75.0%  step (trainer/vision.py:102)" in main and " 25.0%  main (trainer/vision.py:80)" in main
    both = profile_summary.summary(rows, "MainThread", 5)  # a part of the name: the child's too
    assert both.splitlines()[0] == "MainThread: 18 samples"
    assert profile_summary.summary(rows, "decode-ahead", 5) == "decode-ahead: no samples"


@pytest.mark.parametrize("kind, make, says", [
    ("missing", lambda tmp: tmp / "missing", "is not a file"),
    ("a directory", lambda tmp: tmp, "is not a file"),
    ("binary", lambda tmp: _write(tmp / "b", b"\x00\xff\xfe" * 50), "holds binary data"),
    ("not UTF-8", lambda tmp: _write(tmp / "b", b"\xff\xfe" * 50), "not UTF-8 text"),
    ("not py-spy's", lambda tmp: _write(tmp / "t", b"hello world 3\n"), "line 1 is not py-spy's raw format"),
    ("empty", lambda tmp: _write(tmp / "e", b""), "it holds no samples"),
])
def test_a_bad_profile_is_one_line_and_exit_2(tmp_path, kind, make, says):
    got = _run(str(make(tmp_path)), "--thread", "MainThread")
    assert got.returncode == 2 and "Traceback" not in got.stderr, (kind, got.stderr)
    assert says in got.stderr.strip().splitlines()[-1], (kind, got.stderr)


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_a_huge_profile_is_refused_at_its_first_bad_line_not_read_whole(tmp_path):
    """The whole file was read into memory first: a 20 GB file (sparse, of NUL bytes) was killed by
    the OOM killer. Under a 1 GiB address-space limit, 2 GiB of NUL bytes must end in one line."""
    import resource

    profile = tmp_path / "profile.txt"
    with open(profile, "wb") as f:
        f.truncate(2 << 30)
    limit = 1 << 30
    got = subprocess.run([sys.executable, "bench/profile_summary.py", str(profile)], cwd=REPO, capture_output=True,
                         text=True, timeout=60,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    assert got.returncode == 2 and "Traceback" not in got.stderr, got.stderr
    assert got.stderr.strip().splitlines()[-1].endswith(f"profile: {profile}:1 holds binary data (a NUL byte), "
                                                        "expected text")
