"""Job presets: what a PyTorchJob runs, defined once, with typed workload arguments.

The PyTorchJob chart renders a preset for the cluster and `make local` renders the same preset
for this machine, so the workload command on a laptop is the one on the cluster. Only the launcher
topology (nodes, processes, rendezvous endpoint) and the checkpoint root differ between the two.
A preset's workload gives values for some of its trainer's options, by the names the trainer's
own job configuration declares (config/workloads/), checked when the preset is made; its
arguments are rendered from those declarations, so a renamed flag cannot leave a preset behind.
"""

from __future__ import annotations

from dataclasses import dataclass

from config.errors import ConfigError
from config.instance_types import INSTANCE_TYPES
from config.memory import cheapest_checkpointing, usable_device_bytes
from config.models import model_config
from config.kubernetes import NODE_CPU_SHARE
from config.workloads.ddp import DdpWorkload
from config.workloads.llm import LlmWorkload
from config.workloads.vision import VisionWorkload

# Where checkpoints live: the FSx claim on the cluster, a local folder on a laptop.
CLUSTER_CHECKPOINT_ROOT = "/fsx/checkpoints"
# Where Hugging Face model directories live on FSx (the model-download Job writes them there).
CLUSTER_MODELS_ROOT = "/fsx/models"
CLUSTER_DATA_ROOT = "/fsx/data"
# torch.compile's caches (Inductor's FX graphs and kernels, Triton's binaries) on FSx, kept per
# preset and image (k8s/pods/pytorchjob.py compile_cache_env), so a restarted or rescheduled pod loads its
# kernels instead of compiling them again.
CLUSTER_COMPILE_CACHE_ROOT = "/fsx/compile-cache"
RENDEZVOUS_BACKENDS = ("etcd", "c10d")
# The instance type a GPU preset is sized for, by the node group name it targets (its description
# names the same type). `ops plan` checks a preset against the environment's actual group.
SIZED_FOR = {"p4d": "p4d.24xlarge", "p5": "p5.48xlarge"}


@dataclass(frozen=True)
class LocalSteps:
    """`make local` only: module commands run before and after the job on this machine (a tiny
    Hugging Face directory made on the spot, the export checked with transformers). Arguments
    may hold "{job_dir}"."""
    before: tuple[tuple[str, ...], ...] = ()
    after: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True)
class JobPreset:
    name: str
    description: str
    workload: LlmWorkload | DdpWorkload | VisionWorkload
    nodegroup: str  # node group name the job targets by default
    image_variant: str  # "cpu" or "gpu": which trainer Dockerfile builds its image
    nodes_min: int
    nodes_max: int
    nproc_per_node: int | None  # None: one process per GPU of the node group's instance type
    rendezvous: str = "etcd"  # "etcd" (torch's etcd-v2 backend on our etcd Service) or "c10d"
    max_restarts: int = 3
    local_nproc: int = 2  # workers `make local` starts on one machine
    local: LocalSteps = LocalSteps()
    # False: only `make local` runs it (its inputs exist only where its local steps made them).
    cluster: bool = True

    @property
    def module(self) -> str:
        """The trainer module torchrun runs."""
        return self.workload.module

    @property
    def torch_rdzv_backend(self) -> str:
        """The name torchrun and the operator's elasticPolicy use for our rendezvous choice."""
        return "etcd-v2" if self.rendezvous == "etcd" else "c10d"

    def job_dir(self, checkpoint_root: str = CLUSTER_CHECKPOINT_ROOT) -> str:
        return f"{checkpoint_root.rstrip('/')}/{self.name}"

    def workload_args(self, checkpoint_root: str = CLUSTER_CHECKPOINT_ROOT) -> list[str]:
        root = checkpoint_root.rstrip("/")
        return [a.replace("{checkpoint_root}", root) for a in self.workload.argv(self.job_dir(root))]

    def command(self, checkpoint_root: str = CLUSTER_CHECKPOINT_ROOT) -> list[str]:
        """The container command: torchrun (run by trainer.launch, which exits with the workers'
        status rather than torchrun's 1) reads nodes, processes and rendezvous from the PET_*
        variables the Training Operator sets, so only the workload is spelled out here."""
        return ["python", "-m", "trainer.launch", "--module", self.module, *self.workload_args(checkpoint_root)]


def fitting_checkpointing(model: str, nodegroup: str, nodes: int, *, batch_size: int, seq_len: int,
                          loss_chunk_tokens: int | None = None) -> str:
    """The cheapest activation checkpointing (none, then selective, then full) that the memory
    estimate says fits `nodes` nodes of the type SIZED_FOR `nodegroup`, one rank per GPU."""
    it = INSTANCE_TYPES[SIZED_FOR[nodegroup]]
    mode = cheapest_checkpointing(model_config(model), usable_bytes=usable_device_bytes(it, it.gpus),
                                  shards=nodes * it.gpus, batch_size=batch_size, seq_len=seq_len,
                                  mixed_precision=True, loss_chunk_tokens=loss_chunk_tokens or 0)
    if mode is None:
        raise ValueError(f"{model} at batch {batch_size} x {seq_len} does not fit {nodes} {it.name} even with full "
                         "activation checkpointing (config/memory.py)")
    return mode


