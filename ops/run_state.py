"""A run as `ops` sees it, whichever API holds it: ops/runs.py makes one from a PyTorchJob
(trainingApi v1), ops/trainjobs.py from a TrainJob (v2), and the commands reason about both
alike."""

from __future__ import annotations

from dataclasses import dataclass

FINISHED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Run:
    name: str
    preset: str | None
    digest: str | None
    phase: str
    suspended: bool
    image: str
    validation: bool = False  # validation's smoke run: it checkpoints to a folder of its own

    @property
    def active(self) -> bool:
        """Its pods run or wait for nodes: neither suspended nor finished."""
        return not self.suspended and self.phase not in FINISHED

    @classmethod
    def labelled(cls, name: str, labels: dict, phase: str, suspended: bool, image: str) -> Run:
        """A run from its object's name, labels (k8s/pods/pytorchjob.py's, which TrainJobs carry too),
        phase, suspension and image."""
        from config.kubernetes import VALIDATION_LABEL
        from k8s.pods.pytorchjob import PRESET_LABEL, SPEC_DIGEST_LABEL

        return cls(name, labels.get(PRESET_LABEL), labels.get(SPEC_DIGEST_LABEL), phase, suspended, image,
                   validation=bool(labels.get(VALIDATION_LABEL)))

    def describe(self) -> str:
        state = "Suspended" if self.suspended and self.phase not in (*FINISHED, "Stopped") else self.phase
        return f"{self.name} ({state}, image {self.image or 'unknown'})"
