"""trainer.launch, the training pod's command: torchrun, exiting with the workers' status instead
of torchrun's 1, so that a permanent fault can end the job while a crash or a preemption restarts it."""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import textwrap
import threading
import uuid

import pytest

from config.kubernetes import (
    EXIT_CHECKPOINT_READ_FAILED, EXIT_CHECKPOINTS_UNLOADABLE, EXIT_CRASH, EXIT_INTERRUPTED, EXIT_NONFINITE,
    EXIT_NOT_ON_EFA, EXIT_PREEMPTED, EXIT_USAGE, PERMANENT_EXITS, STATUS_MEANINGS, TORCHRUN_FAILED,
)
from k8s.pods.torchrun_env import AGENT_ENV
from ops import local
from trainer.checkpoint import list_steps
from trainer.launch import pod_exit_status
from trainer_procs import Job, elastic_agent_args, llm_args, run, wait_any

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


@pytest.mark.parametrize("codes", [[EXIT_CRASH], [EXIT_CRASH, KILLED_BY_TORCHRUN], [-signal.SIGKILL], [4], [127]])
def test_a_crash_or_any_status_not_of_ours_is_torchruns_own_1_and_retryable(codes):
    assert pod_exit_status(codes) == TORCHRUN_FAILED == EXIT_CRASH


@pytest.mark.parametrize("status", [EXIT_NONFINITE, EXIT_CHECKPOINT_READ_FAILED, EXIT_NOT_ON_EFA])
@pytest.mark.parametrize("peers", [[], [EXIT_CRASH], [KILLED_BY_TORCHRUN]])
def test_another_status_of_ours_reaches_the_pod_so_ops_status_can_name_it_and_stays_retryable(status, peers):
    # A run on a node whose NCCL is not on EFA read "exited 1 (a crash, or a peer stopped first)".
    assert pod_exit_status([*peers, status]) == status == pod_exit_status([status, *peers])
    assert status not in PERMANENT_EXITS and status in STATUS_MEANINGS


def _launch(*torchrun_options: str, max_restarts: int = 0) -> list[str]:
    return [sys.executable, "-m", "trainer.launch", "--standalone", "--nproc-per-node=2",
            f"--max-restarts={max_restarts}", "--monitor-interval=0.2", *torchrun_options]


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



# Each worker appends "RANK ROUND" to this file as it starts; a round ends only when a worker of it
# has failed, and that worker wrote its line first, so the rounds in the file are the rounds run.
_COUNT_ATTEMPT = textwrap.dedent("""
    import os, sys
    rank = int(os.environ["RANK"])
    with open(sys.argv[1], "a") as attempts:
        attempts.write(f"{rank} {os.environ['TORCHELASTIC_RESTART_COUNT']}\\n")
""")


def _rounds(attempts) -> set[int]:
    return {int(line.split()[1]) for line in attempts.read_text().splitlines()}


