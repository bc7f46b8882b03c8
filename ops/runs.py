"""Runs: the PyTorchJobs (or, under trainingApi v2, TrainJobs) of a preset, as `ops start`, `ops stop`
and `ops submit` handle them.

A deploy creates no run. A run is the PyTorchJob k8s/pods/pytorchjob.py `render_run` makes (under
v2 the TrainingRuntime and TrainJob k8s/pods/trainjob.py renders, ops/trainjobs.py): named
PRESET-<digest of its spec, image included> and labelled with its preset and that digest, so the
same code and settings always name the same run and new code names a new one. A run is never
changed after it is created, only suspended or resumed (`runPolicy.suspend`; a TrainJob's
`spec.suspend`, or under Kueue its Workload's `spec.active`): it keeps its image
while newer code deploys. Every run of a preset writes the preset's one checkpoint folder, so
`ops` never lets two of them be active at once (H1's trainer-side lease guards the same folder):

- start: while another run of the preset is active (neither suspended nor finished), one line
  naming that run and the choice: keep it, or stop it and start again, and this spec's run resumes
  from the shared checkpoint folder. Otherwise, the run of this spec exists: resume it when
  suspended, else say what it is doing; it does not exist: create it.
- submit: create exactly this run (`--name` may rename it); an existing name is a conflict.
- stop: suspend a run by name, or every active run of a preset: its pods stop, the run stays.
"""

from __future__ import annotations

from typing import Any, Union

from config.presets import CLUSTER_CHECKPOINT_ROOT, get_preset
from ops import kube
from ops.errors import OpsError
from ops.run_state import FINISHED, Run


def run_of(job: Any) -> Run:
    """A Run from the SDK's PyTorchJob model."""
    labels = (job.metadata.labels if job.metadata else None) or {}
    run_policy = job.spec.run_policy if job.spec else None
    phase, _ = kube.phase_of(job)
    image = ""
    replicas = (job.spec.pytorch_replica_specs if job.spec else None) or {}
    for replica in replicas.values():
        containers = replica.template.spec.containers if replica.template and replica.template.spec else []
        image = image or (containers[0].image if containers else "")
    return Run.labelled(job.metadata.name, labels, phase, bool(run_policy and run_policy.suspend), image)


class PyTorchJobs:
    """The runs of a trainingApi v1 environment, through the Kubeflow SDK (ops/kube.py). The v2
    counterpart, with the same methods, is ops/trainjobs.py TrainJobs."""

    kind = "PyTorchJob"
    flags = ""  # what the hints' ops commands need beside the run's name

    def __init__(self, client: Any):
        self.client = client

    def runs(self, namespace: str) -> list[Run]:
        """Every PyTorchJob of `namespace`, oldest first."""
        jobs = kube._call(lambda: self.client.list_jobs(namespace=namespace), {404: kube.NO_PYTORCHJOBS})
        return [run_of(j) for j in sorted(jobs, key=lambda j: str(j.metadata.creation_timestamp or ""))]

    def create(self, manifest: dict) -> str:
        return kube.submit(self.client, manifest)

    def set_suspended(self, name: str, suspend: bool, namespace: str) -> str:
        return kube.set_suspended(self.client, name, suspend=suspend, namespace=namespace)

    def pods(self, namespace: str, label_selector: str) -> list:
        return kube.api_call(lambda: self.client.core_api.list_namespaced_pod(
            namespace, label_selector=label_selector)).items

    def status(self, namespace: str, name: str | None = None) -> tuple[list, str | None]:
        """`ops status`'s rows, and no problem line: a PyTorchJob has no queue position to miss."""
        return kube.status(self.client, name, namespace), None


Runs = Any  # PyTorchJobs or ops.trainjobs.TrainJobs
Manifest = Union[dict, Any]  # a PyTorchJob, or an ops.trainjobs.TrainJobRun


