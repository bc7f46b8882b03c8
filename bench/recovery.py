"""Recovery after SIGKILL: seconds from killing one worker to the next logged epoch.

    python bench/recovery.py [--repeats 2]

Runs the cpu-ddp workload under torchrun with restarts allowed, once per rendezvous backend:
c10d (torchrun's own TCP store) and etcd-v2 (a real etcd on loopback, as on the cluster). After
a snapshot is written, one worker is SIGKILLed; the clock stops at the first epoch line that the
restarted workers print. Synchronised on log lines, not on sleeps.
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from config.options import positive_int  # noqa: E402
from ops import proc  # noqa: E402
from ops.local import etcd_server, find_etcd  # noqa: E402
from trainer.cli import Parser  # noqa: E402


class TimedLines:
    """A process's output lines with the monotonic time each arrived."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.lines, self.cond = proc, [], threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append((time.monotonic(), line.rstrip("\n")))
                self.cond.notify_all()
        with self.cond:
            self.lines.append((time.monotonic(), None))
            self.cond.notify_all()

    def wait_for(self, pattern: str, after: float = 0.0, timeout: float = 180.0) -> float:
        rx, deadline = re.compile(pattern), time.monotonic() + timeout
        with self.cond:
            while True:
                for t, line in self.lines:
                    if line is None and t >= after:
                        raise RuntimeError(f"job ended before {pattern!r}")
                    if line is not None and t >= after and rx.search(line):
                        return t
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no {pattern!r} within {timeout}s")
                self.cond.wait(timeout=1.0)


def worker_pid(parent: int, rank: int) -> int:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) != parent:
                    continue
                if f"RANK={rank}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                    return int(entry.name)
            except (OSError, IndexError, ValueError):
                continue
    raise RuntimeError(f"no worker of rank {rank} under {parent}")


@contextmanager
def running(argv: list[str]) -> Iterator[tuple[subprocess.Popen, TimedLines]]:
    """A job started from the repository through ops.proc (its output lines timed), its whole
    process group killed if still running at the end."""
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    job = proc.start(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        yield job, TimedLines(job)
    finally:
        proc.stop(job)


def one_recovery(backend: str, endpoint: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
                f"--rdzv-backend={backend}", f"--rdzv-endpoint={endpoint}", f"--rdzv-id=bench-{os.getpid()}-{time.time_ns()}",
                "--max-restarts=2", "--monitor-interval=0.2", "-m", "trainer.ddp", "--epochs", "40", "--save-every", "2",
                "--snapshot-path", f"{tmp}/snapshot.pt", "--dist-timeout", "20"]
        with running(argv) as (job, out):
            out.wait_for(r"\[RANK 0\] Epoch 3 \| Snapshot saved")
            killed = time.monotonic()
            os.kill(worker_pid(job.pid, 1), signal.SIGKILL)
            resumed = out.wait_for(r"Resuming from snapshot", after=killed)
            first = out.wait_for(r"\[RANK 0\] Epoch \d+ \| Batchsize", after=resumed)
            job.wait(timeout=180)
            return first - killed


def main(argv=None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=positive_int, default=2)
    args = p.parse_args(argv)
    results = {}
    with etcd_server(find_etcd(None)) as etcd:
        for backend, endpoint in (("c10d", "127.0.0.1:0"), ("etcd-v2", etcd.endpoint)):
            if backend == "c10d":
                import socket
                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    endpoint = f"127.0.0.1:{s.getsockname()[1]}"
            results[backend] = [one_recovery(backend, endpoint) for _ in range(args.repeats)]
    print(f"recovery: SIGKILL of one of 2 cpu-ddp workers to the next logged epoch, {args.repeats} runs each")
    for backend, secs in results.items():
        print(f"  {backend:8s} median {statistics.median(secs):5.1f} s   (runs: {', '.join(f'{s:.1f}' for s in secs)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