@pytest.mark.slow
@pytest.mark.parametrize("permanent", PERMANENT_EXITS)
def test_a_permanent_worker_status_is_not_restarted_inside_the_pod(tmp_path, permanent):
    """torchrun's --max-restarts would run the same failure again (the lease's wait, a model's
    load) as many times as it allows before the pod could report it."""
    worker = _worker(tmp_path, _COUNT_ATTEMPT + f"sys.exit({permanent})\n")
    attempts = tmp_path / "attempts"
    rc, out = run(_launch(worker, str(attempts), max_restarts=2), timeout=120)
    assert (rc, _rounds(attempts)) == (permanent, {0}), out[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("status", [EXIT_CRASH, EXIT_CHECKPOINT_READ_FAILED, EXIT_PREEMPTED])
def test_any_other_worker_failure_still_spends_torchruns_restarts(tmp_path, status):
    worker = _worker(tmp_path, _COUNT_ATTEMPT + f"sys.exit({status})\n")
    attempts = tmp_path / "attempts"
    rc, out = run(_launch(worker, str(attempts), max_restarts=2), timeout=120)
    assert (rc, _rounds(attempts)) == (pod_exit_status([status]), {0, 1, 2}), out[-3000:]


@pytest.mark.slow
def test_one_rank_stopping_permanently_ends_the_pods_restarts_though_its_peer_stopped_with_1(tmp_path):
    """Rank 0 stops with a usage error; rank 1 stops with 1 once rank 0 has exited (what
    trainer.cli.peer_gone does), so that torchrun sees rank 0's status no later than rank 1's."""
    worker = _worker(tmp_path, _COUNT_ATTEMPT + textwrap.dedent("""
        import select
        fifo = os.path.join(os.path.dirname(sys.argv[1]), "rank0-pid")
        try:
            os.mkfifo(fifo)
        except FileExistsError:
            pass
        if rank == 0:
            with open(fifo, "w") as peer:
                peer.write(str(os.getpid()))
            sys.exit(2)
        with open(fifo) as peer:
            rank0 = int(peer.read())
        try:
            # Readable once rank 0 has exited, as torchrun's poll of it would see.
            select.select([os.pidfd_open(rank0)], [], [], 60)
        except ProcessLookupError:
            pass  # torchrun has reaped it already
        sys.exit(1)
    """))
    attempts = tmp_path / "attempts"
    rc, out = run(_launch(worker, str(attempts), max_restarts=2), timeout=120)
    assert (rc, _rounds(attempts)) == (EXIT_USAGE, {0}), out[-3000:]


# Pods of one job, each a trainer.launch agent with one worker, on a real etcd (etcd-v2 rendezvous).
needs_etcd = pytest.mark.skipif(not (shutil.which("etcd") or os.path.exists("/usr/bin/etcd")),
                                reason="etcd not installed (make etcd installs it)")
RESUMED = re.compile(r"Resumed from checkpoint \S+ \(step (\d+)\)")
SAVED = re.compile(rf"SIGTERM: checkpoint saved at step (\d+); exiting with status {EXIT_PREEMPTED}")
STEPS = 100


def _pod(endpoint: str, run_id: str, ckpt, *extra: str, nnodes: str, max_restarts: int, env: dict | None = None,
         join_timeout: int | None = None) -> Job:
    """One pod of the job as its container runs it. The global batch, 4, is two micro-batches of 2
    on one rank and one on each of two, so a round of either size resumes the other's checkpoint."""
    # min < max waits out the last call before a round closes: 30 s by default (NOTES.md). etcd-v2 is
    # torch's dynamic rendezvous on etcd: its join_timeout (600 s by default) bounds a round's wait.
    agent = elastic_agent_args(endpoint, run_id, nnodes=nnodes, max_restarts=max_restarts,
                               rdzv_conf="last_call_timeout=1" + (f",join_timeout={join_timeout}" if join_timeout else ""),
                               launcher="trainer.launch")
    workload = llm_args(ckpt, "--global-batch-size", "4", *extra, steps=STEPS, every=20)
    return Job([*agent, "-m", "trainer.llm", *workload], env={**AGENT_ENV, **(env or {})})


def _finished(out: str) -> bool:
    return f'"steps": {STEPS}, "steps_this_run": ' in out


@pytest.mark.slow
@needs_etcd
def test_a_pod_joining_restarts_the_running_pods_workers_without_spending_a_restart_and_both_finish(tmp_path):
    """nnodes 1:2, one pod training: its agent sees the second pod waiting and restarts its workers
    for a round of two (they get SIGTERM, save and exit 143). That is no failure: with
    --max-restarts=0 the job goes on, both ranks resume from that save, and both pods exit 0."""
    ckpt = tmp_path / "ckpt"
    with local.etcd_server(local.find_etcd(None)) as etcd:
        run_id = f"join-{uuid.uuid4().hex[:8]}"
        # torchrun's INFO lines: the agent's "Detected 1 new nodes" and each round's restart_count.
        first = _pod(etcd.endpoint, run_id, ckpt, nnodes="1:2", max_restarts=0, env={"LOGLEVEL": "INFO"})
        pods = [first]
        try:
            first.wait_for(r"Checkpoint saved: \S+step-00000020", timeout=120)
            # Alone, the pod trains faster than a second one starts: it is held until its agent has
            # seen the joiner, so that the join lands mid-run and not after the last step.
            worker = first.workers()[0]
            os.kill(worker, signal.SIGSTOP)
            pods.append(_pod(etcd.endpoint, run_id, ckpt, nnodes="1:2", max_restarts=0))
            first.wait_for(r"Detected 1 new nodes", timeout=120)
            os.kill(worker, signal.SIGCONT)
            codes = [pod.finish(timeout=180) for pod in pods]
        finally:
            for pod in pods:
                pod.stop()
    out = first.output
    assert codes == [0, 0], "\n---\n".join(pod.output[-3000:] for pod in pods)
    [saved] = [int(step) for step in SAVED.findall(out)]
    # Two rounds, neither of them a restart; the second of two ranks, from the membership change's save.
    assert re.findall(r"restart_count=(\d+)", out) == ["0", "0"], out[-4000:]
    assert re.findall(r"on (\d) rank\(s\)", out) == ["1", "2"]
    assert [int(step) for step in RESUMED.findall(out)] == [saved]
    assert _finished(out) and list_steps(ckpt)[-1] == STEPS


@pytest.mark.slow
@needs_etcd
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["drained", "lost"])
def test_a_pod_leaving_for_good_leaves_the_survivor_to_resume_alone_from_the_last_save_and_finish(tmp_path, sig):
    """nnodes 1:2, two pods training, one never to come back. Drained (the kubelet's SIGTERM to its
    command): every rank saves and exits 143; the drained pod reports 143, and the survivor's agent
    restarts alone from that save. Lost (the node gone: the agent and its worker SIGKILLed): the
    survivor's worker stops with 1 (a peer gone), and its agent restarts alone from the last
    periodic save. Either way the survivor finishes and exits 0."""
    ckpt = tmp_path / "ckpt"
    with local.etcd_server(local.find_etcd(None)) as etcd:
        run_id = f"leave-{uuid.uuid4().hex[:8]}"
        pods = [_pod(etcd.endpoint, run_id, ckpt, nnodes="1:2", max_restarts=1) for _ in range(2)]
        try:
            wait_any(pods, r"Checkpoint saved: \S+step-00000020", timeout=120)
            # The drained pod is rank 1's; the lost one rank 0's, whose worker hosts the round's store.
            victim = next(pod for pod in pods if (1 if sig == signal.SIGTERM else 0) in pod.workers())
            survivor = next(pod for pod in pods if pod is not victim)
            if sig == signal.SIGTERM:
                victim.proc.send_signal(signal.SIGTERM)
            else:
                workers = list(victim.workers().values())
                saved_before = list_steps(ckpt)[-1]
                # torchrun starts workers in sessions of their own: killing the agent alone would
                # leave its worker training.
                for pid in (victim.proc.pid, *workers):
                    os.kill(pid, signal.SIGKILL)
            codes = [victim.finish(timeout=120), survivor.finish(timeout=180)]
        finally:
            for pod in pods:
                pod.stop()
    out = survivor.output
    [resumed] = [int(step) for step in RESUMED.findall(out)]
    if sig == signal.SIGTERM:
        assert codes == [EXIT_PREEMPTED, 0], out[-4000:]
        assert [int(step) for step in SAVED.findall(victim.output)] == [resumed]
        assert [int(step) for step in SAVED.findall(out)] == [resumed]
    else:
        assert codes == [-signal.SIGKILL, 0], out[-4000:]
        assert "another rank of the run stopped first" in out
        assert resumed >= saved_before  # nothing trained before the last complete save is lost
    assert re.findall(r"on (\d) rank\(s\)", out)[-1] == "1"
    assert _finished(out) and list_steps(ckpt)[-1] == STEPS


