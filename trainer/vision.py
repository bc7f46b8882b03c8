"""Image classification under DDP (ResNet, EfficientNet from torchvision), elastic and resumable.

    torchrun --nproc-per-node=2 -m trainer.vision --model resnet18 --data synthetic --epochs 3 \\
        --checkpoint-dir ckpt --metrics-file ckpt/metrics.jsonl

The recipe: SGD with momentum and weight decay (none on norms and biases), the rate scaled by the
global batch (lr per 256 images), linear warm-up then cosine decay, label smoothing; bf16 autocast
and channels_last on GPU. The schedule follows the images seen, not the step count, so it stays
the same when the group re-forms at another size. Top-1 and top-5 on the validation set each epoch.

A step trains on the global batch (--global-batch-size images over all ranks, trainer/batching.py):
each rank accumulates global / (ranks x --batch-size) micro-batches, and DDP reduces the gradients
once, after the last. Checkpoints (trainer/checkpoint.py) hold the model, the optimizer and the
global data position (epoch, images consumed in it): a run resumes on any number of ranks where it
stopped, with the same global batch, rate and schedule.
"""

from __future__ import annotations

import json
import pickle
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from trainer import dist as tdist
from config.paths import output_file
from trainer.batching import (GLOBAL_BATCH, add_global_batch_arguments, micro_batch_sync, resolve_global_batch,
                              world_size_from_env)
from trainer.checkpoint import (RUN_SETTINGS, CheckpointConfig, CheckpointManager, ModelAndOptimizer, list_steps,
                                open_directory)
from trainer.cli import (Parser, UsageError, checked_path, non_negative_int, positive_float, positive_int,
                         run_main)
from trainer.log import log
from trainer.optim import warmup_cosine_factor
from trainer.preemption import Preemption
from trainer.safe_load import weights_only_refusal
from trainer.torchvision_compat import import_torchvision
from trainer.vision_data import DataConfig, ElasticSampler, build_datasets, train_loader, val_loader
from trainer.vision_metrics import VisionMetrics

MODELS = ("resnet18", "resnet50", "efficientnet_b7")


@dataclass(frozen=True)
class ModelSpec:
    name: str = "resnet18"
    init_from: str | None = None  # a state_dict file; None: random weights. Nothing is downloaded.


@dataclass(frozen=True)
class OptimConfig:
    epochs: int = 90
    lr_per_256: float = 0.1  # the rate for a global batch of 256; scaled linearly with the batch
    momentum: float = 0.9
    weight_decay: float = 1e-4
    warmup_epochs: float = 1.0
    label_smoothing: float = 0.1


@dataclass(frozen=True)
class VisionConfig:
    model: ModelSpec
    data: DataConfig
    optim: OptimConfig
    checkpoint: CheckpointConfig
    log_every: int = 10
    metrics_file: str | None = None
    dist_timeout_s: float = 60.0
    startup_timeout_s: float = 1800.0


def parser() -> Parser:
    p = Parser(prog="python -m trainer.vision", description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=MODELS, default="resnet18")
    p.add_argument("--init-from", default=None, metavar="FILE", help="start from this state_dict file (no download)")
    p.add_argument("--data", default="synthetic", help="'synthetic' or a folder with train/ and val/ (ImageFolder)")
    p.add_argument("--image-size", type=positive_int, default=224, help="training crop, in pixels")
    p.add_argument("--batch-size", type=positive_int, default=32,
                   help="images per rank per forward and backward pass (the micro-batch)")
    add_global_batch_arguments(p, "images")
    p.add_argument("--workers", type=non_negative_int, default=4, help="data-loader processes per rank")
    p.add_argument("--classes", type=positive_int, default=10, help="synthetic data: number of classes")
    p.add_argument("--train-samples", type=positive_int, default=5000, help="synthetic data: training images")
    p.add_argument("--val-samples", type=positive_int, default=1000, help="synthetic data: validation images")
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="seed of the initial weights, the shuffle, the augmentations and the synthetic data")
    p.add_argument("--epochs", type=positive_int, default=90, help="total epochs, counting resumed ones")
    p.add_argument("--lr", type=positive_float, default=0.1, help="learning rate per 256 images of global batch")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--warmup-epochs", type=float, default=1.0)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--checkpoint-dir", default=None, help="where checkpoints are saved and resumed from")
    p.add_argument("--checkpoint-every", type=positive_int, default=500,
                   help="steps between checkpoints; every epoch's end saves too")
    p.add_argument("--keep-checkpoints", type=positive_int, default=2)
    p.add_argument("--allow-fresh-start", action="store_true",
                   help="when checkpoints exist and every one of them is damaged, train from epoch 0 instead of "
                        "stopping (they are kept)")
    p.add_argument("--log-every", type=positive_int, default=10, help="steps between metrics lines")
    p.add_argument("--metrics-file", default=None, help="append metrics as JSON lines here (rank 0)")
    tdist.add_timeout_arguments(p)
    return p