def _llm(name: str, model: str, description: str, nodegroup: str, nodes: int, *, seq_len: int, global_batch_size: int,
         batch_size: int = 1, steps: int = 1000, checkpoint_every: int = 200, **extra) -> JobPreset:
    """A GPU pre-training preset: FSDP2 in bf16 with the cheapest activation checkpointing that
    fits, on tokens under /fsx/data/tokens, deployed suspended."""
    checkpointing = fitting_checkpointing(model, nodegroup, nodes, batch_size=batch_size, seq_len=seq_len,
                                          loss_chunk_tokens=extra.get("loss_chunk_tokens"))
    workload = LlmWorkload(model=model, steps=steps, batch_size=batch_size, global_batch_size=global_batch_size,
                           seq_len=seq_len,
                           data=f"{CLUSTER_DATA_ROOT}/tokens", checkpoint_every=checkpoint_every, log_every=10,
                           activation_checkpointing=checkpointing, **extra)
    return JobPreset(name=name, description=description, workload=workload, nodegroup=nodegroup, image_variant="gpu",
                     nodes_min=nodes, nodes_max=nodes, nproc_per_node=None)


def loader_workers(nodegroup: str) -> int:
    """Data-loader processes per GPU on the node group's instance type: the training pod's vCPUs
    over its GPUs, less what each rank's own process needs (InstanceType.loader_workers_per_gpu)."""
    return INSTANCE_TYPES[SIZED_FOR[nodegroup]].loader_workers_per_gpu(NODE_CPU_SHARE)


def _imagenet(name: str, model: str, description: str, *, batch_size: int, global_batch_size: int,
              image_size: int = 224, epochs: int = 90, **extra) -> JobPreset:
    """An ImageNet preset on p4d: DDP over 1 to 3 nodes (elastic, etcd rendezvous, as the reference
    ran it), data-loader processes per GPU from the node's vCPUs (uint8 out, normalised on the GPU),
    data under /fsx/data/imagenet, deployed suspended. The global batch divides by 8, 16 and 24
    ranks: the recipe does not change when a node is lost. The recipe: trainer/optim.py and
    tests/config/test_vision_recipes.py, against torchvision's classification references."""
    workload = VisionWorkload(model=model, epochs=epochs, batch_size=batch_size, global_batch_size=global_batch_size,
                              data=f"{CLUSTER_DATA_ROOT}/imagenet", image_size=image_size,
                              workers=loader_workers("p4d"), warmup_epochs=5, checkpoint_every=1000, log_every=50,
                              **extra)
    return JobPreset(name=name, description=description, workload=workload, nodegroup="p4d", image_variant="gpu",
                     nodes_min=1, nodes_max=3, nproc_per_node=None)


_TINY_HF = "{checkpoint_root}/llm-tiny-hf/hf-source"

