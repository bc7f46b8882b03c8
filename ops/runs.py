"""Runs: the PyTorchJobs of a preset, as `ops start`, `ops stop` and `ops submit` handle them.

A deploy creates no run. A run is the PyTorchJob k8s/pods/pytorchjob.py `render_run` makes: named
PRESET-<digest of its spec, image included> and labelled with its preset and that digest, so the
same code and settings always name the same run and new code names a new one. A run is never
changed after it is created, only suspended or resumed (`runPolicy.suspend`): it keeps its image
while newer code deploys. Every run of a preset writes the preset's one checkpoint folder, so
`ops` never lets two of them be active at once (H1's trainer-side lease guards the same folder):

- start: the run of this spec exists: resume it when suspended, else say what it is doing. It does
  not exist: create it, unless another run of the preset is active (neither suspended nor
  finished), which is one line naming that run and the choice: keep it, or stop it and start
  again, and the new run resumes from the shared checkpoint folder.
- submit: create exactly this run (`--name` may rename it); an existing name is a conflict.
- stop: suspend a run by name, or every active run of a preset: its pods stop, the run stays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from config.presets import CLUSTER_CHECKPOINT_ROOT, get_preset
from ops import kube
from ops.errors import OpsError

FINISHED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Run:
    name: str
    preset: str | None
    digest: str | None
    phase: str
    suspended: bool
    image: str

    @property
    def active(self) -> bool:
        """Its pods run or wait for nodes: neither suspended nor finished."""
        return not self.suspended and self.phase not in FINISHED

    def describe(self) -> str:
        state = "Suspended" if self.suspended and self.phase not in FINISHED else self.phase
        return f"{self.name} ({state}, image {self.image or 'unknown'})"


def run_of(job: Any) -> Run:
    """A Run from the SDK's PyTorchJob model."""
    from k8s.pods.pytorchjob import PRESET_LABEL, SPEC_DIGEST_LABEL

    labels = (job.metadata.labels if job.metadata else None) or {}
    run_policy = job.spec.run_policy if job.spec else None
    phase, _ = kube.phase_of(job)
    image = ""
    replicas = (job.spec.pytorch_replica_specs if job.spec else None) or {}
    for replica in replicas.values():
        containers = replica.template.spec.containers if replica.template and replica.template.spec else []
        image = image or (containers[0].image if containers else "")
    return Run(job.metadata.name, labels.get(PRESET_LABEL), labels.get(SPEC_DIGEST_LABEL), phase,
               bool(run_policy and run_policy.suspend), image)


def runs_of(client: Any, preset: str, namespace: str) -> list[Run]:
    """Every run of `preset` in `namespace`, oldest first (validation's smoke run is none: it
    checkpoints to a folder of its own)."""
    from config.kubernetes import VALIDATION_LABEL

    jobs = kube._call(lambda: client.list_jobs(namespace=namespace))
    jobs = sorted(jobs, key=lambda j: str(j.metadata.creation_timestamp or ""))
    jobs = [j for j in jobs if not ((j.metadata.labels or {}).get(VALIDATION_LABEL))]
    return [run for run in map(run_of, jobs) if run.preset == preset]


def _get(client: Any, name: str, namespace: str) -> Run | None:
    jobs = kube._call(lambda: client.list_jobs(namespace=namespace))
    return next((run_of(j) for j in jobs if j.metadata.name == name), None)


def _image(manifest: dict) -> str:
    return manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"]


def start(client: Any, manifest: dict, *, resume: bool = True) -> list[str]:
    """Create the run `manifest` describes, or (resume) resume or report the one of its spec.
    Returns what happened, one line each; refusals are OpsError (one line)."""
    from k8s.pods.pytorchjob import PRESET_LABEL

    name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
    preset = manifest["metadata"]["labels"][PRESET_LABEL]
    runs = runs_of(client, preset, namespace)
    same = next((r for r in runs if r.name == name), None)
    if same is not None and resume:
        return [_resume(client, same, namespace, preset)]
    folder = get_preset(preset).job_dir(CLUSTER_CHECKPOINT_ROOT)
    for other in runs:
        if other.active and other.name != name:
            raise OpsError(f"preset {preset} already runs as PyTorchJob {namespace}/{other.describe()}; this code "
                           f"and these settings are run {name} (image {_image(manifest)}). Keep it, or "
                           f"`python -m ops stop {other.name}` and start again: the new run resumes from {folder}")
    created = kube.submit(client, manifest)
    lines = [f"created PyTorchJob {created} (image {_image(manifest)}); it checkpoints to {folder}"]
    older = [r for r in runs if r.name != name]
    if older:
        lines.append(f"older runs of {preset}, left as they are: {', '.join(r.describe() for r in older)}; "
                     "`python -m ops delete NAME` removes one")
    return lines


def _resume(client: Any, run: Run, namespace: str, preset: str) -> str:
    if run.phase == "Succeeded":
        return (f"PyTorchJob {namespace}/{run.name} has finished (Succeeded): nothing to start. To run it again, "
                f"`python -m ops delete {run.name}`, then start: it resumes from {get_preset(preset).job_dir()}")
    if run.phase == "Failed":
        raise OpsError(f"PyTorchJob {namespace}/{run.name} failed (`python -m ops logs {run.name}` says why); "
                       f"`python -m ops delete {run.name}` and start again to resume from {get_preset(preset).job_dir()}")
    return kube.set_suspended(client, run.name, suspend=False, namespace=namespace)


def stop(client: Any, target: str, namespace: str) -> list[str]:
    """Suspend the run named `target`, or every active run of the preset `target`."""
    from config.presets import PRESETS

    run = _get(client, target, namespace)
    if run is not None:
        return [kube.set_suspended(client, run.name, suspend=True, namespace=namespace)]
    if target not in PRESETS:
        raise OpsError(f"no PyTorchJob {namespace}/{target}, and no preset of that name; "
                       "`python -m ops status` lists the runs")
    active = [r for r in runs_of(client, target, namespace) if r.active]
    if not active:
        raise OpsError(f"no active run of preset {target} in {namespace}; `python -m ops status` lists the runs")
    return [kube.set_suspended(client, r.name, suspend=True, namespace=namespace) for r in active]


def run_manifest(env: Any, preset: str, *, name: str | None, image: str | None, overrides: dict | None) -> dict:
    """The run `start` or `submit` would create: the preset's, for the image the environment's
    Registry stack published (or `image`), with the --set overrides. Under trainingApi v2 a run is
    a TrainingRuntime and its TrainJob (k8s/pods/trainjob.py), which these verbs do not create yet:
    refused in one line, before any AWS or cluster call, rather than a PyTorchJob the cluster has no
    CRD for."""
    if env.training_api != "v1":
        raise OpsError(f"environments.{env.name}.trainingApi is {env.training_api}: its runs are TrainJobs, which "
                       "ops start and submit cannot create yet (issue 23); use trainingApi v1 for runs from ops")
    if not image:
        from ops import images

        kube.render(env, preset, image="-", job_name=name, overrides=overrides)  # a bad --set before any AWS call
        image = images.published_image(env, get_preset(preset).image_variant)
    return kube.render(env, preset, image=image, job_name=name, overrides=overrides)


def dry_run_text(run: dict) -> str:
    """What `--dry-run` prints, in the order kube.submit creates it: no pod of the run starts before
    its peers may reach it."""
    import yaml

    from k8s.pods.network_policy import job_peers_policy

    return yaml.safe_dump_all([job_peers_policy(run), run], sort_keys=False)
