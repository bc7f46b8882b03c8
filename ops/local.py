"""Run a job preset on this machine the way the cluster runs it: `python -m ops local --job cpu-ddp`.

A real etcd (v2 API, as the in-cluster etcd Service speaks it) starts on loopback with a
throw-away data folder, torchrun joins it with the etcd-v2 rendezvous, and the workload gets
the very arguments the PyTorchJob renders from the same preset; only the checkpoint root
differs. torchrun gets no topology flags: it reads the PET_* variables a TrainJob's pod gets
(k8s/pods/torchrun_env.py), with one machine's values. etcd is stopped afterwards, on failure and
on Ctrl-C too.

The node count is fixed (PET_NNODES=1, not a range): with min < max the etcd rendezvous waits out
its last-call timeout, about 36 s here, before starting (NOTES.md).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from config import paths
from config.kubernetes import EXIT_INTERRUPTED
from config.presets import PRESETS, JobPreset
from ops import proc
from ops.errors import OpsError

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CHECKPOINT_ROOT = ".local/checkpoints"
DEFAULT_TIMEOUT_S = 3600.0  # the CPU presets finish in minutes; a wedged rendezvous must not run forever
STOP_GRACE_S = 60  # SIGTERM to SIGKILL: the workers' checkpoint on SIGTERM takes seconds
STEP_TIMEOUT_S = 600  # a before or after step (a tiny model, an export, a plot)


class LocalRunError(OpsError):
    """A local run that cannot start (no etcd, a GPU preset, a failed before-step): exit 2."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Etcd:
    endpoint: str
    startup_s: float


def find_etcd(explicit: str | None) -> str:
    if explicit:
        if not Path(explicit).is_file() or not os.access(explicit, os.X_OK):
            raise LocalRunError(f"--etcd: {explicit} is not an executable file")
        return explicit
    path = shutil.which("etcd") or ("/usr/bin/etcd" if Path("/usr/bin/etcd").exists() else None)
    if not path:
        raise LocalRunError("--etcd: no etcd binary found; `make etcd` installs Debian's etcd-server")
    return path


PORT_ATTEMPTS = 3  # a loopback port chosen free can be taken before etcd binds it


