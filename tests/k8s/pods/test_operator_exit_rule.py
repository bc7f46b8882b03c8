"""How a PyTorchJob ends, for each way our trainer exits: only a finished run may end Succeeded.

A small model of what decides it, faithful to these sources:

Training Operator v1.9.4 (kubeflow/trainer, tag v1.9.4, commit 4445c12a):
- pkg/core/pod.go:81-88, SetRestartPolicy: a replica's restartPolicy ExitCode becomes the pod's
  Never; any other is copied to the pod template.
- pkg/controller.v1/common/pod.go:339-376, ReconcilePods: a pod in phase Failed is deleted (and
  so recreated) under OnFailure and Always, and under ExitCode when its container's exit code is
  retryable, which pkg/util/train/train_util.go:24-26 (IsRetryableExitCode) defines as >= 128;
  ExitCode with a lower code marks the job Failed.
- pkg/core/status.go:34-50, UpdateJobReplicaStatuses: Running pods count as active (as failed
  when being deleted), Succeeded as succeeded, Failed as failed.
- pkg/controller.v1/pytorch/pytorchjob_controller.go:404-418, UpdateJobStatus for a job without
  a Master (all our presets): Succeeded when every worker succeeded, **or when the job has an
  elasticPolicy and any worker succeeded**; lines 428-447: failed workers make it Restarting
  unless the policy is Never.

Kubernetes, the pod lifecycle (https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/):
the kubelet restarts a container that exits non-zero under restartPolicy OnFailure (the pod stays
Running); a pod whose containers have all terminated and will not restart is Succeeded when all
exited 0, else Failed. A pod being deleted (drained, preempted) restarts nothing.

torchrun exits 0 when every worker exited 0, else TORCHRUN_FAILED, also when it got SIGTERM
itself (tests/trainer/test_preemption.py measures both agents of a preempted two-pod job). With
restarts left, torchrun restarts a failed worker in the pod instead of exiting. The model below is
of torchrun's status; the container's command, trainer.launch, passes the workers' permanent
statuses and 143 through instead (tests/trainer/test_launch.py), which OnFailure retries alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from config.kubernetes import (
    EXIT_CHECKPOINT_READ_FAILED, EXIT_CHECKPOINTS_UNLOADABLE, EXIT_CRASH, EXIT_NONFINITE, EXIT_NOT_ON_EFA,
    EXIT_PREEMPTED, EXIT_USAGE, TORCHRUN_FAILED,
)
from k8s.pods.pytorchjob import presets_for, render_pytorchjob

IMAGE = "111111111111.dkr.ecr.us-west-2.amazonaws.com/trainer:abc123"


def torchrun_exit(worker_codes: list[int], *, got_sigterm: bool = False) -> int:
    """torchrun's exit status once it has no restarts left (or was told to stop)."""
    return 0 if not got_sigterm and all(code == 0 for code in worker_codes) else TORCHRUN_FAILED


@dataclass(frozen=True)
class Pod:
    exit_code: int  # the container's, that is torchrun's
    deleted: bool = False  # drained or preempted: the kubelet sent SIGTERM and will not restart it


def pod_phase(pod: Pod, restart_policy: str) -> str:
    pod_policy = "Never" if restart_policy == "ExitCode" else restart_policy  # SetRestartPolicy
    if not pod.deleted and (pod_policy == "Always" or (pod_policy == "OnFailure" and pod.exit_code != 0)):
        return "Running"  # the kubelet restarts the container in place
    return "Succeeded" if pod.exit_code == 0 else "Failed"


def job_condition(pods: list[Pod], restart_policy: str, *, elastic: bool = True) -> str:
    phases = [pod_phase(p, restart_policy) for p in pods]
    succeeded, failed = phases.count("Succeeded"), phases.count("Failed")
    if succeeded == len(pods) or (elastic and succeeded > 0):
        return "Succeeded"
    if any(phase == "Failed" and restart_policy == "ExitCode" and pod.exit_code < 128
           for pod, phase in zip(pods, phases)):
        return "Failed"
    if failed:
        return "Restarting" if restart_policy != "Never" else "Failed"
    return "Running"


def preempted(peer_worker_exit: int) -> list[Pod]:
    """Two pods: one drained (its torchrun got SIGTERM), its peer's worker stopped with the status given."""
    return [Pod(torchrun_exit([EXIT_PREEMPTED], got_sigterm=True), deleted=True),
            Pod(torchrun_exit([peer_worker_exit]))]


CASES = {
    "finished run": ([Pod(torchrun_exit([0])), Pod(torchrun_exit([0]))], "Succeeded"),
    "preempted pod and its peer": (preempted(EXIT_PREEMPTED), "Restarting"),
    "EFA check failed": ([Pod(torchrun_exit([EXIT_NOT_ON_EFA])), Pod(torchrun_exit([EXIT_NOT_ON_EFA]))], "Running"),
    "usage error": ([Pod(torchrun_exit([EXIT_USAGE])), Pod(torchrun_exit([EXIT_USAGE]))], "Running"),
    "no checkpoint loads, or one is refused": ([Pod(torchrun_exit([EXIT_CHECKPOINTS_UNLOADABLE]))] * 2, "Running"),
    "a checkpoint read failed": ([Pod(torchrun_exit([EXIT_CHECKPOINT_READ_FAILED]))] * 2, "Running"),
    "non-finite steps in a row": ([Pod(torchrun_exit([EXIT_NONFINITE]))] * 2, "Running"),
    "a crash": ([Pod(torchrun_exit([EXIT_CRASH])), Pod(torchrun_exit([EXIT_CRASH]))], "Running"),
}


def test_every_status_but_a_finished_runs_is_non_zero_and_each_has_one_meaning():
    import config.kubernetes as k

    statuses = {name: value for name, value in vars(k).items() if name.startswith("EXIT_")}
    assert all(value != 0 for value in statuses.values())
    # EXIT_CRASH is torchrun's own failure status on purpose; every other status means one thing.
    assert sorted(statuses.values()) == sorted(set(statuses.values())) and EXIT_CRASH == TORCHRUN_FAILED


@pytest.mark.parametrize("case", CASES)
def test_only_a_finished_run_ends_the_elastic_job_succeeded(case):
    pods, expected = CASES[case]
    assert job_condition(pods, "OnFailure") == expected
    # Running: the kubelet restarts the failed containers; backoffLimit ends a run that keeps failing.


def test_a_peer_that_exited_0_after_a_preemption_save_would_end_the_job_succeeded():
    """What the trainer did before: the reason every rank now exits EXIT_PREEMPTED."""
    assert job_condition(preempted(0), "OnFailure") == "Succeeded"
    assert job_condition(preempted(0), "OnFailure", elastic=False) == "Restarting"


def test_the_exit_code_policy_would_end_a_preempted_run_failed_because_torchrun_reports_1():
    """ExitCode retries only codes >= 128; torchrun turns the workers' EXIT_PREEMPTED into 1, so
    the presets use OnFailure (a launcher that passed the workers' statuses through would be
    needed for ExitCode)."""
    assert EXIT_PREEMPTED >= 128 and TORCHRUN_FAILED < 128
    assert job_condition(preempted(EXIT_PREEMPTED), "ExitCode") == "Failed"


def test_every_rendered_job_is_elastic_and_restarts_on_failure(dev):
    for preset in presets_for(dev):
        spec = render_pytorchjob(dev, preset.name, image=IMAGE)["spec"]
        assert "elasticPolicy" in spec, preset.name
        assert spec["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] == "OnFailure", preset.name