def parse_config(argv=None) -> VisionConfig:
    a = parser().parse_args(argv)
    for field, value in (("--momentum", a.momentum), ("--weight-decay", a.weight_decay),
                         ("--warmup-epochs", a.warmup_epochs)):
        if not value >= 0:
            raise UsageError(field, f"must be zero or more, got {value}")
    if not 0 <= a.label_smoothing < 1:
        raise UsageError("--label-smoothing", f"must be in [0, 1), got {a.label_smoothing}")
    if a.init_from and not Path(a.init_from).is_file():
        raise UsageError("--init-from", f"{a.init_from} is not a file")
    if a.metrics_file:  # rank 0 opens it after the model is built: a bad path is found now
        checked_path("--metrics-file", output_file, a.metrics_file)
    return VisionConfig(
        model=ModelSpec(a.model, a.init_from),
        data=DataConfig(a.data, a.image_size, a.batch_size, a.workers, a.classes, a.train_samples, a.val_samples,
                        a.seed, a.global_batch_size, a.allow_global_batch_change),
        optim=OptimConfig(a.epochs, a.lr, a.momentum, a.weight_decay, a.warmup_epochs, a.label_smoothing),
        # One save in flight at a time keeps memory bounded; the end-of-epoch save waits for it.
        checkpoint=CheckpointConfig(a.checkpoint_dir, a.checkpoint_every, a.keep_checkpoints,
                                    allow_fresh_start=a.allow_fresh_start),
        log_every=a.log_every, metrics_file=a.metrics_file, dist_timeout_s=a.dist_timeout,
        startup_timeout_s=a.startup_timeout)


# --- model --------------------------------------------------------------------------------------

