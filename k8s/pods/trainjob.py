"""A run under `trainingApi: v2`: a namespaced TrainingRuntime and the TrainJob that uses it.

Kubeflow Trainer v2.3.0 (trainer.kubeflow.org/v1alpha1) builds a JobSet from a runtime's template,
then applies the TrainJob's overrides. Each run gets a runtime of its own, named as the run, rather
than one shared ClusterTrainingRuntime: JobSet-level fields (the failure policy's maxRestarts) are
per preset and a TrainJob cannot patch them, and a shared runtime edited by a deploy would make
Kueue (which rebuilds a running TrainJob's pod sets from the live runtime) suspend and requeue every
job on it. A per-run runtime is never edited; ops/trainjob.py sets the TrainJob as its owner, so it
goes with the run.

The pod is the v1 worker template (k8s/pods/pytorchjob.py `worker_template`), container renamed
`node` (Trainer finds its trainer container by that name). Everything it requests lives in the
runtime: the TrainJob never sets `resourcesPerNode`. Trainer v2.3.0 merges that override key by key
but then writes back only limits and requests, so a container's DRA `claims` vanish, and Kueue
v0.19.2 computes quota with the Trainer v2.2.1 code it vendors, where the override replaces the
container's resources whole: EFA devices and huge pages gone
(tests/k8s/pods/test_render_trainjob.py reads the contract's merge code).

Fault semantics (README "Training API: v1 or v2"): pods never restart in place (`Never`); a pod
that failed makes its Job fail at once (`backoffLimit: 0`), and the JobSet recreates every Job
(`BlockingRecreate`: no new pod until every old one is gone, so no rank of the old attempt still
writes a checkpoint the new one loads), up to `maxRestarts` times. A pod that failed because it
was evicted, drained or preempted (condition DisruptionTarget) fails its Job with reason
PodFailurePolicy, which restarts the JobSet without counting. A pod whose status is permanent (a
usage error, bad data, a final save refused by another run's lease, checkpoints none of which
loads: every attempt would repeat it) fails the Job by the second podFailurePolicy rule, and the
JobSet with it, instead of spending maxRestarts. Success needs every index of the
Job to complete (JobSet's default success policy, stated), so one rank exiting 0 early never
marks the run Succeeded. Every attempt runs the same command, which resumes from the newest
checkpoint in the preset's folder.
"""

from __future__ import annotations

import copy
from dataclasses import replace

from config.environment import Environment
from config.kubernetes import JOBSET_NAME_LABEL, LABEL_PREFIX, PERMANENT_EXITS, RUN_ID_ENV, TRAINING_NAMESPACE
from config.kubernetes import JOBSET_RESTART_ATTEMPT_LABEL as RESTART_ATTEMPT_LABEL
from config.presets import CLUSTER_CHECKPOINT_ROOT, get_preset
from k8s.pods.kueue_queues import queue_labels
from k8s.pods.names import C10D_PORT, ETCD_CLIENT_PORT, ETCD_SERVICE, short_digest
from k8s.pods.podspec import validate_pod_templates
from k8s.pods.pytorchjob import (
    JOB_LABEL, PRESET_LABEL, SPEC_DIGEST_LABEL, SPEC_DIGEST_LENGTH, JobSpec, job_spec, run_name, worker_template,
)
from k8s.pods.torchrun_env import rendezvous_env

