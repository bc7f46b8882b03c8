"""The training pod's command: torchrun, with the workers' exit status kept for Kubernetes.

    python -m trainer.launch [torchrun's options] --module trainer.llm ...

torchrun (torch 2.13) exits 1 whenever a worker failed, whatever the worker's status, and also
when it got SIGTERM itself (tests/trainer/test_launch.py measures both). The pod's status was
therefore 1 for a usage error, a lost final save and a preemption alike, and nothing after the
pod (the Job's podFailurePolicy, the operator) could tell a fault that every restart repeats from
one a restart cures. This runs torchrun's own entry point in this process (its signal handling
and PET_* options unchanged) and exits with `pod_exit_status` of what its workers reported.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import NoReturn

from config.kubernetes import EXIT_PREEMPTED, PERMANENT_EXITS, TORCHRUN_FAILED
from trainer.log import log


def pod_exit_status(worker_codes: Iterable[int], *, agent_signal: int | None = None) -> int:
    """The pod's status for the failed workers' statuses (torchrun's failure report, which holds
    the workers of this pod only). A permanent status wins over every other: the first rank to
    stop names the fault, and its peers then stop with 1 ("another rank stopped first") or are
    stopped by torchrun with a signal. Next a signal torchrun itself got (128 + it: the kubelet's
    SIGTERM is 143), then a preemption (a worker saved and exited 143), then torchrun's own 1:
    retryable."""
    codes = list(worker_codes)
    permanent = [code for code in codes if code in PERMANENT_EXITS]
    if permanent:
        return permanent[0]
    if agent_signal is not None:
        return 128 + agent_signal
    if EXIT_PREEMPTED in codes:
        return EXIT_PREEMPTED
    return TORCHRUN_FAILED


def main(argv: list[str] | None = None) -> NoReturn:
    from torch.distributed import run
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

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
    raise SystemExit(0)


if __name__ == "__main__":
    main()