def build_model(spec: ModelSpec, classes: int) -> torch.nn.Module:
    model = import_torchvision().models.get_model(spec.name, weights=None, num_classes=classes)
    if spec.init_from:
        try:
            state = torch.load(spec.init_from, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:  # code in a file on shared storage never runs
            raise UsageError("--init-from", f"{spec.init_from}: {weights_only_refusal(exc)}") from None
        except Exception as exc:  # not a torch.save file at all (text, another format, truncated)
            raise UsageError("--init-from", f"{spec.init_from} is not a torch.save file ({str(exc).strip()[:200]})") from None
        try:
            model.load_state_dict(state.get("model", state) if isinstance(state, dict) else state)
        except Exception as exc:  # a foreign file or another model's weights: one line
            raise UsageError("--init-from", f"{spec.init_from} is not a {spec.name} state_dict with {classes} "
                                            f"classes ({str(exc).strip().splitlines()[0][:200]})") from None
    return model


def build_optimizer(model: torch.nn.Module, cfg: OptimConfig) -> torch.optim.SGD:
    # Weight decay on norm scales and biases only shrinks them for nothing; the usual recipe skips them.
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    return torch.optim.SGD([{"params": decay, "weight_decay": cfg.weight_decay},
                            {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr_per_256, momentum=cfg.momentum)


def learning_rate(cfg: OptimConfig, global_batch: int, images_seen: int, epoch_images: int) -> float:
    """Peak = lr_per_256 · global_batch / 256; linear warm-up over warmup_epochs, then a cosine to
    zero at the last epoch. Driven by images seen, so it continues unchanged at another world size."""
    peak = cfg.lr_per_256 * global_batch / 256
    return peak * warmup_cosine_factor(images_seen, cfg.warmup_epochs * epoch_images, cfg.epochs * epoch_images,
                                       unit=global_batch)


# --- checkpointed progress ----------------------------------------------------------------------

class Progress:
    """The data position in global terms: the epoch, and the images of it already consumed by
    the whole job (not per rank), plus the images seen in all (the schedule's clock)."""

    def __init__(self):
        self.epoch, self.epoch_images_done, self.images_seen = 0, 0, 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "epoch_images_done": self.epoch_images_done, "images_seen": self.images_seen}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.epoch_images_done = int(state["epoch"]), int(state["epoch_images_done"])
        self.images_seen = int(state["images_seen"])


def check_checkpoint_dir(cfg: CheckpointConfig, record: dict) -> dict | None:
    """Before any process group: the directory opens (trainer.checkpoint.open_directory), and its
    checkpoints (if any) are of this model and class count, so a mistake is one line, not a run
    from epoch 0. Returns the record the checkpoints were written with (None: no checkpoints)."""
    opened = open_directory(cfg)
    if opened is None:
        return None
    path, existing = opened
    if not list_steps(path):
        return None
    model = {k: v for k, v in (existing or {}).items() if k not in RUN_SETTINGS}
    if model != record:
        raise UsageError("--checkpoint-dir", f"{path} holds checkpoints of {model}, not of {record}; "
                                             "use another directory")
    return existing


# --- training -----------------------------------------------------------------------------------

def evaluate(model, loader, rt: tdist.Runtime, autocast) -> dict:
    model.eval()
    totals = torch.zeros(4, dtype=torch.float64, device=rt.device)  # loss sum, top-1, top-5, count
    with torch.no_grad(), autocast():
        for images, labels in loader:
            images, labels = _to_device(images, labels, rt.device)
            logits = model(images).float()
            top5 = logits.topk(min(5, logits.shape[1]), dim=1).indices
            hits = top5 == labels[:, None]
            totals += torch.stack([F.cross_entropy(logits, labels, reduction="sum").double(),
                                   hits[:, 0].sum().double(), hits.any(dim=1).sum().double(),
                                   torch.tensor(float(len(labels)), dtype=torch.float64, device=rt.device)])
    if rt.world_size > 1:
        dist.all_reduce(totals)
    loss, top1, top5, count = totals.tolist()
    model.train()
    return {"val_loss": round(loss / max(count, 1), 5), "top1": round(top1 / max(count, 1), 5),
            "top5": round(top5 / max(count, 1), 5), "val_images": int(count)}


def _to_device(images, labels, device):
    if device.type != "cuda":
        return images, labels
    return (images.to(device, non_blocking=True, memory_format=torch.channels_last),
            labels.to(device, non_blocking=True))


def main(argv=None) -> int:
    cfg = parse_config(argv)
    train_set, val_set, classes = build_datasets(cfg.data)
    record = {"workload": "vision", "model": cfg.model.name, "classes": classes}
    existing = check_checkpoint_dir(cfg.checkpoint, record)
    # Before the process group: a global batch that does not divide is one line on every rank.
    global_batch = resolve_global_batch(cfg.data.global_batch_size, (existing or {}).get(GLOBAL_BATCH),
                                        allow_change=cfg.data.allow_global_batch_change,
                                        world_size=world_size_from_env(), micro_batch=cfg.data.batch_size,
                                        unit="images")
    rt = tdist.init(tdist.DistConfig(cfg.dist_timeout_s, cfg.startup_timeout_s),
                    checkpoint_group=bool(cfg.checkpoint.directory))
    try:
        return train(cfg, rt, train_set, val_set, classes, {**record, GLOBAL_BATCH: global_batch})
    finally:
        tdist.shutdown()


def train(cfg: VisionConfig, rt: tdist.Runtime, train_set, val_set, classes: int, record: dict) -> int:
    on_gpu = rt.device.type == "cuda"
    torch.manual_seed(cfg.data.seed)  # identical initial weights on every rank
    model = build_model(cfg.model, classes).to(rt.device)
    if on_gpu:
        model = model.to(memory_format=torch.channels_last)
    optimizer = build_optimizer(model, cfg.optim)
    progress = Progress()
    ckpt = CheckpointManager(cfg.checkpoint, rt, {"app": ModelAndOptimizer(model, optimizer), "train": progress},
                             model_record=record)
    step = ckpt.resume()
    first_step = step + 1
    start = (progress.epoch, progress.epoch_images_done)
    ddp = DistributedDataParallel(model, device_ids=[rt.device.index] if on_gpu else None)
    global_batch = record[GLOBAL_BATCH]
    accumulation = global_batch // (rt.world_size * cfg.data.batch_size)
    sampler = ElasticSampler(train_set, num_replicas=rt.world_size, rank=rt.rank, global_batch=global_batch,
                             seed=cfg.data.seed)
    loader = train_loader(train_set, sampler, cfg.data, rank=rt.rank, pin=on_gpu)
    evaluation = val_loader(val_set, rt.rank, rt.world_size, cfg.data, pin=on_gpu)
    epoch_images = len(train_set)
    if rt.is_main:
        log(f"Model {cfg.model.name}: {sum(p.numel() for p in model.parameters()) / 1e6:,.1f}M parameters, "
            f"{classes} classes, world size {rt.world_size}, global batch {global_batch}; "
            f"starting at epoch {start[0]}, image {start[1]} of {epoch_images} (step {step}); "
            f"{accumulation} micro-batch(es) of {cfg.data.batch_size} per rank per step")
    preemption = Preemption(rt)
    metrics = VisionMetrics(rt, cfg.metrics_file, cfg.log_every, global_batch // rt.world_size)

    def autocast():
        return torch.autocast("cuda", dtype=torch.bfloat16, enabled=on_gpu)

    stopped = False
    last = None
    for epoch in range(progress.epoch, cfg.optim.epochs):
        sampler.set_position(epoch, progress.epoch_images_done if epoch == progress.epoch else 0)
        progress.epoch, progress.epoch_images_done = epoch, sampler.start
        steps_left = sampler.steps()
        metrics.epoch_start(epoch)
        micro_batches = iter(loader)
        for i in range(steps_left):
            lr = learning_rate(cfg.optim, global_batch, progress.images_seen, epoch_images)
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.zero_grad(set_to_none=True)
            loss = torch.zeros((), device=rt.device)
            for k in range(accumulation):
                fetch_start = time.perf_counter()
                images, labels = next(micro_batches)
                metrics.data_wait(time.perf_counter() - fetch_start)
                images, labels = _to_device(images, labels, rt.device)
                # Micro-batches are equal, so the mean over the global batch is the mean of their
                # means; DDP averages over ranks.
                with micro_batch_sync(ddp, last=k == accumulation - 1):
                    with autocast():
                        micro_loss = F.cross_entropy(ddp(images), labels,
                                                     label_smoothing=cfg.optim.label_smoothing) / accumulation
                    micro_loss.backward()
                loss += micro_loss.detach()
            ckpt.wait_staging()  # an asynchronous save's copy of the weights must finish first
            optimizer.step()
            step += 1
            progress.epoch_images_done += global_batch
            progress.images_seen += global_batch
            metrics.step_done(step, epoch, loss, lr)
            if i + 1 < steps_left:  # the epoch's last step saves after the evaluation, below
                ckpt.step_done(step)
            if step == first_step:
                tdist.end_startup(rt)  # start-up, the first step included, is over
            if preemption.agreed(now=i + 1 == steps_left):
                ckpt.save_now(step)
                preemption.stopped_at(f"step {step} (epoch {epoch})")
                stopped = True
                break
        if stopped:
            break
        metrics.train_done()
        last = metrics.epoch_done(step, epoch, evaluate(model, evaluation, rt, autocast))
        progress.epoch, progress.epoch_images_done = epoch + 1, 0
        if ckpt.enabled:
            ckpt.save(step)
            ckpt.poll()
    ckpt.close(finished=not stopped)
    metrics.close()
    if rt.is_main:
        summary = {"workload": "vision", "model": cfg.model.name, "epochs": cfg.optim.epochs,
                   "epochs_this_run": progress.epoch - start[0], "resumed_from": {"epoch": start[0], "image": start[1]},
                   "steps": step, "world_size": rt.world_size,
                   "images_per_sec": last["images_per_sec"] if last else None,
                   "top1": last["top1"] if last else None, "top5": last["top5"] if last else None,
                   "metrics_file": str(Path(cfg.metrics_file).resolve()) if cfg.metrics_file else None,
                   "checkpoint_dir": cfg.checkpoint.directory, "config": asdict(cfg.model)}
        log("SUMMARY " + json.dumps(summary))
    return preemption.exit_status(finished=not stopped)


if __name__ == "__main__":
    run_main(main, finalize=False)
