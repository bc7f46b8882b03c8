"""The training pod's command: torchrun, with the workers' exit status kept for Kubernetes.

    python -m trainer.launch [torchrun's options] --module trainer.llm ...

torchrun (torch 2.13) exits 1 whenever a worker failed, whatever the worker's status, and also
when it got SIGTERM itself (tests/trainer/test_launch.py measures both). The pod's status was
therefore 1 for a usage error, a lost final save and a preemption alike, and nothing after the
pod (the Job's podFailurePolicy, the operator) could tell a fault that every restart repeats from
one a restart cures. This runs torchrun's own entry point in this process (its signal handling
and PET_* options unchanged) and exits with `pod_exit_status` of what its workers reported.

torchrun's agent also restarts its workers (--max-restarts) whatever their status, so a permanent
one ran again as many times as allowed before the pod could report it: each attempt waiting up to
140 s for another run's lease, or loading a model for minutes, to stop the same way. The agent
this runs (`stop_restarting_on_permanent_failures`) stops at the first permanent status instead,
and leaves the rendezvous open after any other failure, for the pod's restart to join.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import NoReturn

from config.kubernetes import EXIT_PREEMPTED, PERMANENT_EXITS, STATUS_MEANINGS, TORCHRUN_FAILED
from trainer.log import log


def pod_exit_status(worker_codes: Iterable[int], *, agent_signal: int | None = None) -> int:
    """The pod's status for the failed workers' statuses (torchrun's failure report, which holds
    the workers of this pod only). A permanent status wins over every other: the first rank to
    stop names the fault, and its peers then stop with 1 ("another rank stopped first") or are
    stopped by torchrun with a signal. Next a signal torchrun itself got (128 + it: the kubelet's
    SIGTERM is 143), then a preemption (a worker saved and exited 143), then the first other
    status of ours (3, 75, 78: retryable, but `ops status` can say which), then torchrun's own 1."""
    codes = list(worker_codes)
    permanent = [code for code in codes if code in PERMANENT_EXITS]
    if permanent:
        return permanent[0]
    if agent_signal is not None:
        return 128 + agent_signal
    if EXIT_PREEMPTED in codes:
        return EXIT_PREEMPTED
    ours = [code for code in codes if code in STATUS_MEANINGS and code not in (0, TORCHRUN_FAILED)]
    return ours[0] if ours else TORCHRUN_FAILED


def stop_restarting_on_permanent_failures() -> None:
    """Make torchrun's launcher (in this process only) build an agent that spends no restart on a
    round in which a worker of this pod exited with a permanent status: it stops the round's other
    workers and returns the failure, as when no restart is left. Any other failure (1, 75, 143, a
    signal) restarts as before; a node joining restarts the workers without a failure, as before.

    The permanent cases (a usage error, bad data every rank agrees on, the other run's lease,
    checkpoints none of which loads) stop every rank, so every pod's agent stops. Where one rank
    alone stops permanently, its pod exits with that status (2 or 65) while the other pods' agents
    see their workers fail with 1 (a peer gone) and restart them without this pod, or stop with 1
    once this pod's agent has closed the rendezvous (below); what ends them otherwise
    is the job's answer to this pod's status (a TrainJob's podFailurePolicy fails the job and
    deletes them; a PyTorchJob restarts this pod in place, OnFailure, and the restart finds the
    rendezvous closed and says so in one line, exiting 1).
    Within a pod the agent judges the statuses of one poll: a peer exiting 1 that is seen before
    the permanent rank has exited ends that round as retryable, and the next round's permanent
    exit stops the agent.

    torch 2.13's launch_agent closes the rendezvous for good (its handler's shutdown) when the
    agent returns a failed run, and keeps it open only when the agent got a signal. A pod that
    stopped retryably (143 after a peer's preemption, 1, 75) is restarted by its job under the same
    rendezvous id (a PyTorchJob's rdzvId, OnFailure), and every restart then found the rendezvous
    closed and stopped at once, the run never to resume: the agent leaves it open then, and after
    any exception of its own (launch_agent closes it then too): a round that timed out because a
    pod still waited for its node past the join timeout (etcd-v2 is torch's dynamic rendezvous:
    join_timeout, 600 s by default) left the run unable ever to start. A permanent status still
    closes it, so that the other pods' agents stop instead of waiting for this pod.

    Workers stopped for a restarted round get the pod's shutdown timeout to save, as on the pod's
    own SIGTERM (`_stop_workers`).

    torch is pinned (requirements.txt): the hook is torch 2.13's SimpleElasticAgent._invoke_run,
    which restarts a FAILED round only while `_remaining_restarts` is above 0, launch_agent's
    module-level `LocalElasticAgent`, its `spec.rdzv_handler.shutdown()` after run() returns, and
    DynamicRendezvousHandler's `_stop_heartbeats`, which that shutdown calls.
    tests/trainer/test_launch.py runs real torchrun against them
    (test_a_permanent_worker_status_is_not_restarted_inside_the_pod,
    test_a_pod_that_stops_retryably_leaves_the_rendezvous_open_and_the_restarted_pods_resume,
    test_a_rendezvous_left_open_still_stops_this_pods_keep_alive_heartbeats)."""
    from torch.distributed.elastic.agent.server.api import DEFAULT_ROLE
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.launcher import api

    class StopOnPermanentFailure(LocalElasticAgent):
        def run(self, role: str = DEFAULT_ROLE):
            try:
                result = super().run(role)
            except Exception:
                # launch_agent closes it after any exception of the agent's too: a round that timed
                # out while a pod was still on its way to a node, etcd out of reach.
                self._leave_rendezvous_open()
                raise
            statuses = [failure.exitcode for failure in result.failures.values()]
            if result.is_failed() and pod_exit_status(statuses) not in PERMANENT_EXITS:
                self._leave_rendezvous_open()
            return result

        def _leave_rendezvous_open(self):
            handler = self._worker_group.spec.rdzv_handler
            # The shutdown skipped here is also what stops the dynamic rendezvous' (etcd-v2's)
            # keep-alive heartbeats: this pod is leaving the round, so they stop all the same.
            # Other handlers (static, etcd v1) have none.
            stop_heartbeats = getattr(handler, "_stop_heartbeats", None)
            if callable(stop_heartbeats):
                stop_heartbeats()
            handler.shutdown = lambda: False

        def _stop_workers(self, worker_group):
            # A round restarted for a membership change (a pod joining, or one restarted after its
            # peer's preemption) or after a failure SIGTERMs the workers still running, which save
            # first: LocalElasticAgent gave them a fixed 30 s before SIGKILL there, not the
            # TORCH_ELASTIC_SHUTDOWN_TIMEOUT the pod sets from its model's save time
            # (config/checkpoint_time.py), which only the agent's own SIGTERM used.
            self._shutdown(timeout=self._shutdown_timeout)

        def _monitor_workers(self, worker_group):
            result = super()._monitor_workers(worker_group)
            permanent = sorted({failure.exitcode for failure in result.failures.values()
                                if failure.exitcode in PERMANENT_EXITS})
            if result.is_failed() and permanent and self._remaining_restarts > 0:
                log(f"error: torchrun: a worker exited {', '.join(map(str, permanent))}, which every "
                    f"restart would repeat; not restarting ({self._remaining_restarts} restart(s) unused)",
                    sys.stderr)
                self._remaining_restarts = 0
            return result

    api.LocalElasticAgent = StopOnPermanentFailure