PRESETS: dict[str, JobPreset] = {
    p.name: p
    for p in (
        JobPreset(
            name="cpu-ddp",
            description="CPU DDP smoke job: a learnable synthetic task with resumable snapshots",
            workload=DdpWorkload(epochs=20, save_every=2, batch_size=64),
            nodegroup="cpu", image_variant="cpu", nodes_min=2, nodes_max=2, nproc_per_node=2,
        ),
        JobPreset(
            name="llm-tiny",
            description="A tiny Llama-style decoder under FSDP2 on CPU: the LLM path end to end",
            workload=LlmWorkload(model="tiny", steps=40, batch_size=4, global_batch_size=16, seq_len=128,
                                 checkpoint_every=10, log_every=5),
            nodegroup="cpu", image_variant="cpu", nodes_min=2, nodes_max=2, nproc_per_node=2,
        ),
        JobPreset(
            name="llm-tiny-moe",
            description="A tiny Mixtral-style mixture of experts under FSDP2 on CPU",
            workload=LlmWorkload(model="tiny-moe", steps=40, batch_size=4, global_batch_size=16, seq_len=128,
                                 checkpoint_every=10, log_every=5),
            nodegroup="cpu", image_variant="cpu", nodes_min=2, nodes_max=2, nproc_per_node=2,
        ),
        JobPreset(
            name="llm-tiny-hf",
            description="Fine-tune a tiny Hugging Face Llama on CPU and export it back to Hugging Face format",
            workload=LlmWorkload(model="tiny", init_from_hf=_TINY_HF, steps=30, batch_size=4, global_batch_size=16,
                                 seq_len=64, lr=1e-3, checkpoint_every=10, log_every=5),
            nodegroup="cpu", image_variant="cpu", nodes_min=2, nodes_max=2, nproc_per_node=2,
            local=LocalSteps(
                before=(("trainer.hf", "tiny", "--out", "{job_dir}/hf-source"),),
                after=(("trainer.hf", "export", "--checkpoint", "{job_dir}", "--out", "{job_dir}/hf-export"),
                       ("trainer.hf", "verify", "{job_dir}/hf-export"))),
            cluster=False,
        ),
        # The chunked loss holds 2.5 GiB of logits instead of 19.6 at 2 x 8192 tokens of a 128k vocabulary,
        # which lets these two recompute less (selective for 8B, none for 1B; full before).
        _llm("llama3-8b-fsdp", "llama3.1-8b", "Llama 3.1 8B under FSDP2, bf16, on p5.48xlarge", "p5", 2,
             seq_len=8192, batch_size=2, global_batch_size=32, compile=True, loss_chunk_tokens=2048),
        _llm("llama31-70b-fsdp", "llama3.1-70b", "Llama 3.1 70B under FSDP2, bf16, on 4 p5.48xlarge", "p5", 4,
             seq_len=8192, global_batch_size=32, loss_chunk_tokens=2048),
        _llm("llama32-1b-fsdp", "llama3.2-1b", "Llama 3.2 1B under FSDP2, bf16, on one p4d.24xlarge", "p4d", 1,
             seq_len=8192, batch_size=2, global_batch_size=16, loss_chunk_tokens=2048),
        _llm("llama32-3b-fsdp", "llama3.2-3b", "Llama 3.2 3B under FSDP2, bf16, on one p4d.24xlarge", "p4d", 1,
             seq_len=8192, global_batch_size=8),
        _llm("llama2-7b-fsdp", "llama2-7b", "Llama 2 7B under FSDP2, bf16, on p4d.24xlarge", "p4d", 2, seq_len=4096,
             global_batch_size=16),
        _llm("llama2-13b-fsdp", "llama2-13b", "Llama 2 13B under FSDP2, bf16, on p4d.24xlarge", "p4d", 2,
             seq_len=4096, global_batch_size=16),
        _llm("llama2-70b-fsdp", "llama2-70b", "Llama 2 70B under FSDP2, bf16, on 4 p5.48xlarge", "p5", 4,
             seq_len=4096, global_batch_size=32),
        _llm("mixtral-8x7b-fsdp", "mixtral-8x7b", "Mixtral 8x7B (sparse MoE, top-2 of 8) under FSDP2 on p5.48xlarge",
             "p5", 2, seq_len=4096, global_batch_size=16),
        _llm("mathstral-7b-fsdp", "mathstral-7b", "Mathstral 7B (Mistral 7B v0.3 shape) under FSDP2 on p4d.24xlarge",
             "p4d", 2, seq_len=4096, global_batch_size=16),
        JobPreset(
            name="llama2-7b-finetune",
            description="Fine-tune Llama 2 7B from Hugging Face weights on FSx, on p4d.24xlarge",
            # --model as well: the trainer then checks the downloaded config.json against the table.
            workload=LlmWorkload(model="llama2-7b", init_from_hf=f"{CLUSTER_MODELS_ROOT}/Llama-2-7b-hf", steps=1000,
                                 batch_size=1, global_batch_size=16, seq_len=4096, data=f"{CLUSTER_DATA_ROOT}/tokens",
                                 lr=2e-5, warmup_steps=50, checkpoint_every=200, log_every=10,
                                 activation_checkpointing=fitting_checkpointing("llama2-7b", "p4d", 2, batch_size=1,
                                                                                seq_len=4096)),
            nodegroup="p4d", image_variant="gpu", nodes_min=2, nodes_max=2, nproc_per_node=None,
        ),
        JobPreset(
            name="vision-tiny",
            description="ResNet-18 on synthetic 32x32 images under elastic DDP on CPU: the vision path end to end",
            # 64 images a step on 2 to 4 ranks: 2 micro-batches of 16 on one node, 1 on two.
            workload=VisionWorkload(model="resnet18", epochs=3, batch_size=16, global_batch_size=64, data="synthetic",
                                    image_size=32, workers=1, lr=0.4, warmup_epochs=0.5, train_samples=1536,
                                    val_samples=256, checkpoint_every=12, log_every=8),
            nodegroup="cpu", image_variant="cpu", nodes_min=1, nodes_max=2, nproc_per_node=2,
            local=LocalSteps(after=(("trainer.plot", "{job_dir}/metrics.jsonl", "-o", "{job_dir}/curves.png"),)),
        ),
        _imagenet("resnet50-imagenet", "resnet50", "ResNet-50 on ImageNet from FSx, DDP on 1-3 p4d.24xlarge (elastic)",
                  batch_size=64, global_batch_size=3072),
        _imagenet("efficientnetb7-imagenet", "efficientnet_b7",
                  "EfficientNet-B7 on ImageNet from FSx, DDP on 1-3 p4d.24xlarge (elastic)", batch_size=8,
                  global_batch_size=384, image_size=600, sync_batchnorm=True),
    )
}


def get_preset(name: str, path: str = "preset") -> JobPreset:
    if name not in PRESETS:
        raise ConfigError(path, f"unknown preset {name!r}; presets are {', '.join(PRESETS)}")
    return PRESETS[name]
