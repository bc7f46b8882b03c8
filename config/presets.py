"""Job presets: what a PyTorchJob runs, defined once.

The PyTorchJob chart renders a preset for the cluster and `make local` renders the same preset
for this machine, so the workload command on a laptop is the one on the cluster. Only the launcher
topology (nodes, processes, rendezvous endpoint) and the checkpoint root differ between the two.
"""

from __future__ import annotations

from dataclasses import dataclass

from config.errors import ConfigError

# Where checkpoints live: the FSx claim on the cluster, a local folder on a laptop.
CLUSTER_CHECKPOINT_ROOT = "/fsx/checkpoints"
RENDEZVOUS_BACKENDS = ("etcd", "c10d")


@dataclass(frozen=True)
class JobPreset:
    name: str
    description: str
    module: str  # the trainer module torchrun runs
    args: tuple[str, ...]  # workload arguments; "{checkpoint_root}" is filled in per sink
    nodegroup: str  # node group name the job targets by default
    image_variant: str  # "cpu" or "gpu": which trainer Dockerfile builds its image
    nodes_min: int
    nodes_max: int
    nproc_per_node: int | None  # None: one process per GPU of the node group's instance type
    rendezvous: str = "etcd"  # "etcd" (torch's etcd-v2 backend on our etcd Service) or "c10d"
    max_restarts: int = 3
    local_nproc: int = 2  # workers `make local` starts on one machine
    # Whether `cdk deploy` starts the job. Presets that do not are deployed suspended: a GPU preset
    # that ran on deploy would sit Pending and then seize the first GPU nodes that appear.
    start_on_deploy: bool = False

    @property
    def torch_rdzv_backend(self) -> str:
        """The name torchrun and the operator's elasticPolicy use for our rendezvous choice."""
        return "etcd-v2" if self.rendezvous == "etcd" else "c10d"

    def workload_args(self, checkpoint_root: str = CLUSTER_CHECKPOINT_ROOT) -> list[str]:
        return [a.replace("{checkpoint_root}", checkpoint_root.rstrip("/")) for a in self.args]

    def command(self, checkpoint_root: str = CLUSTER_CHECKPOINT_ROOT) -> list[str]:
        """The container command: torchrun reads nodes, processes and rendezvous from the PET_*
        variables the Training Operator sets, so only the workload is spelled out here."""
        return ["torchrun", "--module", self.module, *self.workload_args(checkpoint_root)]


PRESETS: dict[str, JobPreset] = {
    p.name: p
    for p in (
        JobPreset(
            name="cpu-ddp",
            description="CPU DDP smoke job: a learnable synthetic task with resumable snapshots",
            module="trainer.ddp",
            args=("--epochs", "20", "--save-every", "2", "--batch-size", "64",
                  "--snapshot-path", "{checkpoint_root}/cpu-ddp/snapshot.pt"),
            nodegroup="cpu", image_variant="cpu", nodes_min=2, nodes_max=2, nproc_per_node=2,
            start_on_deploy=True,
        ),
        JobPreset(
            name="llm-tiny",
            description="A tiny Llama-style decoder under FSDP2 on CPU: the LLM path end to end",
            module="trainer.llm",
            args=("--model", "tiny", "--steps", "40", "--batch-size", "4", "--seq-len", "128",
                  "--checkpoint-dir", "{checkpoint_root}/llm-tiny", "--checkpoint-every", "10",
                  "--log-every", "5", "--metrics-file", "{checkpoint_root}/llm-tiny/metrics.jsonl"),
            nodegroup="cpu", image_variant="cpu", nodes_min=2, nodes_max=2, nproc_per_node=2,
        ),
        JobPreset(
            name="llama3-8b-fsdp",
            description="Llama 3.1 8B under FSDP2, bf16, on p5.48xlarge",
            module="trainer.llm",
            args=("--model", "llama3.1-8b", "--steps", "1000", "--batch-size", "2", "--seq-len", "8192",
                  "--data", "/fsx/data/tokens", "--checkpoint-dir", "{checkpoint_root}/llama3-8b",
                  "--checkpoint-every", "200", "--log-every", "10", "--activation-checkpointing",
                  "--compile", "--metrics-file", "{checkpoint_root}/llama3-8b/metrics.jsonl"),
            nodegroup="p5", image_variant="gpu", nodes_min=2, nodes_max=2, nproc_per_node=None,
        ),
        JobPreset(
            name="llama2-7b-fsdp",
            description="Llama 2 7B under FSDP2, bf16, on p4d.24xlarge",
            module="trainer.llm",
            args=("--model", "llama2-7b", "--steps", "1000", "--batch-size", "1", "--seq-len", "4096",
                  "--data", "/fsx/data/tokens", "--checkpoint-dir", "{checkpoint_root}/llama2-7b",
                  "--checkpoint-every", "200", "--log-every", "10", "--activation-checkpointing",
                  "--metrics-file", "{checkpoint_root}/llama2-7b/metrics.jsonl"),
            nodegroup="p4d", image_variant="gpu", nodes_min=2, nodes_max=2, nproc_per_node=None,
        ),
    )
}


def get_preset(name: str, path: str = "preset") -> JobPreset:
    if name not in PRESETS:
        raise ConfigError(path, f"unknown preset {name!r}; presets are {', '.join(PRESETS)}")
    return PRESETS[name]
