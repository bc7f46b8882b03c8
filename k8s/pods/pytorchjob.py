"""PyTorchJob manifests from a typed job spec and a preset: the one code path for every run.

Pure Python (no cdk8s): `render_pytorchjob` returns the manifest as a dict. A deploy applies no
PyTorchJob; runs are created by `ops start` / `ops submit` (and the validation's smoke run) from
`render_run`, which names each run after a digest of its whole spec, image included, so a name
identifies what runs and a changed spec is a new run, never a changed one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from config.environment import Environment, Nodegroup
from config.errors import ConfigError
from config.kubernetes import (
    FSX_CLAIM_NAME, FSX_MOUNT_PATH, JOB_NAME_PATTERN, LABEL_PREFIX, MAX_JOB_NAME, NODEGROUP_LABEL, TRAINING_NAMESPACE,
)
from config.models import expert_rows_problem, model_config
from config.overrides import OVERRIDES
from config.checkpoint_time import stop_budget
from config.workloads.llm import DecoderConfig
from config.presets import (
    CLUSTER_CHECKPOINT_ROOT, CLUSTER_COMPILE_CACHE_ROOT, RENDEZVOUS_BACKENDS, JobPreset, get_preset,
)
from k8s.pods.names import C10D_PORT, ETCD_CLIENT_LABEL, ETCD_CLIENT_PORT, ETCD_SERVICE, PYTORCH_CONTAINER, short_digest
from k8s.pods.network_env import network_env
from k8s.pods.podspec import validate_pod_templates
from k8s.pods.devices import device_resources, pod_resource_claims
from k8s.pods.kueue_queues import queue_labels
from k8s.pods.resources import gpu_toleration, node_share, shm_size
from k8s.pods.security import TRAINER_UID, container_security_context, pod_security_context
from k8s.pods.torchrun_env import AGENT_ENV, RENDEZVOUS_CONF

FLIGHT_RECORDER_DIR = "nccl-flight-recorder"
API_VERSION = "kubeflow.org/v1"
KIND = "PyTorchJob"
JOB_LABEL = f"{LABEL_PREFIX}/job"
PRESET_LABEL = f"{LABEL_PREFIX}/preset"

# A run's spec digest (render_run): on the PyTorchJob's labels, and the end of its default name.
SPEC_DIGEST_LABEL = f"{LABEL_PREFIX}/spec-digest"
SPEC_DIGEST_LENGTH = 8
INT32_MAX = 2**31 - 1

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class JobSpec:
    """Everything that shapes one PyTorchJob. Built from a preset; overrides replace fields."""

    name: str
    preset: str
    image: str
    command: tuple[str, ...]
    nodegroup: str
    nodes_min: int
    nodes_max: int
    nproc_per_node: int
    rendezvous: str
    max_restarts: int
    env: tuple[tuple[str, str], ...] = field(default=())


# What `overrides` may change, and the type each key takes (config/overrides.py documents the values).
OVERRIDABLE = {key: rule.type for key, rule in OVERRIDES.items()}


def checked_job_name(name: str) -> str:
    """`name` when it can name a run (its pods' names and labels derive from it); ConfigError otherwise."""
    if not isinstance(name, str) or not JOB_NAME_PATTERN.fullmatch(name):
        raise ConfigError("job_name", f"must be a DNS label of 1-{MAX_JOB_NAME} lowercase letters, digits or '-', "
                                      f"starting with a letter, got {name!r}")
    return name


def job_spec(config: Environment, preset: JobPreset, *, image: str, job_name: str | None = None,
             overrides: dict | None = None, checkpoint_root: str = CLUSTER_CHECKPOINT_ROOT) -> JobSpec:
    """The validated JobSpec for `preset` in `config`; ConfigError names the offending field.
    Checkpoints go to `checkpoint_root`/PRESET: every run of a preset resumes from the same folder."""
    name = checked_job_name(job_name if job_name is not None else preset.name)
    if not isinstance(image, str) or not image:
        raise ConfigError("image", "must be a container image reference")
    values: dict[str, Any] = {
        "nodegroup": preset.nodegroup, "nodes_min": preset.nodes_min, "nodes_max": preset.nodes_max,
        "nproc_per_node": preset.nproc_per_node, "rendezvous": preset.rendezvous,
        "max_restarts": preset.max_restarts, "env": {},
    }
    for key, value in (overrides or {}).items():
        if key not in OVERRIDABLE:
            raise ConfigError(f"overrides.{key}", f"unknown override; allowed are {', '.join(OVERRIDABLE)}")
        kind = OVERRIDABLE[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(f"overrides.{key}", f"must be {kind.__name__}, got {value!r}")
        values[key] = value

    group = _nodegroup(config, values["nodegroup"], preset.name)
    if preset.nodes_min < preset.nodes_max and "nodes_max" not in (overrides or {}):
        # An elastic preset's upper bound is what it may grow to: in an environment whose node
        # group is smaller, it grows to the group's maxSize (an override past it is still an error).
        values["nodes_max"] = max(values["nodes_min"], min(values["nodes_max"], group.max_size))
    instance = group.instance_type
    nproc = values["nproc_per_node"]
    if nproc is None:
        nproc = instance.gpus if instance.is_gpu else 1
    if nproc < 1:
        raise ConfigError("overrides.nproc_per_node", f"must be at least 1, got {nproc}")
    if instance.is_gpu and nproc > instance.gpus:
        raise ConfigError("overrides.nproc_per_node",
                          f"{nproc} processes need {nproc} GPUs but {instance.name} has {instance.gpus}")
    if values["nodes_min"] < 1 or values["nodes_max"] < values["nodes_min"]:
        raise ConfigError("overrides.nodes_max", f"need 1 <= nodes_min ({values['nodes_min']}) "
                                                 f"<= nodes_max ({values['nodes_max']})")
    if values["nodes_max"] > group.max_size:
        raise ConfigError("overrides.nodes_max", f"{values['nodes_max']} nodes exceed node group "
                                                 f"{group.name}'s maxSize {group.max_size} in {config.name}")
    _check_global_batch_divides(preset, values["nodes_min"], values["nodes_max"], nproc, overrides or {})
    _check_expert_rows_divide(preset, values["nodes_min"], values["nodes_max"], nproc, overrides or {})
    if values["rendezvous"] not in RENDEZVOUS_BACKENDS:
        raise ConfigError("overrides.rendezvous", f"must be one of {', '.join(RENDEZVOUS_BACKENDS)}, "
                                                  f"got {values['rendezvous']!r}")
    # backoffLimit (max_restarts x nodes_max + 1) is an int32 the API server refuses beyond 2**31 - 1.
    most_restarts = (INT32_MAX - 1) // values["nodes_max"]
    if not 0 <= values["max_restarts"] <= most_restarts:
        source = "overrides" if "max_restarts" in (overrides or {}) else f"presets.{preset.name}"
        raise ConfigError(f"{source}.max_restarts", f"must be 0 to {most_restarts} with nodes_max "
                                                    f"{values['nodes_max']}, got {values['max_restarts']}")
    env = values["env"]
    for key, value in env.items():
        if not _ENV_NAME.match(key):
            raise ConfigError(f"overrides.env.{key}", "must be a variable name (letters, digits, '_')")
        if not isinstance(value, str):
            raise ConfigError(f"overrides.env.{key}", "must be a string")
        if "TOKEN" in key.upper() or "SECRET" in key.upper() or "PASSWORD" in key.upper():
            raise ConfigError(f"overrides.env.{key}", "looks like a secret; put it in a Kubernetes "
                                                      "Secret, never inline in the job")
    return JobSpec(
        name=name, preset=preset.name, image=image,
        command=tuple(preset.command(checkpoint_root)), nodegroup=group.name,
        nodes_min=values["nodes_min"], nodes_max=values["nodes_max"], nproc_per_node=nproc,
        rendezvous=values["rendezvous"], max_restarts=values["max_restarts"],
        env=tuple(sorted(env.items())),
    )


def _check_global_batch_divides(preset: JobPreset, nodes_min: int, nodes_max: int, nproc: int,
                                overrides: dict) -> None:
    """The trainer stops with exit 2 on a world size that does not divide its global batch
    (trainer/batching.py): an elastic job that re-forms on such a node count, or a job started on
    one, would end Failed only once its nodes are up. The presets divide on their own range
    (tests/config/test_presets.py); an override of the range or the processes may not."""
    batch = getattr(preset.workload.trainer_config, "batch", None)
    global_batch = getattr(batch, "global_batch_size", None)
    if global_batch is None:  # none given: the trainer takes ranks x --batch-size, which always divides
        return
    for nodes in range(nodes_min, nodes_max + 1):
        ranks = nodes * nproc
        if global_batch % (ranks * batch.batch_size):
            raise ConfigError(_range_field(preset, overrides),
                              f"{preset.name}'s global batch of {global_batch} does not divide over {ranks} ranks x "
                              f"--batch-size {batch.batch_size} ({nodes} node(s) x {nproc} processes), and the trainer "
                              "stops there with exit 2; choose nodes and processes whose ranks x "
                              f"{batch.batch_size} divide {global_batch}")


def _check_expert_rows_divide(preset: JobPreset, nodes_min: int, nodes_max: int, nproc: int,
                              overrides: dict) -> None:
    """The trainer stops with exit 2 on a world size that does not divide a mixture of experts'
    expert rows (config.models.expert_rows_problem), as it does on a global batch that does not
    divide. A model that only a Hugging Face config.json names is known first in the pod."""
    trainer = preset.workload.trainer_config
    model = getattr(trainer, "model", None)
    if not isinstance(model, DecoderConfig) or model.name is None:
        return
    shape = model_config(model.name, n_layers=model.layers)
    for nodes in range(nodes_min, nodes_max + 1):
        ranks = nodes * nproc
        problem = expert_rows_problem(shape, ranks) if trainer.fsdp.shards(ranks) else None
        if problem:
            raise ConfigError(_range_field(preset, overrides),
                              f"{preset.name} on {nodes} node(s) x {nproc} processes stops in the trainer with "
                              f"exit 2: {model.name} {problem}")


def _range_field(preset: JobPreset, overrides: dict) -> str:
    """The field to blame for a world size of the node range: the override that changed it, else the preset."""
    changed = [k for k in ("nproc_per_node", "nodes_max", "nodes_min", "nodegroup") if k in overrides]
    return f"overrides.{changed[0]}" if changed else f"presets.{preset.name}"


def _nodegroup(config: Environment, name: str, preset: str) -> Nodegroup:
    try:
        return config.nodegroup(name)
    except KeyError:
        known = ", ".join(g.name for g in config.training_nodegroups) or "none"
        raise ConfigError(f"environments.{config.name}",
                          f"preset {preset} needs node group {name!r}, which this environment does not "
                          f"define (its training node groups: {known})") from None


def rendezvous_host(spec: JobSpec) -> str:
    """etcd: our Service. c10d: the Service the operator creates for worker 0."""
    if spec.rendezvous == "etcd":
        return f"{ETCD_SERVICE}.{TRAINING_NAMESPACE}.svc"
    return f"{spec.name}-worker-0"


def worker_template(config: Environment, spec: JobSpec, *, container_name: str = PYTORCH_CONTAINER) -> dict:
    """The pod template of every worker of `spec`: the one pod both training APIs run (a PyTorchJob's
    Worker here, a TrainingRuntime's `node` job in k8s/pods/trainjob.py), named as each API requires."""
    group = config.nodegroup(spec.nodegroup)
    instance = group.instance_type
    preset = get_preset(spec.preset)
    cpu, memory = node_share(instance)
    stop = stop_budget(preset, instance, config.fsx)
    pod_labels = {JOB_LABEL: spec.name, PRESET_LABEL: spec.preset}
    if spec.rendezvous == "etcd":
        pod_labels[ETCD_CLIENT_LABEL] = "true"

    env = [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        # trainer/metrics.py takes the peak FLOPs for MFU from the instance-type table by this
        # name; without it, it guesses from the GPU's name.
        {"name": "TRAINER_INSTANCE_TYPE", "value": instance.name},
        # How long torchrun lets its workers save after it forwards SIGTERM (its default is 30 s);
        # the pod's grace period adds torchrun's own exit (config/checkpoint_time.py).
        {"name": "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "value": str(stop.shutdown_timeout_s)},
        *({"name": k, "value": v} for k, v in AGENT_ENV.items()),
        *(flight_recorder_env(preset.job_dir(CLUSTER_CHECKPOINT_ROOT)) if instance.is_gpu else ()),
        *(compile_cache_env(spec.preset, spec.image) if instance.is_gpu else ()),
        # No HF_TOKEN: a run reads models from FSx (--init-from-hf is a directory there), never the
        # hub; only the model-download Job (k8s/pods/model_download.py) gets the token.
        *network_env(instance),
        *({"name": k, "value": v} for k, v in spec.env),
    ]
    container = {
        "name": container_name,
        "image": spec.image,
        # Images are pinned by tag or digest; Always would only add a registry round-trip per pod.
        "imagePullPolicy": "IfNotPresent",
        "command": list(spec.command),
        "env": env,
        "resources": device_resources(group, cpu=cpu, memory=memory),
        # The root file system stays writable: torch.compile, Triton and NCCL write caches and logs
        # under $HOME and /tmp.
        "securityContext": container_security_context(),
        "volumeMounts": [
            {"name": "fsx", "mountPath": FSX_MOUNT_PATH},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
    }
    pod_spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": stop.grace_s,
        "securityContext": pod_security_context(TRAINER_UID),
        # Workers never call the Kubernetes API.
        "automountServiceAccountToken": False,
        "nodeSelector": {NODEGROUP_LABEL: spec.nodegroup},
        "containers": [container],
        "volumes": [
            {"name": "fsx", "persistentVolumeClaim": {"claimName": FSX_CLAIM_NAME}},
            # The container runtime's 64 MiB /dev/shm is too small for NCCL and DataLoader workers.
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_size(instance)}},
        ],
        **pod_resource_claims(group),
    }
    if instance.is_gpu:
        pod_spec["tolerations"] = [gpu_toleration()]
    return {"metadata": {"labels": pod_labels}, "spec": pod_spec}


def pytorchjob_manifest(config: Environment, spec: JobSpec) -> dict:
    """The PyTorchJob for `spec`; rdzvId is the job name plus a digest of everything else, so a
    resubmitted job (new name or new content) never joins a stale rendezvous round in etcd."""
    preset = get_preset(spec.preset)
    labels = {JOB_LABEL: spec.name, PRESET_LABEL: spec.preset, **queue_labels(config)}
    template = worker_template(config, spec)
    container = template["spec"]["containers"][0]

    elastic = {
        # config's rule for torchrun's backend name, applied to the (possibly overridden) choice.
        "rdzvBackend": replace(preset, rendezvous=spec.rendezvous).torch_rdzv_backend,
        "rdzvHost": rendezvous_host(spec),
        "rdzvPort": ETCD_CLIENT_PORT if spec.rendezvous == "etcd" else C10D_PORT,
        "rdzvId": "",
        "minReplicas": spec.nodes_min,
        "maxReplicas": spec.nodes_max,
        "maxRestarts": spec.max_restarts,
        # The operator joins these into PET_RDZV_CONF, key=value with commas (v1.9 elastic.go).
        "rdzvConf": [{"key": key, "value": value} for key, value in RENDEZVOUS_CONF.items()],
        # Deprecated upstream in favour of spec.nprocPerNode, but v1.9 still honours it and the
        # two may not both be set; keeping the whole torchrun topology in one block.
        "nProcPerNode": spec.nproc_per_node,
    }
    manifest = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": spec.name,
            "namespace": TRAINING_NAMESPACE,
            "labels": labels,
            "annotations": {f"{LABEL_PREFIX}/description": preset.description},
        },
        "spec": {
            "elasticPolicy": elastic,
            "runPolicy": {
                # Once the job is Succeeded or Failed, the operator deletes its Running and Pending
                # pods and keeps the rest (Training Operator v1.9.4, kubeflow/trainer pkg/controller.
                # v1/common/job.go:53-59). A job failed by its backoff limit still has every pod
                # Running (OnFailure restarts containers in place): with None they went on holding
                # their GPUs. A worker that exited 0 is Succeeded and stays, for `ops logs`.
                "cleanPodPolicy": "Running",
                # max_restarts is restarts of the whole group. The operator sums restartCount
                # over every container of every Running pod and fails the job once the sum is
                # >= backoffLimit (Training Operator v1.9.4, kubeflow/trainer pkg/core/job.go:
                # 101-132), and an event that stops the group (etcd lost: every agent exits 1)
                # restarts each pod once: nodes_max per group restart, one more so that the
                # max_restarts-th still runs.
                "backoffLimit": spec.max_restarts * spec.nodes_max + 1,
            },
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": spec.nodes_max,
                    "restartPolicy": "OnFailure",
                    "template": template,
                },
            },
        },
    }
    # The image is left out of the digest: in the CDK sink it is a token whose text is not stable
    # between synths, and a changed rdzvId would rewrite a running job's spec on every deploy.
    container["image"] = ""
    digest = short_digest(manifest, 10)
    container["image"] = spec.image
    elastic["rdzvId"] = f"{spec.name}-{digest}"
    # The operator would silently drop a field the PodSpec does not have; make it an error here.
    validate_pod_templates(manifest, config.kubernetes_version)
    return manifest