def runs_api(client: Any, manifest: Manifest | None = None) -> Runs:
    """The runs API for `client`: itself when it is one; TrainJobs for a v2 run's manifest; else
    the PyTorchJobs of a TrainingClient."""
    from ops.trainjobs import TrainJobRun, TrainJobs

    if isinstance(client, (PyTorchJobs, TrainJobs)):
        return client
    if isinstance(manifest, TrainJobRun):
        return TrainJobs(client.custom_api.api_client if hasattr(client, "custom_api") else client,
                         kueue=manifest.kueue)
    return PyTorchJobs(client)


def runs_of(client: Any, preset: str, namespace: str) -> list[Run]:
    """Every run of `preset` in `namespace`, oldest first (validation's smoke run is none: it
    checkpoints to a folder of its own)."""
    return [r for r in runs_api(client).runs(namespace) if r.preset == preset and not r.validation]


def _identity(manifest: Manifest) -> tuple[str, str, str, str]:
    """(name, namespace, preset, image) of a rendered run."""
    from k8s.pods.pytorchjob import PRESET_LABEL

    if isinstance(manifest, dict):
        metadata = manifest["metadata"]
        return metadata["name"], metadata["namespace"], metadata["labels"][PRESET_LABEL], _image(manifest)
    return manifest.name, manifest.namespace, manifest.trainjob["metadata"]["labels"][PRESET_LABEL], manifest.image


def _image(manifest: dict) -> str:
    return manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"]


def start(client: Any, manifest: Manifest, *, resume: bool = True) -> list[str]:
    """Create the run `manifest` describes, or (resume) resume or report the one of its spec.
    Returns what happened, one line each; refusals are OpsError (one line)."""
    api = runs_api(client, manifest)
    name, namespace, preset, image = _identity(manifest)
    runs = [r for r in api.runs(namespace) if r.preset == preset and not r.validation]
    same = next((r for r in runs if r.name == name), None)
    folder = get_preset(preset).job_dir(CLUSTER_CHECKPOINT_ROOT)
    # Before a resume as before a create: this spec's suspended run, resumed beside another active
    # one (a rollback to older code), would write the one checkpoint folder with it.
    for other in runs:
        if other.active and other.name != name:
            raise OpsError(f"preset {preset} already runs as {api.kind} {namespace}/{other.describe()}; this code "
                           f"and these settings are run {name} (image {image}). Keep it, or "
                           f"`python -m ops stop {other.name}{api.flags}` and start again: the new run resumes "
                           f"from {folder}")
    if same is not None and resume:
        return [_resume(api, same, namespace, preset)]
    _refuse_while_pods_of_another_run_stop(api, name, namespace, preset)
    created = api.create(manifest)
    lines = [f"created {api.kind} {created} (image {image}); it checkpoints to {folder}"]
    older = [r for r in runs if r.name != name]
    if older:
        lines.append(f"older runs of {preset}, left as they are: {', '.join(r.describe() for r in older)}; "
                     f"`python -m ops delete NAME{api.flags}` removes one")
    return lines


def _refuse_while_pods_of_another_run_stop(api: Runs, name: str, namespace: str, preset: str) -> None:
    """A run just stopped (or deleted) is not gone until its pods are: each saves a checkpoint on
    SIGTERM, which can take minutes for a large model, and its rank 0 renews the checkpoint
    folder's lease until then, while the new run's rank 0 waits only WAIT_S (trainer/lease.py)
    for that lease before it gives up and spends a restart."""
    from k8s.pods.pytorchjob import JOB_LABEL, PRESET_LABEL
    from k8s.pods.validation import SMOKE_RUN

    folder = get_preset(preset).job_dir(CLUSTER_CHECKPOINT_ROOT)
    stopping = sorted(p.metadata.name for p in api.pods(namespace, f"{PRESET_LABEL}={preset}")
                      if (p.metadata.labels or {}).get(JOB_LABEL) not in (name, SMOKE_RUN)
                      and (p.status is None or p.status.phase not in FINISHED))
    if stopping:
        raise OpsError(f"the pods of a stopped run of preset {preset} are still stopping ({', '.join(stopping)}): "
                       f"they save a checkpoint into {folder} first, which can take minutes; start again once "
                       f"they are gone (`kubectl get pods -n {namespace} -l {PRESET_LABEL}={preset}`)")


