"""trainer.ddp's job configuration: the CPU DDP smoke job, resumable from a snapshot file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from config.options import option, positive_float, positive_int, section
from config.workloads.common import DistConfig
from config.workloads.workload import Workload


@dataclass(frozen=True)
class DdpJobConfig:
    """The CPU DDP smoke job, done right: a task the model can learn, and snapshots that resume."""
    module: ClassVar[str] = "trainer.ddp"
    epochs: int = option(20, "total epochs, counting resumed ones", parse=positive_int)
    save_every: int = option(2, "snapshot every N epochs", parse=positive_int)
    batch_size: int = option(64, "samples per rank per step", parse=positive_int)
    snapshot_path: str = option("snapshot.pt", "snapshot file, read on start")
    lr: float = option(0.05, "SGD learning rate", parse=positive_float)
    samples: int = option(4096, "dataset size", parse=positive_int)
    dist: DistConfig = section(DistConfig())

    @staticmethod
    def job_outputs(job_dir: str) -> dict[str, str]:
        return {"snapshot_path": f"{job_dir}/snapshot.pt"}


class DdpWorkload(Workload):
    """A preset's arguments of `python -m trainer.ddp`."""
    config = DdpJobConfig
