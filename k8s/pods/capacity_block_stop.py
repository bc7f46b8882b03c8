"""Runs on a capacity-block group end cleanly: suspended, with a checkpoint, before EKS drains the group.

"Amazon EKS will setup a scheduled scale down on the node group 40 minutes prior to their reservation
end", and EC2 shuts the instances down from 30 minutes before the end (Amazon EKS User Guide,
https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html). A drain at T-40 reads to
the Training Operator as pods that failed, and a save longer than ten minutes is cut by EC2. So each
run on the group is suspended earlier, as `ops stop` suspends it: a PyTorchJob's runPolicy.suspend, a
TrainJob's spec.suspend (trainingApi v2), or under Kueue the TrainJob's Workload deactivated
(spec.active: false; Kueue owns the TrainJob's suspend then, ops/trainjobs.py). Its pods are deleted,
every rank gets SIGTERM and its grace period to save, the trainer exits 143 (preempted), and the run
is left Suspended, resumable with `ops start`, never Succeeded.

When: STOP_LATEST before the end at the latest, earlier by the group's longest save (the grace period
of its presets, config/checkpoint_time.py) so that the save ends before EKS drains at T-40.

How: a CronJob per capacity-block group in the training namespace, created by `ops capacity-block
schedule` (a cron line fires yearly, so the script also checks that it runs inside [stop, end)). Its
pod runs kubectl in the environment's kubectl-delivery image (kubectl within one minor of the
cluster) with the ServiceAccount and Role of k8s/addons/capacity_block_stop.py, and deletes its own
CronJob when done.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

from config.checkpoint_time import stop_budget
from config.environment import Environment
from config.kubernetes import (
    CAPACITY_BLOCK_STOP, LABEL_PREFIX, NODEGROUP_LABEL, SYSTEM_NODEGROUP, TRAINING_NAMESPACE,
    capacity_block_stop_cronjob_name,
)
from k8s.pods.names import API_CLIENT_LABEL, CONTROL_PRIORITY_CLASS, project_labels
from k8s.pods.podspec import validate_pod_templates
from k8s.pods.resources import fixed_resources
from k8s.pods.security import NONROOT_UID
from k8s.pods.workload import (
    container, hardened_container_security_context, hardened_pod_security_context, pod_spec, rendered,
)

NAME = CAPACITY_BLOCK_STOP
COMPONENT = NAME
EKS_SCALEDOWN_BEFORE_END = timedelta(minutes=40)
STOP_LATEST = timedelta(minutes=45)
# Between the end of the longest save and EKS's drain.
SAVE_MARGIN = timedelta(seconds=60)
# EC2 starts shutting instances down 30 minutes before the end; a stop that starts later than a
# minute before that is pointless, so the CronJob gives up then.
EC2_SHUTDOWN_BEFORE_END = timedelta(minutes=30)
STOPPED_BY_ANNOTATION = f"{LABEL_PREFIX}/stopped-by"
# The kubectl-delivery image's user (k8s/images/kubectl-delivery/Dockerfile: USER), distroless's nonroot.
KUBECTL_UID = NONROOT_UID
# The annotation, the suspend patch and the jsonpath the script uses on PyTorchJobs.
SUSPEND_PATCH = '{"spec":{"runPolicy":{"suspend":true}}}'
_GROUP_KEY = NODEGROUP_LABEL.replace(".", "\\.")
RUNS_JSONPATH = ("{range .items[*]}{.metadata.name}{\"\\t\"}"
                 "{.spec.pytorchReplicaSpecs.Worker.template.spec.nodeSelector." + _GROUP_KEY + "}{\"\\t\"}"
                 "{.status.conditions[-1:].type}{\"\\n\"}{end}")
# trainingApi v2: a TrainJob's node group is its runtime's (k8s/pods/trainjob.py: one `node` job);
# its true condition types say whether it finished (Trainer v2.3.0: Complete, Failed).
TRAINJOB_SUSPEND_PATCH = '{"spec":{"suspend":true}}'
WORKLOAD_DEACTIVATE_PATCH = '{"spec":{"active":false}}'
RUNTIMES_JSONPATH = ("{range .items[*]}{.metadata.name}{\"\\t\"}"
                     "{.spec.template.spec.replicatedJobs[0].template.spec.template.spec.nodeSelector."
                     + _GROUP_KEY + "}{\"\\n\"}{end}")
TRAINJOBS_JSONPATH = ("{range .items[*]}{.metadata.name}{\"\\t\"}{.spec.runtimeRef.name}{\"\\t\"}"
                      "{.status.conditions[?(@.status==\"True\")].type}{\"\\n\"}{end}")
# Kueue names a Workload after its job; its controller owner reference names the TrainJob.
WORKLOADS_JSONPATH = ("{range .items[*]}{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}"
                      "{\"\\t\"}{.metadata.name}{\"\\n\"}{end}")


def cronjob_name(group: str) -> str:
    return capacity_block_stop_cronjob_name(group)


def group_grace_s(config: Environment, group: str) -> int:
    """The longest grace period of a run on `group`: its presets' stop budgets."""
    from k8s.pods.pytorchjob import presets_for

    instance = config.nodegroup(group).instance_type
    return max((stop_budget(p, instance, config.fsx).grace_s for p in presets_for(config) if p.nodegroup == group),
               default=0)


