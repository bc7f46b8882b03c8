"""trainer.launch, the training pod's command: torchrun, exiting with the workers' status instead
of torchrun's 1, so that a permanent fault can end the job while a crash or a preemption restarts it."""

from __future__ import annotations

import signal
import sys
import textwrap

import pytest

from config.kubernetes import (
    EXIT_CHECKPOINTS_UNLOADABLE, EXIT_CRASH, EXIT_INTERRUPTED, EXIT_PREEMPTED, EXIT_USAGE, PERMANENT_EXITS,
    TORCHRUN_FAILED,
)
from trainer.launch import pod_exit_status
from trainer_procs import Job, llm_args, run

# Statuses a worker's failure shows in torchrun's report: a signal that killed it is negative.
KILLED_BY_TORCHRUN = -signal.SIGTERM


@pytest.mark.parametrize("permanent", PERMANENT_EXITS)
@pytest.mark.parametrize("peers", [[], [EXIT_CRASH], [KILLED_BY_TORCHRUN], [EXIT_PREEMPTED, EXIT_CRASH]])
def test_a_permanent_worker_status_is_the_pods_whatever_its_peers_did(permanent, peers):
    # The peers stopped after it ("another rank stopped first": 1) or were stopped by torchrun;
    # in the report they may come first.
    assert pod_exit_status([*peers, permanent]) == permanent
    assert pod_exit_status([permanent, *peers]) == permanent


def test_a_preemption_save_or_a_sigterm_to_torchrun_is_143_and_retryable():
    assert pod_exit_status([EXIT_PREEMPTED, EXIT_PREEMPTED]) == EXIT_PREEMPTED
    assert pod_exit_status([EXIT_PREEMPTED, EXIT_CRASH]) == EXIT_PREEMPTED
    assert pod_exit_status([], agent_signal=signal.SIGTERM) == EXIT_PREEMPTED
    assert pod_exit_status([], agent_signal=signal.SIGINT) == EXIT_INTERRUPTED
    assert EXIT_PREEMPTED not in PERMANENT_EXITS


@pytest.mark.parametrize("codes", [[EXIT_CRASH], [EXIT_CRASH, KILLED_BY_TORCHRUN], [-signal.SIGKILL], [3], [75], [78]])
def test_a_crash_or_any_other_status_is_torchruns_own_1_and_retryable(codes):
    assert pod_exit_status(codes) == TORCHRUN_FAILED == EXIT_CRASH


def _launch(*torchrun_options: str) -> list[str]:
    return [sys.executable, "-m", "trainer.launch", "--standalone", "--nproc-per-node=2", "--max-restarts=0",
            "--monitor-interval=0.2", *torchrun_options]


def _torchrun(*torchrun_options: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *_launch(*torchrun_options)[3:]]


def _worker(tmp_path, body: str):
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(body))
    return str(script)


@pytest.mark.slow
def test_a_usage_error_of_every_rank_is_the_pods_status_2_where_torchrun_reports_1(tmp_path):
    argv = ["-m", "trainer.llm", *llm_args(tmp_path / "ckpt", "--seq-len", "0")]
    rc_torchrun, _ = run(_torchrun(*argv), timeout=120)
    rc, out = run(_launch(*argv), timeout=120)
    assert rc_torchrun == TORCHRUN_FAILED
    assert rc == EXIT_USAGE, out[-3000:]
    assert "error: --seq-len" in out  # the worker's own line stays in the pod's log
    assert "Traceback" not in out
    # The last line (what a pod's termination message and `kubectl logs --tail` show) says why.
    # The second rank may be in the report as stopped by torchrun's SIGTERM (-15) instead of its 2.
    last = out.rstrip().splitlines()[-1]
    assert last.startswith("error: torchrun: ") and last.endswith(f"the pod exits {EXIT_USAGE}"), last


@pytest.mark.slow
def test_one_rank_stopping_permanently_and_its_peer_with_1_is_the_pods_status_2(tmp_path):
    """Rank 1 stops with a usage error, rank 0 with 1 (what trainer.cli.peer_gone does once its
    peer is gone): whichever torchrun sees first, the pod reports the permanent status."""
    worker = _worker(tmp_path, """
        import os, sys
        rank = int(os.environ["RANK"])
        sys.exit(2 if rank == 1 else 1)
    """)
    rc, out = run(_launch(worker), timeout=120)
    assert rc == EXIT_USAGE, out[-3000:]


@pytest.mark.slow
def test_sigterm_to_the_pods_command_is_143_where_torchrun_reports_1(tmp_path):
    """The kubelet's SIGTERM to a pod's PID 1 (a drain, a preemption): retryable."""
    worker = _worker(tmp_path, """
        import os, signal
        print(f"rank {os.environ['RANK']} ready", flush=True)
        signal.pause()
    """)
    codes = {}
    for name, argv in (("torchrun", _torchrun(worker)), ("launch", _launch(worker))):
        job = Job(argv)
        try:
            job.wait_for(r"rank 0 ready", timeout=60)
            job.wait_for(r"rank 1 ready", timeout=60)
            job.proc.send_signal(signal.SIGTERM)
            codes[name] = job.finish(timeout=90)
        finally:
            job.stop()
    assert codes == {"torchrun": TORCHRUN_FAILED, "launch": EXIT_PREEMPTED}, job.output[-3000:]