GROUP = "trainer.kubeflow.org"
API_VERSION = f"{GROUP}/v1alpha1"
KIND = "TrainJob"
RUNTIME_KIND = "TrainingRuntime"
# Trainer's names: the trainer container and replicated job (pkg/constants Node), the label marking
# the replicated job the trainer settings apply to, and the runtime's framework label.
NODE = "node"
ANCESTOR_LABEL = f"{GROUP}/trainjob-ancestor-step"
FRAMEWORK_LABEL = f"{GROUP}/framework"
RESTART_ATTEMPT_ENV = "JOBSET_RESTART_ATTEMPT"
# The Job failure reason a podFailurePolicy FailJob rule gives (batch/v1 JobFailed reasons).
POD_FAILURE_POLICY = "PodFailurePolicy"
# The Job's podFailurePolicy, in order (the Job controller applies the first rule that matches): an
# evicted, drained or preempted pod, whatever its status; then a status every restart would repeat
# (trainer.launch gives the pod a worker's permanent status, config.kubernetes.PERMANENT_EXITS).
POD_FAILURE_RULES = [
    {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    {"action": "FailJob", "onExitCodes": {"containerName": NODE, "operator": "In", "values": list(PERMANENT_EXITS)}},
]
PERMANENT_RULE_INDEX = 1
# Both rules fail the Job with the same reason; the Job controller's message names the rule's index,
# "Container node for pod NS/NAME failed with exit code 2 matching FailJob rule at index 1" (Kubernetes,
# "Handling retriable and non-retriable pod failures with Pod failure policy",
# https://kubernetes.io/docs/tasks/job/pod-failure-policy/), and a JobSet rule may match the message
# with an RE2 pattern (JobSet v0.12.0 FailurePolicyRule.onJobFailureMessagePatterns).
PERMANENT_FAILURE_MESSAGE = rf"matching FailJob rule at index {PERMANENT_RULE_INDEX}$"


def rendezvous_endpoint(spec: JobSpec) -> str:
    """etcd: our Service. c10d: pod 0 of the run's only Job, by the hostname JobSet gives it
    (<jobset>-<replicated job>-<job index>-<pod index>.<subdomain = jobset name>)."""
    if spec.rendezvous == "etcd":
        return f"{ETCD_SERVICE}.{TRAINING_NAMESPACE}.svc:{ETCD_CLIENT_PORT}"
    return f"{spec.name}-{NODE}-0-0.{spec.name}:{C10D_PORT}"


def node_template(config: Environment, spec: JobSpec) -> dict:
    """The v1 worker pod, as Trainer's `node` container, never restarted in place, plus the
    rendezvous variables the v1 operator derived from elasticPolicy. The ids are filled in by
    runtime_manifest: PET_RDZV_ID is the run's id and `$(JOBSET_RESTART_ATTEMPT)`, a fresh etcd
    round for each JobSet attempt instead of the dead attempt's state."""
    template = worker_template(config, spec, container_name=NODE)
    template["spec"]["restartPolicy"] = "Never"  # podFailurePolicy requires it
    # config's rule for torchrun's backend name, applied to the (possibly overridden) choice.
    backend = replace(get_preset(spec.preset), rendezvous=spec.rendezvous).torch_rdzv_backend
    template["spec"]["containers"][0]["env"] += [
        # The run, the same on every attempt: the trainer's lease on the checkpoint folder takes
        # it over at once on a restart, instead of refusing "another run" (trainer/lease.py).
        {"name": RUN_ID_ENV, "value": ""},
        {"name": RESTART_ATTEMPT_ENV,
         "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{RESTART_ATTEMPT_LABEL}']"}}},
        *({"name": k, "value": v} for k, v in rendezvous_env(
            backend=backend, endpoint=rendezvous_endpoint(spec), run_id="", max_restarts=spec.max_restarts).items()),
    ]
    return template