def main(argv: list[str] | None = None) -> NoReturn:
    from torch.distributed import run
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousClosedError, RendezvousError

    stop_restarting_on_permanent_failures()
    try:
        run.main(argv)
    except ChildFailedError as failed:
        # torchrun's own failure report (each worker's status and error file), without the
        # launcher's traceback that an uncaught exception would add.
        log(str(failed), sys.stderr)
        failures = sorted(failed.failures.values(), key=lambda failure: failure.timestamp)
        code = pod_exit_status(failure.exitcode for failure in failures)
        log(f"error: torchrun: {len(failures)} worker(s) of this pod failed (statuses "
            f"{', '.join(str(f.exitcode) for f in failures)}); the pod exits {code}", sys.stderr)
        raise SystemExit(code) from None
    except SignalException as signalled:
        # 128 + the signal, as a shell reports it: SIGTERM (a drained or preempted pod) is 143.
        code = pod_exit_status((), agent_signal=int(signalled.sigval))
        log(f"error: torchrun got {signalled.sigval.name} and stopped its workers; the pod exits {code}",
            sys.stderr)
        raise SystemExit(code) from None
    except RendezvousClosedError:
        # A pod that finished, or stopped with a permanent status, closed it (the agent above);
        # torch's exception carries no message, and its traceback would be the pod's last lines.
        log(f"error: torchrun: the rendezvous of run {run.parse_args(argv).rdzv_id} is closed: another pod of "
            f"this job ended it (it finished, or stopped with a status no restart cures; its log says which), "
            f"so there is no round to join; the pod exits {TORCHRUN_FAILED}", sys.stderr)
        raise SystemExit(TORCHRUN_FAILED) from None
    except RendezvousError as failed:
        # A round that timed out (the other pods not all there within the rendezvous timeout, one
        # still waiting for a node or pulling its image) or etcd out of reach: the rendezvous stays
        # open (the agent above), and the pod's restart joins it again.
        why = " ".join(str(failed).split())[:300] or "no message"
        log(f"error: torchrun: the rendezvous of run {run.parse_args(argv).rdzv_id} failed "
            f"({type(failed).__name__}: {why}); it stays open for this pod's restart to join; the pod exits "
            f"{TORCHRUN_FAILED}", sys.stderr)
        raise SystemExit(TORCHRUN_FAILED) from None
    raise SystemExit(0)


if __name__ == "__main__":
    main()