@pytest.mark.slow
@needs_etcd
def test_a_pod_that_stops_retryably_leaves_the_rendezvous_open_and_the_restarted_pods_resume(tmp_path):
    """A PyTorchJob restarts a failed pod in place (OnFailure), under the same rdzvId. torch 2.13's
    launcher closes the rendezvous for good when its agent returns a failed run: after a preemption
    of one of two pods with no in-pod restart left, the other pod, having saved and exited 143 'so
    that the job restarts and resumes from it', had closed it, and every restarted pod stopped at
    once with a RendezvousClosedError traceback and 1, never to resume."""
    ckpt = tmp_path / "ckpt"
    with local.etcd_server(local.find_etcd(None)) as etcd:
        run_id = f"reopen-{uuid.uuid4().hex[:8]}"
        pods = [_pod(etcd.endpoint, run_id, ckpt, nnodes="2", max_restarts=0) for _ in range(2)]
        restarted: list[Job] = []
        try:
            wait_any(pods, r"Checkpoint saved: \S+step-00000020", timeout=120)
            pods[0].proc.send_signal(signal.SIGTERM)
            codes = [pod.finish(timeout=120) for pod in pods]
            restarted = [_pod(etcd.endpoint, run_id, ckpt, nnodes="2", max_restarts=0) for _ in range(2)]
            codes_after = [pod.finish(timeout=180) for pod in restarted]
        finally:
            for pod in pods + restarted:
                pod.stop()
    assert codes == [EXIT_PREEMPTED, EXIT_PREEMPTED], "\n---\n".join(pod.output[-3000:] for pod in pods)
    saved = {int(step) for pod in pods for step in SAVED.findall(pod.output)}
    assert len(saved) == 1
    out = "\n".join(pod.output for pod in restarted)
    assert codes_after == [0, 0], out[-4000:]
    assert {int(step) for step in RESUMED.findall(out)} == saved
    assert _finished(out) and list_steps(ckpt)[-1] == STEPS