def stop_at(end: datetime, grace_s: int) -> datetime:
    """When to suspend the runs of a block ending at `end`: T-45 min, or earlier so that a save of
    `grace_s` ends a minute before EKS's drain at T-40. Whole minutes (cron), never later."""
    when = min(end - STOP_LATEST, end - EKS_SCALEDOWN_BEFORE_END - timedelta(seconds=grace_s) - SAVE_MARGIN)
    return when.astimezone(timezone.utc).replace(second=0, microsecond=0)


def stop_script(training_api: str = "v1", queueing: str = "none") -> str:
    """The CronJob's shell script for the environment's run API and queueing; env GROUP, CRONJOB (its
    own name), RESERVATION, STOP_AT and BLOCK_END (epoch seconds)."""
    window = [
        "set -eu",
        'now=$(date -u +%s)',
        'if [ "$now" -lt "$STOP_AT" ] || [ "$now" -ge "$BLOCK_END" ]; then',
        '  echo "outside the stop window of $RESERVATION ($STOP_AT to $BLOCK_END, now $now): nothing to do"',
        "  exit 0",
        "fi",
        "tab=$(printf '\\t')",
    ]
    # Done: the cron line would fire again next year.
    done = [f'kubectl delete cronjob "$CRONJOB" -n {TRAINING_NAMESPACE} --ignore-not-found']
    if training_api == "v2":
        return "\n".join([*window, *_trainjob_stops(queueing == "kueue"), *done])
    return "\n".join([
        *window,
        f"runs=$(kubectl get pytorchjobs -n {TRAINING_NAMESPACE} -o jsonpath='{RUNS_JSONPATH}')",
        'printf "%s\\n" "$runs" | while IFS="$tab" read -r name group last; do',
        '  [ -n "$name" ] && [ "$group" = "$GROUP" ] || continue',
        '  case "$last" in Succeeded|Failed) continue ;; esac',
        # The annotation first: `ops status` says why a run stopped even if the patch is retried.
        f'  kubectl annotate pytorchjob "$name" -n {TRAINING_NAMESPACE} --overwrite '
        f'"{STOPPED_BY_ANNOTATION}=capacity-block $RESERVATION ends $BLOCK_END"',
        f"  kubectl patch pytorchjob \"$name\" -n {TRAINING_NAMESPACE} --type=merge -p '{SUSPEND_PATCH}'",
        '  echo "suspended $name: its pods save a checkpoint and stop; resume it with ops start"',
        "done",
        *done,
    ])


