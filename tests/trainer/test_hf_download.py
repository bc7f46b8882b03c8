"""`python -m trainer.hf_download`, the model-download Job's command, run for real against a hub on
loopback (tests/trainer/hub_fake.py via HF_ENDPOINT): nothing reaches the network."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from hub_fake import FakeHub, Repo
from trainer.hf_download import MARKER, staging_dir
from trainer_procs import REPO, Job

REPO_ID = "meta-llama/Tiny-2-hf"
FILES = {
    "config.json": b'{"model_type": "llama"}',
    "tokenizer.json": b'{"version": "1.0"}' * 50,
    "model-00001-of-00001.safetensors": os.urandom(3 << 20),
}
TOKEN = "hf_ThisIsNotARealTokenButAssertItNeverShows"


@pytest.fixture
def hub(monkeypatch, tmp_path):
    hub = FakeHub({REPO_ID: Repo(dict(FILES))})
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("DOWNLOAD_LOG_EVERY_S", "0")
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    yield hub
    hub.close()


def run(out, repo=REPO_ID, **env):
    return subprocess.run([sys.executable, "-m", "trainer.hf_download", "--repo", repo, "--out", str(out)],
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), **env},
                          capture_output=True, text=True, timeout=120)


def tree(directory) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*")
            if p.is_file() and ".cache" not in p.relative_to(directory).parts and p.name != MARKER}


def test_download_writes_every_file_then_the_marker_and_logs_progress_lines(hub, tmp_path):
    out = tmp_path / "models" / "Tiny-2-hf"
    done = run(out)
    assert done.returncode == 0, done.stderr
    assert tree(out) == FILES
    marker = json.loads((out / MARKER).read_text())
    assert marker == {"repo": REPO_ID, "revision": "main", "commit": hub.repos[REPO_ID].commit,
                      "files": 3, "bytes": sum(len(v) for v in FILES.values())}
    assert not staging_dir(out).exists()
    progress = [line for line in done.stdout.splitlines() if line.startswith("progress: ")]
    assert any("3/3" in line for line in progress), done.stdout
    assert "\r" not in done.stdout
    assert done.stdout.splitlines()[-1].startswith(f"complete: {REPO_ID}")

    again = run(out)
    assert again.returncode == 0 and "nothing to do" in again.stdout
    assert hub.gets(".safetensors") == 1


def test_a_killed_download_is_never_taken_as_complete_and_a_rerun_resumes(hub, tmp_path, monkeypatch):
    out = tmp_path / "models" / "Tiny-2-hf"
    hub.hold = "model-00001-of-00001.safetensors"
    job = Job([sys.executable, "-m", "trainer.hf_download", "--repo", REPO_ID, "--out", str(out)])
    try:
        # The two small files are in, the weights half-sent: kill it there, as a pod eviction would.
        job.wait_for(r"^progress: Fetching 3 files.* 2/3")
        assert hub.half_sent.wait(60)
        os.killpg(job.proc.pid, signal.SIGKILL)
        job.proc.wait(30)
    finally:
        hub.release.set()
    assert not out.exists()
    staged = tree(staging_dir(out))
    assert staged == {k: v for k, v in FILES.items() if not k.endswith(".safetensors")}

    hub.hold = None
    done = run(out)
    assert done.returncode == 0, done.stderr
    assert tree(out) == FILES
    # Resumed: the completed files were checked (HEAD) but not fetched again.
    assert hub.gets("config.json") == 1 and hub.gets("tokenizer.json") == 1
    assert hub.gets(".safetensors") == 2
    assert not list((out / ".cache").rglob("*.incomplete"))


def test_a_gated_repository_without_a_token_is_one_line_and_exit_2(hub, tmp_path):
    hub.repos[REPO_ID].token = TOKEN
    out = tmp_path / "models" / "Tiny-2-hf"
    refused = run(out)
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert f"{REPO_ID} is gated" in refused.stderr and "ops model token" in refused.stderr
    assert not out.exists() and not staging_dir(out).exists()

    done = run(out, HF_TOKEN=TOKEN)
    assert done.returncode == 0, done.stderr
    assert tree(out) == FILES
    assert TOKEN not in done.stdout + done.stderr + refused.stdout + refused.stderr
    assert {auth for method, _, auth in hub.requests if method == "GET" and "/resolve/" in _} == {f"Bearer {TOKEN}"}


def test_a_directory_that_is_not_a_completed_download_is_refused(hub, tmp_path):
    out = tmp_path / "models" / "Tiny-2-hf"
    out.mkdir(parents=True)
    (out / "notes.txt").write_text("someone else's")
    refused = run(out)
    assert refused.returncode == 2
    assert refused.stderr.strip() == f"error: --out: {out} exists and is not a completed download; move it away first"
    assert not hub.requests


def test_the_model_download_jobs_own_command_runs_against_the_hub(hub, tmp_path):
    """The command k8s/model_download.py puts in the Job, only its interpreter and the FSx path
    swapped for this machine's."""
    from k8s.pods.model_download import ModelDownload, model_download_manifest
    from ops.envconfig import load

    manifest = model_download_manifest(load("dev"), ModelDownload.of(REPO_ID), image="trainer:1")
    command = manifest["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:3] == ["python", "-m", "trainer.hf_download"]
    out = tmp_path / "fsx" / "models" / "Tiny-2-hf"
    argv = [sys.executable, *command[1:]]
    argv[argv.index("--out") + 1] = str(out)
    done = subprocess.run(argv, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert tree(out) == FILES


def test_a_transfer_cut_short_resumes_with_a_range_request_in_the_same_run(hub, tmp_path):
    """huggingface_hub resumes from the last whole chunk it wrote (DOWNLOAD_CHUNK_SIZE), so the
    file is larger than one chunk and the cut falls past the first."""
    from huggingface_hub.constants import DOWNLOAD_CHUNK_SIZE

    files = {"config.json": b"{}", "big.safetensors": os.urandom(2 * DOWNLOAD_CHUNK_SIZE + 1000)}
    hub.repos[REPO_ID] = Repo(files)
    hub.drop_once = "big.safetensors"
    out = tmp_path / "models" / "Tiny-2-hf"
    done = run(out)
    assert done.returncode == 0, done.stderr
    assert tree(out) == files
    assert hub.ranges == [("big.safetensors", f"bytes={DOWNLOAD_CHUNK_SIZE}-")]
    assert hub.gets("big.safetensors") == 2


def test_a_hub_that_cannot_be_reached_is_one_line_naming_the_endpoint_and_exit_1(tmp_path):
    """Before: a crash report (httpx's ConnectError traceback). Now one line naming the endpoint and
    the error, exit 1 (a re-run may find the hub back), and nothing left in --out."""
    import socket

    with socket.socket() as closed:  # bound and not listening: a connection is refused at once
        closed.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
        out = tmp_path / "models" / "Tiny-2-hf"
        refused = run(out, HF_ENDPOINT=endpoint)
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1 and refused.stderr.startswith(
        f"error: cannot reach the Hugging Face hub at {endpoint} (ConnectError: "), refused.stderr
    assert "traceback" not in refused.stderr and not out.exists()