@pytest.mark.slow
@needs_etcd
def test_a_pod_restarted_after_a_permanent_stop_finds_the_rendezvous_closed_and_says_so_in_one_line(tmp_path):
    """A permanent status closes the rendezvous, so that no pod waits for a round that cannot run;
    a PyTorchJob still restarts the pod in place (OnFailure). The restart stopped with torchrun's
    traceback, whose last line, what the pod's termination message and `kubectl logs --tail` show,
    was a bare 'torch.distributed.elastic.rendezvous.api.RendezvousClosedError'."""
    ckpt = tmp_path / "ckpt"
    with local.etcd_server(local.find_etcd(None)) as etcd:
        run_id = f"closed-{uuid.uuid4().hex[:8]}"
        pods = [_pod(etcd.endpoint, run_id, ckpt, "--seq-len", "0", nnodes="2", max_restarts=3) for _ in range(2)]
        try:
            codes = [pod.finish(timeout=120) for pod in pods]
            pods.append(_pod(etcd.endpoint, run_id, ckpt, nnodes="2", max_restarts=3))
            codes.append(pods[-1].finish(timeout=120))
        finally:
            for pod in pods:
                pod.stop()
    out = pods[-1].output
    assert codes == [EXIT_USAGE, EXIT_USAGE, TORCHRUN_FAILED], out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    [line] = out.strip().splitlines()
    assert line.startswith("error: torchrun: ") and run_id in line and "closed" in line, line


