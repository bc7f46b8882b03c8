"""Real torchrun jobs for the trainer tests: start, wait for a log line, kill a worker.

Synchronisation is on what the job prints (a reader thread collects lines; waiters block on a
condition with a deadline), never on sleeps.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from ops import local, proc  # noqa: E402
from trainer.dist import JOB_VARS  # noqa: E402


def job_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in JOB_VARS}  # a test's own init set them here
    path = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(PYTHONPATH=path, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **extra)
    return env


def lone_rank_env(rank: int, world_size: int) -> dict:
    """The environment of one worker of a `world_size` job whose other workers never come, so it
    shows what a worker does on its own. Rank 0 hosts the rendezvous on port 0 (the kernel picks a
    free one as it binds; a port chosen free and bound later can be taken in between, EADDRINUSE);
    another rank connects to a loopback port nothing listens on and can only wait."""
    port = 0
    if rank != 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    return job_env(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))


def torchrun_args(module: str, args: list[str], *, nproc: int = 2, max_restarts: int = 0) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            f"--max-restarts={max_restarts}", "--monitor-interval=0.2", "-m", module, *args]


def llm_args(ckpt, *extra, steps=20, every=10, model="tiny") -> list[str]:
    """trainer.llm's arguments for the fault tests: a tiny model, small batches, short timeouts."""
    return ["--model", model, "--steps", str(steps), "--batch-size", "2", "--seq-len", "64",
            "--checkpoint-dir", str(ckpt), "--checkpoint-every", str(every), "--log-every", "5",
            "--dist-timeout", "20", *extra]


def file_size_limited(argv: list[str], limit: int) -> list[str]:
    """`argv` (and what it starts) with writes past `limit` bytes failing as on a full disk: EFBIG,
    since Python ignores SIGXFSZ."""
    return [sys.executable, "-c", "import os, resource, sys; "
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit})); os.execv(sys.argv[1], sys.argv[1:])",
            *argv]


def elastic_agent_args(endpoint: str, run_id: str, *, nnodes: str = "2", max_restarts: int = 0,
                       rdzv_conf: str = "timeout=120", launcher: str = "torch.distributed.run") -> list[str]:
    """One torchrun agent (a pod, here) of a multi-node job on the etcd-v2 rendezvous; `launcher`
    "trainer.launch" runs it as the pod's command does."""
    return [sys.executable, "-m", launcher, f"--nnodes={nnodes}", "--nproc-per-node=1",
            "--rdzv-backend=etcd-v2", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={run_id}",
            f"--rdzv-conf={rdzv_conf}", "--local-addr=127.0.0.1", f"--max-restarts={max_restarts}",
            "--monitor-interval=0.2"]


class RestartableEtcd:
    """A real etcd on loopback that a test can SIGKILL and start again on the same ports, as the
    rendezvous Service's address outlives its pod: with the data kept, or empty (a new data folder,
    as a rescheduled pod's emptyDir)."""

    def __init__(self, data_root: Path):
        self.root, self.binary = Path(data_root), local.find_etcd(None)
        self.ports = (local._free_port(), local._free_port())
        self.endpoint = f"127.0.0.1:{self.ports[0]}"
        self.server, self.starts = None, 0

    def start(self, *, keep_data: bool = True) -> None:
        if not keep_data:
            self.starts += 1
        data_dir = self.root / f"etcd-{self.starts}"
        data_dir.mkdir(parents=True, exist_ok=True)
        started = local._start_etcd(self.binary, str(data_dir), time.monotonic() + 30, ports=self.ports)
        assert started, f"another process took etcd's port {self.ports}"
        self.server = started[0]

    def kill(self) -> None:
        self.server.kill()
        self.server.wait(timeout=30)

    def stop(self) -> None:
        if self.server is not None:
            proc.stop(self.server, grace_s=10)


def wait_any(jobs: list["Job"], pattern: str, timeout: float) -> "Job":
    """The first of `jobs` to print a line matching `pattern` (^ and $ match at each line)."""
    rx, deadline = re.compile(pattern, re.MULTILINE), time.monotonic() + timeout
    while True:
        for job in jobs:
            if rx.search(job.output):
                return job
        assert time.monotonic() < deadline, f"no {pattern!r} within {timeout}s:\n" + \
            "\n---\n".join(j.output[-2500:] for j in jobs)
        with jobs[0].cond:  # woken by a new line of the first job; the bound covers the others
            jobs[0].cond.wait(timeout=0.2)


class Job:
    def __init__(self, argv: list[str], env: dict | None = None, **popen):
        """`env`: variables the job gets beyond the test's own (a pod's, say)."""
        # Its own process group, killed with this test process whatever happens to it (ops/proc.py).
        self.proc = proc.start(argv, cwd=REPO, env=job_env(**(env or {})), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, **popen)
        self.lines: list[str] = []
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    @property
    def output(self) -> str:
        with self.cond:
            return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 120.0, start: int = 0) -> re.Match:
        """Block until a line matching `pattern` appears (at or after line index `start`)."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = start
        with self.cond:
            while True:
                for line in self.lines[seen:]:
                    if m := rx.search(line):
                        return m
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self.reader.is_alive()):
                    raise AssertionError(f"no line matching {pattern!r} within {timeout}s; output:\n{self.output[-4000:]}")
                self.cond.wait(timeout=min(left, 1.0))

    def workers(self) -> dict[int, int]:
        """rank -> pid of torchrun's worker processes (its children), read from /proc."""
        found = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if ppid != self.proc.pid:
                    continue
                env = (entry / "environ").read_bytes().split(b"\0")
            except (OSError, IndexError, ValueError):
                continue
            for item in env:
                if item.startswith(b"RANK="):
                    found[int(item[5:])] = int(entry.name)
        return found

    def kill_worker(self, rank: int, sig: int = signal.SIGKILL) -> int:
        pid = self.workers()[rank]
        os.kill(pid, sig)
        return pid

    def finish(self, timeout: float = 180.0) -> int:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"job did not finish within {timeout}s; output:\n{self.output[-4000:]}")
        self.reader.join(timeout=10)
        return rc

    def stop(self) -> None:
        """The agent's group and its workers, which torchrun starts in sessions of their own
        (ops.proc.stop follows them)."""
        proc.stop(self.proc)


def preempt(argv: list[str], after: str, timeout: float = 120.0, sig: int = signal.SIGTERM) -> tuple[int, str]:
    """Run a job, SIGTERM its torchrun (what the kubelet sends a pod's PID 1 on preemption), or send
    it `sig`, once a line matches `after`, and return its exit status and output."""
    job = Job(argv)
    try:
        job.wait_for(after)
        job.proc.send_signal(sig)
        rc = job.finish(timeout=timeout)
    finally:
        job.stop()
    return rc, job.output


def run(argv: list[str], timeout: float = 180.0) -> tuple[int, str]:
    job = Job(argv)
    try:
        rc = job.finish(timeout)
    finally:
        job.stop()
    return rc, job.output
