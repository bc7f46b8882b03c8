"""Preemption across pods: two torchrun agents (two pods) on a real etcd, SIGTERM to one of them.
Every rank saves at the step they agree on and exits EXIT_PREEMPTED, so neither pod reports
success (the operator would end the job Succeeded, tests/k8s/pods/test_operator_exit_rule.py), and a
rerun resumes from that checkpoint."""

from __future__ import annotations

import os
import re
import shutil
import signal
import uuid

import pytest

from config.kubernetes import EXIT_PREEMPTED, TORCHRUN_FAILED
from ops import local
from trainer.checkpoint import MARKER, step_dir
from trainer_procs import Job, elastic_agent_args, llm_args, run, torchrun_args, wait_any

pytestmark = pytest.mark.slow

LOGGED = re.compile(r"^step\s+(\d+) \| loss")
RESUMED = re.compile(r"Resumed from checkpoint \S+ \(step (\d+)\)")
SAVED = re.compile(r"SIGTERM: checkpoint saved at step (\d+); exiting with status (\d+)")


@pytest.mark.skipif(not (shutil.which("etcd") or os.path.exists("/usr/bin/etcd")),
                    reason="etcd not installed (make etcd installs it)")
def test_sigterm_to_one_pod_stops_both_non_zero_after_a_checkpoint_that_a_rerun_resumes(tmp_path):
    with local.etcd_server(local.find_etcd(None)) as etcd:
        run_id = f"preempt-{uuid.uuid4().hex[:8]}"
        agents = [Job([*elastic_agent_args(etcd.endpoint, run_id), "-m", "trainer.llm",
                       *llm_args(tmp_path, steps=5000, every=1000)]) for _ in range(2)]
        try:
            logger = wait_any(agents, r"^step\s+5 \| loss", timeout=180)
            # The signal goes to the pod whose worker is rank 1: the stop must still be agreed.
            victim = next(a for a in agents if 1 in a.workers())
            peer = next(a for a in agents if a is not victim)
            assert logger is peer
            victim.proc.send_signal(signal.SIGTERM)  # what the kubelet sends the container's PID 1
            codes = {"victim": victim.finish(timeout=120), "peer": peer.finish(timeout=120)}
        finally:
            for agent in agents:
                agent.stop()
    out = peer.output
    m = SAVED.search(out)
    assert m, out[-4000:]
    step = int(m[1])
    assert int(m[2]) == EXIT_PREEMPTED
    assert (step_dir(tmp_path, step) / MARKER).exists()
    assert max(int(s) for line in out.splitlines() if (s := (LOGGED.search(line) or [None, None])[1])) <= step
    # Both workers stop deliberately, after the save, and each agent reports a failure: neither
    # pod succeeds. The peer's agent names its worker's status; the victim's dies of the signal.
    assert f"exiting with status {EXIT_PREEMPTED} so that the job restarts and resumes from it (rank 1)" in victim.output
    assert re.search(rf"exitcode\s*:\s*{EXIT_PREEMPTED}\b", peer.output), peer.output[-3000:]
    # torchrun 2.13 exits 1 for both: a SignalException (the agent that got SIGTERM) and a failed
    # worker with no restarts left (its peer) each leave torch.distributed.run's main as an exception.
    assert codes == {"victim": TORCHRUN_FAILED, "peer": TORCHRUN_FAILED}, codes

    rc, rerun = run(torchrun_args("trainer.llm", llm_args(tmp_path, steps=step + 5, every=1000), nproc=1))
    assert rc == 0, rerun[-3000:]
    assert [int(s) for s in RESUMED.findall(rerun)] == [step]
    assert [int(s) for line in rerun.splitlines() if (s := (LOGGED.search(line) or [None, None])[1])][-1] == step + 5