def _resume(api: Runs, run: Run, namespace: str, preset: str) -> str:
    folder, delete = get_preset(preset).job_dir(), f"`python -m ops delete {run.name}{api.flags}`"
    if run.phase == "Succeeded":
        return (f"{api.kind} {namespace}/{run.name} has finished (Succeeded): nothing to start. To run it again, "
                f"{delete}, then start: it resumes from {folder}")
    if run.phase == "Failed":
        raise OpsError(f"{api.kind} {namespace}/{run.name} failed (`python -m ops logs {run.name}{api.flags}` says "
                       f"why); {delete} and start again to resume from {folder}")
    if run.suspended:
        _refuse_while_pods_of_another_run_stop(api, run.name, namespace, preset)
        return api.set_suspended(run.name, False, namespace)
    # Started already: what `ops status NAME` says of it, its pods' notes included. A user starts it
    # again to learn why nothing happens, and its condition says Running while its pods wait for a
    # node or its image, or crash in a loop; under Kueue, Queued, without Kueue's reason.
    [row], _ = api.status(namespace, run.name)
    if row.phase in ("Suspended", "Stopped"):  # stopped since it was listed
        return api.set_suspended(run.name, False, namespace)
    said = f": {row.message}" if row.message else ""
    return f"{api.kind} {namespace}/{run.name} is already started ({row.phase}){said}"


def stop(client: Any, target: str, namespace: str) -> list[str]:
    """Suspend the run named `target`, or every active run of the preset `target` (none: a line
    saying so, not an error)."""
    from config.presets import PRESETS

    api = runs_api(client)
    run = next((r for r in api.runs(namespace) if r.name == target), None)
    if run is not None:
        return [api.set_suspended(run.name, True, namespace)]
    if target not in PRESETS:
        raise OpsError(f"no {api.kind} {namespace}/{target}, and no preset of that name; "
                       f"`python -m ops status{api.flags}` lists the runs")
    active = [r for r in runs_of(api, target, namespace) if r.active]
    if not active:  # done already, as for a run by name that is already suspended: `stop X && start X` holds
        return [f"nothing of preset {target} is running in {namespace}: nothing to stop"]
    done, failed = [], []
    for r in active:  # every one that can be stopped is, and the line says which were
        try:
            done.append(api.set_suspended(r.name, True, namespace))
        except OpsError as err:
            failed.append(str(err))
    if failed:
        raise OpsError("; ".join([*done, *failed]))
    return done


def run_manifest(env: Any, preset: str, *, name: str | None, image: str | None, overrides: dict | None) -> Manifest:
    """The run `start` or `submit` would create: the preset's, for the image the environment's
    Registry stack published (or `image`), with the --set overrides. Under trainingApi v2 a
    TrainJobRun: the TrainingRuntime and TrainJob of k8s/pods/trainjob.py, the TrainJob queued in
    Kueue's LocalQueue when the environment queues with Kueue."""
    if not image:
        from ops import images

        _render(env, preset, image="-", name=name, overrides=overrides)  # a bad --set before any AWS call
        image = images.published_image(env, get_preset(preset).image_variant)
    return _render(env, preset, image=image, name=name, overrides=overrides)


def _render(env: Any, preset: str, *, image: str, name: str | None, overrides: dict | None) -> Manifest:
    if env.training_api == "v1":
        return kube.render(env, preset, image=image, job_name=name, overrides=overrides)
    from k8s.pods.trainjob import render_trainjob_run
    from ops.trainjobs import TrainJobRun

    kueue = env.queueing == "kueue"
    runtime, trainjob = render_trainjob_run(env, preset, image=image, job_name=name, overrides=overrides)
    return TrainJobRun(runtime, trainjob, kueue)


def dry_run_text(run: Manifest) -> str:
    """What `--dry-run` prints, in the order the run is created: no pod of the run starts before
    its peers may reach it (and, under v2, the TrainJob's runtime exists before it)."""
    import yaml

    from k8s.pods.network_policy import job_peers_policy

    objects = [job_peers_policy(run), run] if isinstance(run, dict) else run.objects()
    return yaml.safe_dump_all(objects, sort_keys=False)
