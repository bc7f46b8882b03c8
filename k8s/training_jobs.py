"""The preset PyTorchJobs of an environment: one per preset whose node group exists there.

The manifests come from k8s/jobs.py, the code path `ops submit` uses; this chart only decides
which presets an environment gets, which trainer image each runs, and which start on deploy
(the smoke job); the rest are deployed suspended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from constructs import Construct

from config.environment import Environment
from config.kubernetes import TRAINING_NAMESPACE
from k8s.base import ProjectChart, raw_object
from k8s.jobs import job_spec, presets_for, pytorchjob_manifest


@dataclass(frozen=True)
class TrainingJobsProps:
    config: Environment
    # Trainer image per JobPreset.image_variant ("cpu", "gpu"): a token-bearing asset URI in the
    # CDK sink, a placeholder in dist/.
    images: Mapping[str, str]
    presets: tuple[str, ...] | None = None  # None: every preset whose node group exists
    overrides: Mapping[str, dict] = field(default_factory=dict)  # per preset name


class TrainingJobsChart(ProjectChart):
    component = "training-jobs"
    addon = "training-jobs"
    one_manifest_per_object = True
    depends_on = ("training-operator-crds", "training-operator", "etcd", "fsx-storage")

    @classmethod
    def for_environment(cls, scope, config, values) -> "TrainingJobsChart":
        return cls(scope, cls.addon, props=TrainingJobsProps(config=config, images=dict(values.trainer_images)))

    def __init__(self, scope: Construct, id: str, *, props: TrainingJobsProps):
        super().__init__(scope, id, namespace=TRAINING_NAMESPACE)
        available = {p.name: p for p in presets_for(props.config)}
        chosen = props.presets if props.presets is not None else tuple(available)
        self.manifests: dict[str, dict] = {}
        for name in chosen:
            if name not in available:
                raise ValueError(f"preset {name} cannot run in {props.config.name}: its node group is missing")
            preset = available[name]
            if preset.image_variant not in props.images:
                raise ValueError(f"no trainer image for variant {preset.image_variant!r} (preset {name})")
            spec = job_spec(props.config, preset, image=props.images[preset.image_variant],
                            overrides=dict(props.overrides.get(name, {})))
            manifest = pytorchjob_manifest(props.config, spec)
            if not preset.start_on_deploy:
                # Deployed ready to run, not running: `kubectl patch pytorchjob NAME --type merge
                # -p '{"spec":{"runPolicy":{"suspend":false}}}'` or `python -m ops start PRESET` starts it.
                manifest["spec"]["runPolicy"]["suspend"] = True
            self.manifests[name] = manifest
            raw_object(self, name, self.manifests[name])