@pytest.mark.slow
@needs_etcd
def test_a_round_that_times_out_waiting_for_a_pod_leaves_the_rendezvous_open_for_the_restart(tmp_path):
    """nnodes 2, one pod there and the other still waiting for a node past the rendezvous timeout
    (torch's default is 600 s; a p5 node and its image take about that). torch's launcher closed
    the rendezvous after the agent's RendezvousTimeoutError, with a traceback: the PyTorchJob's
    restart of the pod in place, and the late pod, then found it closed, and the run never began."""
    ckpt = tmp_path / "ckpt"
    with local.etcd_server(local.find_etcd(None)) as etcd:
        run_id = f"late-{uuid.uuid4().hex[:8]}"
        alone = _pod(etcd.endpoint, run_id, ckpt, nnodes="2", max_restarts=0, join_timeout=2)
        pods = [alone]
        try:
            code = alone.finish(timeout=60)
            pods += [_pod(etcd.endpoint, run_id, ckpt, nnodes="2", max_restarts=0) for _ in range(2)]
            codes = [pod.finish(timeout=180) for pod in pods[1:]]
        finally:
            for pod in pods:
                pod.stop()
    assert code == TORCHRUN_FAILED, alone.output[-3000:]
    assert "Traceback" not in alone.output, alone.output[-3000:]
    [line] = alone.output.strip().splitlines()
    assert line.startswith("error: torchrun: ") and run_id in line and "RendezvousTimeoutError" in line, line
    assert codes == [0, 0], "\n---\n".join(pod.output[-3000:] for pod in pods[1:])
    assert _finished("\n".join(pod.output for pod in pods[1:])) and list_steps(ckpt)[-1] == STEPS


def _launchers_agent(rdzv_handler, **options):
    """The agent torchrun's launcher builds once trainer.launch has hooked it, without running it."""
    from torch.distributed.elastic.agent.server.api import WorkerSpec
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.launcher import api

    from trainer.launch import stop_restarting_on_permanent_failures

    built = api.LocalElasticAgent
    try:
        stop_restarting_on_permanent_failures()
        spec = WorkerSpec(role="default", local_world_size=1, rdzv_handler=rdzv_handler, entrypoint=sys.executable)
        return api.LocalElasticAgent(spec=spec, logs_specs=DefaultLogsSpecs(), start_method="spawn", **options)
    finally:
        api.LocalElasticAgent = built


class _RecordedProcesses:
    """The agent's process context as far as stopping goes: what it was asked to close with."""

    def __init__(self):
        self.closed = []

    def close(self, death_sig, timeout):
        self.closed.append((death_sig, timeout))


def test_workers_stopped_for_a_restarted_round_get_the_pods_shutdown_timeout_to_save_not_30_s():
    """A pod joining or coming back, or a failed peer, restarts the round: the agent SIGTERMs the
    workers still running and they save before exiting. torch 2.13's LocalElasticAgent gave them a
    fixed 30 s there, where the pod sets TORCH_ELASTIC_SHUTDOWN_TIMEOUT from its model's save time
    (k8s/pods/pytorchjob.py, config/checkpoint_time.py): a bigger model's save was SIGKILLed."""
    agent = _launchers_agent(None, shutdown_timeout=150)
    agent._pcontext = processes = _RecordedProcesses()
    agent._stop_workers(agent._worker_group)
    assert processes.closed == [(signal.SIGTERM, 150)]


@needs_etcd
def test_a_rendezvous_left_open_still_stops_this_pods_keep_alive_heartbeats():
    """The launcher's shutdown of the rendezvous, which the agent leaves open after a retryable
    failure, is also what stops the handler's keep-alive heartbeats (torch 2.13's dynamic
    rendezvous, which etcd-v2 is): without it this pod's thread went on telling etcd it was alive
    while the pod was on its way out."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters, registry

    def heartbeats():
        return [thread for thread in threading.enumerate() if thread.name.startswith("RendezvousKeepAliveTimer")]

    with local.etcd_server(local.find_etcd(None)) as etcd:
        handler = registry.get_rendezvous_handler(RendezvousParameters(
            backend="etcd-v2", endpoint=etcd.endpoint, run_id=f"open-{uuid.uuid4().hex[:8]}", min_nodes=1,
            max_nodes=1, local_addr="127.0.0.1"))
        handler.next_rendezvous()
        assert heartbeats()
        agent = _launchers_agent(handler)
        agent._leave_rendezvous_open()
        handler.shutdown()  # what launch_agent calls once the agent has returned
        assert heartbeats() == []
        assert not handler.is_closed()