def _start_etcd(binary: str, data_dir: str, deadline: float, ports: tuple[int, int] | None = None):
    """One etcd on two ports chosen free (or the client and peer `ports` given, where a test starts
    it again in place): (process, client port), or None where another process bound a port first
    (etcd's log says "address already in use" and it exits)."""
    client, peer = ports or (_free_port(), _free_port())
    log_path = Path(data_dir) / "etcd.log"
    argv = [binary, "--name", "local", "--data-dir", str(Path(data_dir) / "data"), "--enable-v2",
            "--listen-client-urls", f"http://127.0.0.1:{client}", "--advertise-client-urls", f"http://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"local=http://127.0.0.1:{peer}"]
    try:
        with open(log_path, "wb") as log:
            server = proc.start(argv, stdout=log, stderr=subprocess.STDOUT)
    except OSError as err:  # not a program at all (a text file, another architecture)
        raise LocalRunError(f"--etcd: cannot run {binary} ({err.strerror or err})") from None
    try:
        # Ready means the v2 keys API answers: that is what torch's etcd-v2 rendezvous uses.
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{client}/v2/keys", timeout=1) as r:
                    if r.status == 200:
                        return server, client
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                text = log_path.read_text(errors="replace")
                if server.poll() is not None and "address already in use" in text:
                    return None
                tail = " ".join(text[-600:].split())
                raise LocalRunError(f"--etcd: {binary} did not become ready on 127.0.0.1:{client}: {tail}")
            try:
                server.wait(timeout=0.05)  # bounded poll; returns at once if etcd died
            except subprocess.TimeoutExpired:
                pass
    except BaseException:
        proc.stop(server, grace_s=10)
        raise


@contextmanager
def etcd_server(binary: str, timeout_s: float = 30.0):
    """A single-member etcd on loopback ports, removed with its data when the block exits."""
    t0 = time.monotonic()
    data_dir = tempfile.mkdtemp(prefix="etcd-local-")
    server = None
    try:
        for _ in range(PORT_ATTEMPTS):
            started = _start_etcd(binary, data_dir, t0 + timeout_s)
            if started:
                server, client = started
                break
            shutil.rmtree(Path(data_dir) / "data", ignore_errors=True)
        else:
            raise LocalRunError(f"--etcd: {binary} found its loopback ports taken {PORT_ATTEMPTS} times")
        yield Etcd(f"127.0.0.1:{client}", time.monotonic() - t0)
    finally:
        if server is not None:
            proc.stop(server, grace_s=10)
        shutil.rmtree(data_dir, ignore_errors=True)


def torchrun_command(preset: JobPreset, checkpoint_root: str) -> list[str]:
    """The preset's container command (trainer.launch running torchrun), run by this Python; the
    topology comes from torchrun_env."""
    return [sys.executable, *preset.command(checkpoint_root)[1:]]


def torchrun_env(preset: JobPreset, endpoint: str, run_id: str) -> dict[str, str]:
    """The PET_* variables of a TrainJob's pod, for one machine."""
    # Imported here: every ops command module is imported at start, and the validation runner's
    # copy of ops (stacks/validation.py RUNNER_SOURCES) carries no k8s package.
    from k8s.pods.torchrun_env import local_env

    return local_env(nproc_per_node=preset.local_nproc, master_port=_free_port(), backend=preset.torch_rdzv_backend,
                     endpoint=endpoint, run_id=run_id, max_restarts=preset.max_restarts)


def child_env() -> dict:
    """This environment, with the repository first on the module path (an existing PYTHONPATH kept)."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path, PYTHONUNBUFFERED="1")


def run_job(preset: JobPreset, endpoint: str, checkpoint_root: str,
            timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[int, dict | None, float]:
    argv = torchrun_command(preset, checkpoint_root)
    topology = torchrun_env(preset, endpoint, f"local-{preset.name}-{uuid.uuid4().hex[:8]}")
    # argv is [this python, -m, trainer.launch, ...]: shown as the pod's command
    print("$ " + " ".join([*(f"{k}={v}" for k, v in topology.items()), "python", *argv[1:]]), flush=True)
    env = {**child_env(), **topology}
    summary, t0 = None, time.monotonic()
    job = proc.start(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # Past the deadline the job stops as on Ctrl-C: SIGTERM (workers save a checkpoint), then SIGKILL.
    timed_out = threading.Event()
    deadline = threading.Timer(timeout_s, lambda: (timed_out.set(), proc.stop(job, STOP_GRACE_S)))
    deadline.start()
    try:
        for line in job.stdout:
            sys.stdout.write(line)
            if line.startswith("SUMMARY "):
                summary = json.loads(line[len("SUMMARY "):])
        rc = job.wait()
    except KeyboardInterrupt:
        proc.stop(job, STOP_GRACE_S)
        raise
    finally:
        deadline.cancel()
    if timed_out.is_set():
        raise LocalRunError(f"--timeout: the job ran longer than {timeout_s:g} s and was stopped; "
                            "--resume continues from its last checkpoint")
    return rc, summary, time.monotonic() - t0


def run_local_steps(commands: tuple[tuple[str, ...], ...], job_dir: Path) -> None:
    """A preset's before/after steps (`python -m MODULE ARGS`, "{job_dir}" filled in); the first
    that fails stops the run."""
    env = child_env()
    for module, *args in commands:
        argv = [sys.executable, "-m", module, *(a.replace("{job_dir}", str(job_dir)) for a in args)]
        print("$ python " + " ".join(argv[1:]), flush=True)
        try:
            rc = proc.run(argv, cwd=REPO, env=env, capture_output=False, timeout=STEP_TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            raise LocalRunError(f"--job: step `python -m {module} {' '.join(args[:1])}` did not finish in "
                                f"{STEP_TIMEOUT_S} s") from None
        if rc != 0:
            raise LocalRunError(f"--job: step `python -m {module} {' '.join(args[:1])}` failed (exit {rc})")


def format_summary(preset: JobPreset, summary: dict | None, etcd: Etcd, wall_s: float, rc: int) -> str:
    lines = [f"== local run of {preset.name}: {'ok' if rc == 0 else f'failed (exit {rc})'}"]
    if summary and summary.get("workload") == "ddp":
        lines += [f"   epochs         {summary['epochs']} ({summary['epochs_this_run']} in this run)",
                  f"   samples/s      {summary['samples_per_sec']}",
                  f"   final loss     {summary['final_loss']}",
                  f"   snapshot       {summary['snapshot']}"]
    elif summary and summary.get("workload") == "vision":
        job_dir = Path(summary["checkpoint_dir"])  # the preset's job folder; its after-step draws the plot there
        lines += [f"   epochs         {summary['epochs']} ({summary['epochs_this_run']} in this run, "
                  f"{summary['world_size']} ranks)",
                  f"   images/s       {summary['images_per_sec']}",
                  f"   top-1 / top-5  {summary['top1']} / {summary['top5']} (validation, last epoch)",
                  f"   metrics        {summary['metrics_file']}",
                  f"   plot           {job_dir / 'curves.png'} (python -m trainer.plot METRICS -o PLOT)",
                  f"   checkpoints    {summary['checkpoint_dir']}"]
    elif summary:
        lines += [f"   steps          {summary['steps']} ({summary['steps_this_run']} in this run)",
                  f"   tokens/s       {summary['tokens_per_sec']}",
                  f"   final loss     {summary['final_loss']}",
                  f"   checkpoints    {summary['checkpoint_dir']}"]
    lines += [f"   etcd start-up  {etcd.startup_s:.2f} s (etcd-v2 rendezvous at {etcd.endpoint})",
              f"   torchrun wall  {wall_s:.1f} s"]
    return "\n".join(lines)


def local_preset(name: str) -> JobPreset:
    """The preset `--job` names, if it runs on this machine; LocalRunError listing those that do."""
    allowed = ", ".join(n for n, q in PRESETS.items() if q.image_variant == "cpu")
    if name not in PRESETS:
        raise LocalRunError(f"--job: unknown job {name!r}; local jobs are {allowed}")
    preset = PRESETS[name]
    if preset.image_variant != "cpu":
        raise LocalRunError(f"--job: {preset.name} needs GPU nodes; local runs take the CPU presets ({allowed})")
    return preset


def run_locally(preset: JobPreset, *, checkpoint_root: str, resume: bool, etcd: str | None, timeout_s: float) -> int:
    """0 when the job succeeded, 1 when it ran and failed; a run that cannot start raises
    ConfigError or LocalRunError (the CLI prints one line and exits 2)."""
    binary = find_etcd(etcd)
    root = str((REPO / checkpoint_root).resolve()) if not Path(checkpoint_root).is_absolute() else checkpoint_root
    try:
        paths.output_dir(root)
    except paths.PathProblem as problem:
        raise LocalRunError(f"--checkpoint-root: {problem}") from None
    job_dir = Path(preset.job_dir(root))
    try:
        # etcd first: a --etcd that does not start must not have removed the last run's checkpoints.
        with etcd_server(binary) as server:
            print(f"etcd ready at {server.endpoint} in {server.startup_s:.2f} s", flush=True)
            if not resume and job_dir.exists():
                shutil.rmtree(job_dir)  # a fresh run each time; --resume keeps what was there
            run_local_steps(preset.local.before, job_dir)
            rc, summary, wall = run_job(preset, server.endpoint, root, timeout_s)
        print(format_summary(preset, summary, server, wall, rc), flush=True)
        if rc == 0:
            run_local_steps(preset.local.after, job_dir)
        return 0 if rc == 0 else 1
    except KeyboardInterrupt:
        print("interrupted; etcd stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
