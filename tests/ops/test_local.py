"""`python -m ops local`: `make local` runs a preset under torchrun on a real etcd, then stops etcd."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from config.presets import PRESETS
from ops import local

REPO = Path(__file__).resolve().parents[2]


def _run_local(*argv: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(local.child_env(), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "ops", "local", *argv], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _port_open(endpoint: str) -> bool:
    host, port = endpoint.rsplit(":", 1)
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, int(port))) == 0


def test_the_local_command_is_the_preset_command_and_the_topology_the_pet_variables_of_a_trainjob():
    from k8s.pods.torchrun_env import RENDEZVOUS, TRAINER_INJECTED

    preset = PRESETS["cpu-ddp"]
    argv = local.torchrun_command(preset, "/tmp/ck")
    assert argv == [sys.executable, *preset.command("/tmp/ck")[1:]]  # the pods' command, unchanged
    env = local.torchrun_env(preset, "127.0.0.1:2379", "run-1")
    # Every variable a TrainJob's pod gets (Trainer's five, our runtime's four), nothing else.
    assert set(env) == set(TRAINER_INJECTED) | set(RENDEZVOUS)
    assert env["PET_NNODES"] == "1"  # fixed: a node range makes the etcd rendezvous wait ~36 s
    assert (env["PET_NPROC_PER_NODE"], env["PET_NODE_RANK"]) == (str(preset.local_nproc), "0")
    assert (env["PET_RDZV_BACKEND"], env["PET_RDZV_ENDPOINT"], env["PET_RDZV_ID"]) == ("etcd-v2", "127.0.0.1:2379", "run-1")
    assert env["PET_MAX_RESTARTS"] == str(preset.max_restarts)


needs_etcd = pytest.mark.skipif(not (Path("/usr/bin/etcd").exists() or local.shutil.which("etcd")),
                                reason="etcd not installed (make etcd installs it)")


@pytest.mark.slow
@needs_etcd
def test_cpu_ddp_runs_on_a_real_etcd_ends_with_a_summary_and_stops_etcd(tmp_path):
    p = _run_local("--job", "cpu-ddp", "--checkpoint-root", str(tmp_path))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    endpoint = re.search(r"etcd ready at (\S+) in ([\d.]+) s", p.stdout)
    assert endpoint, p.stdout
    assert "PET_RDZV_BACKEND=etcd-v2" in p.stdout
    summary = p.stdout[p.stdout.index("== local run of cpu-ddp: ok"):]
    for field in ("epochs         20", "samples/s", "final loss", "snapshot", "etcd start-up"):
        assert field in summary, summary
    final_loss = float(re.search(r"final loss\s+([\d.]+)", summary)[1])
    assert final_loss < 0.5
    assert (tmp_path / "cpu-ddp" / "snapshot.pt").is_file()
    assert not _port_open(endpoint[1]), "etcd must be stopped after the run"


def test_an_unknown_job_is_one_line_naming_the_field():
    p = _run_local("--job", "nope", timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "--job" in p.stderr and "cpu-ddp" in p.stderr


def test_gpu_presets_are_refused_locally_in_one_line():
    p = _run_local("--job", "llama3-8b-fsdp", timeout=60)
    assert p.returncode == 2 and "--job" in p.stderr and "Traceback" not in p.stderr


@needs_etcd
def test_etcd_stops_when_the_job_fails(tmp_path):
    binary = local.find_etcd(None)
    with pytest.raises(RuntimeError):
        with local.etcd_server(binary) as etcd:
            endpoint = etcd.endpoint
            assert _port_open(endpoint)
            raise RuntimeError("the job failed")
    assert not _port_open(endpoint)


@needs_etcd
def test_etcd_chooses_other_ports_when_another_process_took_one_first(monkeypatch):
    """A port chosen free can be bound by another process before etcd binds it; the first pair
    here is a port a listener holds, and etcd starts on the next pair instead of failing the run."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        free = local._free_port
        ports = iter([held.getsockname()[1], free()])
        monkeypatch.setattr(local, "_free_port", lambda: next(ports, None) or free())
        with local.etcd_server(local.find_etcd(None)) as etcd:
            assert etcd.endpoint != f"127.0.0.1:{held.getsockname()[1]}"
            assert _port_open(etcd.endpoint)
            assert next(ports, "used") == "used"  # the held pair was tried first


@pytest.mark.slow
@needs_etcd
def test_llm_tiny_hf_starts_from_a_generated_hf_directory_and_ends_with_an_export_transformers_loads(tmp_path):
    p = _run_local("--job", "llm-tiny-hf", "--checkpoint-root", str(tmp_path))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    job = tmp_path / "llm-tiny-hf"
    assert "Initialised" in p.stdout and "Hugging Face checkpoint" in p.stdout  # started from the HF weights
    assert "== local run of llm-tiny-hf: ok" in p.stdout
    last = p.stdout.strip().splitlines()[-1]
    assert last.startswith(f"Hugging Face export {job / 'hf-export'} loads in transformers: LlamaForCausalLM")
    assert (job / "hf-export" / "tokenizer.json").is_file()  # copied from the directory it started from


@pytest.mark.slow
@needs_etcd
def test_vision_tiny_learns_on_a_real_etcd_and_says_where_its_metrics_and_plot_are(tmp_path):
    pytest.importorskip("torchvision", reason="torchvision is a pinned dependency")
    p = _run_local("--job", "vision-tiny", "--checkpoint-root", str(tmp_path))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    summary = p.stdout[p.stdout.index("== local run of vision-tiny: ok"):]
    job = tmp_path / "vision-tiny"
    assert f"metrics        {job / 'metrics.jsonl'}" in summary and f"plot           {job / 'curves.png'}" in summary
    top1 = float(re.search(r"top-1 / top-5\s+([\d.]+)", summary)[1])
    assert top1 > 0.5  # ten classes: chance is 0.1
    assert (job / "curves.png").stat().st_size > 10_000 and f"wrote {job / 'curves.png'}" in p.stdout


def test_an_etcd_that_does_not_start_leaves_the_last_runs_checkpoints_alone(tmp_path, capsys):
    from ops import cli

    fake = tmp_path / "etcd"
    fake.write_text("#!/bin/sh\necho 'flag provided but not defined: -enable-v2'\nexit 2\n")
    fake.chmod(0o755)
    root = tmp_path / "checkpoints"
    kept = Path(PRESETS["cpu-ddp"].job_dir(str(root))) / "snapshot.pt"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"last run")
    assert cli.main(["local", "--job", "cpu-ddp", "--checkpoint-root", str(root), "--etcd", str(fake)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: --etcd: {fake} did not become ready") and "flag provided" in line
    assert kept.read_bytes() == b"last run"


def test_a_job_past_its_timeout_is_stopped_and_says_so(tmp_path, monkeypatch):
    """The deadline stops the job as Ctrl-C does; here the job is a process that ignores nothing."""
    monkeypatch.setattr(local, "torchrun_command", lambda *a: [sys.executable, "-c", "import time; time.sleep(600)"])
    with pytest.raises(local.LocalRunError, match="--timeout: the job ran longer than 1 s"):
        local.run_job(PRESETS["cpu-ddp"], "127.0.0.1:1", str(tmp_path), timeout_s=1)
