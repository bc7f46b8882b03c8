"""The fault tests' harness (trainer_procs.Job, through ops.proc.stop): stopping a job ends its
torchrun workers too, which run in sessions of their own."""

from __future__ import annotations

import os
import select
import sys

from trainer_procs import Job

# A worker that outlives SIGTERM, as one blocked in a C++ destructor does.
STUCK = """
import signal, threading
signal.signal(signal.SIGTERM, lambda *_: None)
print("worker ready", flush=True)
threading.Event().wait()
"""


def test_stopping_a_job_also_ends_a_worker_in_its_own_session(tmp_path):
    """Killing the agent's process group alone left them running: before, this worker was still
    alive after stop() (a worker hung in a process group's destructor outlived its test by 40 minutes)."""
    script = tmp_path / "stuck.py"
    script.write_text(STUCK)
    job = Job([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
               "--monitor-interval=0.2", str(script)])
    try:
        job.wait_for("worker ready", timeout=120)
        [pid] = job.workers().values()
        pidfd = os.pidfd_open(pid)  # readable once that process has ended, whoever reaps it
    finally:
        job.stop()
    try:
        readable, _, _ = select.select([pidfd], [], [], 30)
        assert readable, f"worker {pid} still runs after its job was stopped"
    finally:
        os.close(pidfd)