def _trainjob_stops(kueue: bool) -> list[str]:
    """Each unfinished TrainJob whose runtime places it on $GROUP: annotated, then suspended, or under
    Kueue its Workload deactivated (never its spec.suspend, which Kueue owns)."""
    ns = TRAINING_NAMESPACE
    lines = [
        f"runtimes=$(kubectl get trainingruntimes -n {ns} -o jsonpath='{RUNTIMES_JSONPATH}')",
        f"runs=$(kubectl get trainjobs -n {ns} -o jsonpath='{TRAINJOBS_JSONPATH}')",
        *([f"workloads=$(kubectl get workloads -n {ns} -o jsonpath='{WORKLOADS_JSONPATH}')"] if kueue else []),
        # `set -e`: each lookup loop ends in a command that succeeds.
        'lookup() { printf "%s\\n" "$1" | while IFS="$tab" read -r key value; do '
        'if [ "$key" = "$2" ]; then echo "$value"; fi; done; }',
        'printf "%s\\n" "$runs" | while IFS="$tab" read -r name runtime states; do',
        '  [ -n "$name" ] || continue',
        '  [ "$(lookup "$runtimes" "$runtime")" = "$GROUP" ] || continue',
        '  case " $states " in *" Complete "*|*" Failed "*) continue ;; esac',
    ]
    if kueue:
        lines += [
            '  workload=$(lookup "$workloads" "TrainJob/$name")',
            '  if [ -z "$workload" ]; then echo "TrainJob $name has no Kueue Workload yet: left alone"; continue; fi',
        ]
    lines.append(f'  kubectl annotate trainjob "$name" -n {ns} --overwrite '
                 f'"{STOPPED_BY_ANNOTATION}=capacity-block $RESERVATION ends $BLOCK_END"')
    if kueue:
        lines += [f"  kubectl patch workload \"$workload\" -n {ns} --type=merge -p '{WORKLOAD_DEACTIVATE_PATCH}'",
                  '  echo "deactivated the Workload of $name: Kueue suspends it, its pods save a checkpoint and stop; '
                  'resume it with ops start"']
    else:
        lines += [f"  kubectl patch trainjob \"$name\" -n {ns} --type=merge -p '{TRAINJOB_SUSPEND_PATCH}'",
                  '  echo "suspended $name: its pods save a checkpoint and stop; resume it with ops start"']
    return [*lines, "done"]


def stop_cronjob(config: Environment, group: str, *, reservation_id: str, end: datetime, image: str,
                 now: datetime) -> dict:
    """The CronJob that suspends `group`'s runs before its block ends at `end`."""
    stop = stop_at(end, group_grace_s(config, group))
    give_up = end - EC2_SHUTDOWN_BEFORE_END - timedelta(minutes=1)
    deadline = max(60, math.floor((give_up - stop).total_seconds()))
    env = {"GROUP": group, "CRONJOB": cronjob_name(group), "RESERVATION": reservation_id,
           "STOP_AT": str(int(stop.timestamp())), "BLOCK_END": str(int(end.timestamp()))}
    stopper = container(name=NAME, image=image,
                        command=["/bin/sh", "-c", stop_script(config.training_api, config.queueing)],
                        env=[{"name": k, "value": v} for k, v in env.items()],
                        resources=fixed_resources(50, 64),
                        security_context=hardened_container_security_context(KUBECTL_UID))
    pod = pod_spec(containers=[stopper], security_context=hardened_pod_security_context(KUBECTL_UID),
                   automount_token=True, serviceAccountName=NAME, restartPolicy="OnFailure",
                   nodeSelector={NODEGROUP_LABEL: SYSTEM_NODEGROUP}, priorityClassName=CONTROL_PRIORITY_CLASS)
    cronjob = rendered({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": cronjob_name(group), "namespace": TRAINING_NAMESPACE,
                     "labels": project_labels(COMPONENT),
                     "annotations": {f"{LABEL_PREFIX}/stop-at": f"{stop:%Y-%m-%dT%H:%M}Z",
                                     f"{LABEL_PREFIX}/block-end": f"{end.astimezone(timezone.utc):%Y-%m-%dT%H:%M}Z",
                                     f"{LABEL_PREFIX}/scheduled-at": f"{now.astimezone(timezone.utc):%Y-%m-%dT%H:%M}Z"}},
        "spec": {
            "schedule": f"{stop.minute} {stop.hour} {stop.day} {stop.month} *",
            "timeZone": "Etc/UTC",
            "concurrencyPolicy": "Forbid",
            # A late start (controller down, no system node) still runs while a stop is worth it.
            "startingDeadlineSeconds": deadline,
            "successfulJobsHistoryLimit": 1, "failedJobsHistoryLimit": 1,
            "jobTemplate": {"spec": {"backoffLimit": 3, "template": {
                "metadata": {"labels": {**project_labels(COMPONENT), API_CLIENT_LABEL: "true"}}, "spec": pod}}},
        },
    })
    validate_pod_templates(cronjob, config.kubernetes_version)
    return cronjob