def flight_recorder_env(job_dir: str) -> list[dict]:
    """NCCL's flight recorder (torch 2.13's ProcessGroupNCCL): each rank keeps its last collectives
    and, when one times out, writes them to <prefix><rank> in the job's checkpoint folder (the
    trainer creates the folder), so a hang names its rank and collective."""
    return [
        {"name": "TORCH_NCCL_TRACE_BUFFER_SIZE", "value": "20000"},
        {"name": "TORCH_NCCL_DUMP_ON_TIMEOUT", "value": "1"},
        {"name": "TORCH_NCCL_ENABLE_MONITORING", "value": "1"},  # DUMP_ON_TIMEOUT needs the monitor
        {"name": "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "value": f"{job_dir}/{FLIGHT_RECORDER_DIR}/rank-"},
    ]


def compile_cache_env(preset: str, image: str) -> list[dict]:
    """torch.compile's caches on FSx instead of the container's /tmp, which a new pod starts
    without: a restarted pod (preemption, a failed node, an elastic rescale) then loads the FX
    graphs and Triton kernels of its predecessors instead of compiling again (76 s cold for a tiny
    model here, minutes for an 8B one), and every rank of a job after the first compiles nothing.
    One folder per preset and image: a new trainer image (a new torch, Triton or CUDA, new model
    code) starts a cache of its own rather than sorting through an old one's entries, and removing
    an image's folder removes exactly its kernels. Both caches write each entry to a temporary file
    and rename it, so ranks and pods share them safely."""
    root = f"{CLUSTER_COMPILE_CACHE_ROOT}/{preset}/{short_digest(image, 12)}"
    return [
        # Inductor's FX-graph and AOTAutograd caches and its generated code (torch 2.13
        # torch/_inductor/runtime/cache_dir_utils.py cache_dir).
        {"name": "TORCHINDUCTOR_CACHE_DIR", "value": f"{root}/inductor"},
        # Triton's compiled kernels; without it Inductor puts them under its own folder per device
        # index (triton_cache_dir), one copy per GPU of a node for the same kernel.
        {"name": "TRITON_CACHE_DIR", "value": f"{root}/triton"},
    ]


def render_pytorchjob(config: Environment, preset_name: str, *, image: str, job_name: str | None = None,
                      overrides: dict | None = None) -> dict:
    """The PyTorchJob manifest for `preset_name` in `config`, as a dict ready for the API server.

    Raises ConfigError (one line) for an unknown preset, a node group the environment lacks, or a
    bad override. `overrides` may set: nodegroup, nodes_min, nodes_max, nproc_per_node,
    rendezvous ("etcd" | "c10d"), max_restarts, env (dict of plain, non-secret variables).
    """
    preset = get_preset(preset_name)
    return pytorchjob_manifest(config, job_spec(config, preset, image=image, job_name=job_name,
                                                overrides=overrides))


def render_run(config: Environment, preset_name: str, *, image: str, overrides: dict | None = None,
               job_name: str | None = None, checkpoint_root: str = CLUSTER_CHECKPOINT_ROOT) -> dict:
    """A run of `preset_name`: its PyTorchJob labelled with a digest of the job as rendered under
    the preset's own name (command, topology, resources, environment and image), and named
    PRESET-<digest> unless `job_name` says otherwise. The same spec always gets the same name, so
    creating it twice is a conflict, not a second run; new code (a new image) is a new name."""
    preset = get_preset(preset_name)

    def render(name: str) -> dict:
        return pytorchjob_manifest(config, job_spec(config, preset, image=image, job_name=name, overrides=overrides,
                                                    checkpoint_root=checkpoint_root))

    digest = short_digest(render(preset.name), SPEC_DIGEST_LENGTH)
    manifest = render(job_name if job_name is not None else run_name(preset.name, digest))
    manifest["metadata"]["labels"][SPEC_DIGEST_LABEL] = digest
    return manifest


def run_name(preset: str, digest: str) -> str:
    stem = preset[:MAX_JOB_NAME - len(digest) - 1].rstrip("-")
    return f"{stem}-{digest}"


def presets_for(config: Environment) -> list[JobPreset]:
    """Cluster presets whose node group exists in `config` and can hold their nodes: the ones the
    chart renders for this env (a 70B preset on 4 p5 nodes has no place in dev's 2-node p5 group)."""
    from config.presets import PRESETS
    max_size = {g.name: g.max_size for g in config.training_nodegroups}
    return [p for p in PRESETS.values() if p.cluster and p.nodes_min <= max_size.get(p.nodegroup, 0)]


__all__ = ["JobSpec", "job_spec", "pytorchjob_manifest", "presets_for", "render_pytorchjob", "render_run"]