def runtime_manifest(config: Environment, spec: JobSpec) -> dict:
    preset = get_preset(spec.preset)
    labels = {FRAMEWORK_LABEL: "torch", JOB_LABEL: spec.name, PRESET_LABEL: spec.preset}
    template = node_template(config, spec)
    container = template["spec"]["containers"][0]
    manifest = {
        "apiVersion": API_VERSION,
        "kind": RUNTIME_KIND,
        "metadata": {"name": spec.name, "namespace": TRAINING_NAMESPACE, "labels": labels,
                     "annotations": {f"{LABEL_PREFIX}/description": preset.description}},
        "spec": {
            "mlPolicy": {"numNodes": spec.nodes_max, "torch": {}},
            "template": {"spec": {
                # JobSet's defaults, stated: pods find each other by hostname before they are Ready.
                "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
                "successPolicy": {"operator": "All"},
                "failurePolicy": {
                    "maxRestarts": spec.max_restarts,
                    "restartStrategy": "BlockingRecreate",
                    # JobSet applies the first rule that matches; a failure no rule names restarts
                    # the JobSet and counts against maxRestarts (a crash, BackoffLimitExceeded).
                    "rules": [{"name": "permanent", "action": "FailJobSet",
                               "onJobFailureReasons": [POD_FAILURE_POLICY],
                               "onJobFailureMessagePatterns": [PERMANENT_FAILURE_MESSAGE]},
                              {"name": "disruption", "action": "RestartJobSetAndIgnoreMaxRestarts",
                               "onJobFailureReasons": [POD_FAILURE_POLICY]}],
                },
                "replicatedJobs": [{
                    "name": NODE,
                    "replicas": 1,  # Trainer's webhook requires 1; numNodes sets the Job's parallelism
                    "template": {
                        "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
                        "spec": {
                            "completionMode": "Indexed",
                            "backoffLimit": 0,
                            "podReplacementPolicy": "Failed",  # the only value podFailurePolicy allows
                            "podFailurePolicy": {"rules": copy.deepcopy(POD_FAILURE_RULES)},
                            "template": template,
                        },
                    },
                }],
            }},
        },
    }
    # As for v1's rdzvId: the image is left out of the digest (a CDK token is not stable text).
    image, container["image"] = container["image"], ""
    digest = short_digest(manifest, 10)
    container["image"] = image
    values = {e["name"]: e for e in container["env"]}
    values[RUN_ID_ENV]["value"] = f"{spec.name}-{digest}"
    values["PET_RDZV_ID"]["value"] = f"$({RUN_ID_ENV})-$({RESTART_ATTEMPT_ENV})"
    validate_pod_templates(manifest, config.kubernetes_version)
    return manifest


def trainjob_manifest(config: Environment, spec: JobSpec) -> dict:
    """The TrainJob: which runtime, how many nodes and processes. numProcPerNode is explicit:
    left out it is "auto", which on a CPU pod means one process per requested CPU."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": spec.name, "namespace": TRAINING_NAMESPACE,
                     "labels": {JOB_LABEL: spec.name, PRESET_LABEL: spec.preset, **queue_labels(config)},
                     "annotations": {f"{LABEL_PREFIX}/description": get_preset(spec.preset).description}},
        "spec": {
            "runtimeRef": {"apiGroup": GROUP, "kind": RUNTIME_KIND, "name": spec.name},
            "trainer": {"numNodes": spec.nodes_max, "numProcPerNode": spec.nproc_per_node},
            # Under Kueue its webhook owns spec.suspend (suspended until the Workload is admitted).
            **({} if config.queueing == "kueue" else {"suspend": False}),
        },
    }


def render_trainjob_run(config: Environment, preset_name: str, *, image: str, overrides: dict | None = None,
                        job_name: str | None = None,
                        checkpoint_root: str = CLUSTER_CHECKPOINT_ROOT) -> tuple[dict, dict]:
    """(TrainingRuntime, TrainJob) of a run of `preset_name`, named and labelled as render_run names
    a PyTorchJob run: PRESET-<digest of both rendered under the preset's name>. Create the runtime
    first: Trainer's webhook refuses a TrainJob whose runtime does not exist."""
    preset = get_preset(preset_name)

    def render(name: str) -> tuple[dict, dict]:
        spec = job_spec(config, preset, image=image, job_name=name, overrides=overrides,
                        checkpoint_root=checkpoint_root)
        return runtime_manifest(config, spec), trainjob_manifest(config, spec)

    digest = short_digest(list(render(preset.name)), SPEC_DIGEST_LENGTH)
    runtime, trainjob = render(job_name if job_name is not None else run_name(preset.name, digest))
    for obj in (runtime, trainjob):
        obj["metadata"]["labels"][SPEC_DIGEST_LABEL] = digest
    return runtime, trainjob


def node_pod_template(runtime: dict) -> dict:
    """The pod template of the runtime's `node` job (a copy)."""
    job = next(j for j in runtime["spec"]["template"]["spec"]["replicatedJobs"] if j["name"] == NODE)
    return copy.deepcopy(job["template"]["spec"]["template"])
