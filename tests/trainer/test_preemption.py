"""Faults across pods: two torchrun agents (two pods) on a real etcd. SIGTERM to one of them: every
rank saves at the step they agree on and exits EXIT_PREEMPTED, so neither pod reports success (the
operator would end the job Succeeded, tests/k8s/pods/test_operator_exit_rule.py), and a rerun
resumes from that checkpoint. etcd lost mid-run, then back empty, then a worker killed."""

from __future__ import annotations

import os
import re
import shutil
import signal
import uuid
from pathlib import Path

import pytest

from config.kubernetes import EXIT_PREEMPTED, TORCHRUN_FAILED
from ops import local
from trainer.checkpoint import MARKER, step_dir
from k8s.pods.torchrun_env import AGENT_ENV
from trainer_procs import Job, RestartableEtcd, elastic_agent_args, llm_args, run, torchrun_args, wait_any

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


def _workers_store(agents: list[Job]) -> str:
    """Where rank 0's worker says the job's store is (its MASTER_ADDR and MASTER_PORT)."""
    [pid] = [pid for agent in agents for rank, pid in agent.workers().items() if rank == 0]
    env = dict(item.split(b"=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in item)
    return f"{env[b'MASTER_ADDR'].decode()}:{env[b'MASTER_PORT'].decode()}"


def _agents(etcd, run_id: str, ckpt, steps: int) -> list[Job]:
    """The two pods of one job: torchrun agents with the pods' agent variables."""
    return [Job([*elastic_agent_args(etcd.endpoint, run_id, max_restarts=3), "-m", "trainer.llm",
                 *llm_args(ckpt, steps=steps, every=20)], env=AGENT_ENV) for _ in range(2)]


@pytest.mark.skipif(not (shutil.which("etcd") or os.path.exists("/usr/bin/etcd")),
                    reason="etcd not installed (make etcd installs it)")
def test_etcd_lost_mid_run_stops_both_pods_after_a_save_and_an_empty_etcd_resumes_them_through_a_killed_worker(
        tmp_path):
    """etcd's pod evicted or its node drained: each agent reads etcd every monitor interval, fails,
    and stops its workers with SIGTERM; every rank saves and both pods exit non-zero, for the
    kubelet to restart (OnFailure). The restarted pods meet on the etcd that came back empty (its
    data is an emptyDir) and resume from that save. A worker SIGKILLed then makes both agents
    re-form the group: before the pods set TORCH_DISABLE_SHARE_RDZV_TCP_STORE, rank 0's agent kept
    one store for every round, the restarted workers read the killed worker's address from the
    round before ("Gloo connectFullMesh failed ... Connection refused"), and round after round
    failed: the restarts ran out in 3 runs of 7 here, and only 2 had no failed round."""
    etcd = RestartableEtcd(tmp_path / "etcd")
    ckpt = tmp_path / "ckpt"
    run_id = f"etcd-lost-{uuid.uuid4().hex[:8]}"
    agents: list[Job] = []
    try:
        etcd.start()
        agents = _agents(etcd, run_id, ckpt, steps=5000)
        wait_any(agents, r"Checkpoint saved: \S+step-00000020", timeout=180)
        etcd.kill()
        codes = [agent.finish(timeout=120) for agent in agents]
        assert codes == [TORCHRUN_FAILED] * 2, codes
        saved = {int(m[1]) for agent in agents for m in SAVED.finditer(agent.output)}
        assert len(saved) == 1 and all(int(m[2]) == EXIT_PREEMPTED for a in agents for m in SAVED.finditer(a.output))
        [step] = saved
        assert step >= 20 and (step_dir(ckpt, step) / MARKER).exists()

        etcd.start(keep_data=False)
        interval = (step // 20 + 1) * 20  # the next periodic save
        agents = _agents(etcd, run_id, ckpt, steps=interval + 40)
        wait_any(agents, rf"Checkpoint saved: \S+step-{interval:08d}", timeout=180)
        resumed = {int(s) for agent in agents for s in RESUMED.findall(agent.output)}
        assert resumed == {step}, resumed
        store = _workers_store(agents)
        victim = next(agent for agent in agents if 1 in agent.workers())
        victim.kill_worker(1)
        wait_any(agents, rf"Resumed from checkpoint \S+ \(step {interval}\)", timeout=180)
        assert _workers_store(agents) != store  # the new round's workers meet in a store of their own
        codes = [agent.finish(timeout=240) for agent in agents]
    finally:
        for agent in agents:
            agent.stop()
        etcd.stop()
    out = "\n".join(agent.output for agent in agents)
    assert codes == [0, 0], out[-4000:]
    assert "connectFullMesh failed" not in out, out[-4000:]
    assert {int(s) for s in RESUMED.findall(out)} == {step, interval}
    assert f'"steps": {interval + 40}' in out
