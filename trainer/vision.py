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
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from config.paths import is_file
from config.workloads.common import CheckpointConfig
from config.workloads.vision import VisionJobConfig
from trainer import dist as tdist
from trainer.batching import (GLOBAL_BATCH, NonFiniteLoss, NonFiniteSteps, micro_batch_sync, resolve_global_batch,
                              world_size_from_env)
from trainer.checkpoint import RUN_SETTINGS, CheckpointManager, ModelAndOptimizer, existing_checkpoints
from trainer.cli import UsageError, checked_path, parse_config, run_main
from trainer.log import log
from trainer.metrics import check_metrics_file
from trainer.optim import build_sgd, image_learning_rate
from trainer.preemption import Preemption
from trainer.vision_data import (ElasticSampler, FolderUnreadable, Progress, UnreadableImages, build_datasets,
                                 train_loader, val_loader)
from trainer.vision_decode import model_inputs
from trainer.vision_input import check_decode, device_input
from trainer.vision_metrics import VisionMetrics
from trainer.vision_model import build_classifier, place


def parse_job(argv=None) -> VisionJobConfig:
    job = parse_config(VisionJobConfig, argv)
    if job.model.init_from and not checked_path("--init-from", is_file, job.model.init_from):
        raise UsageError("--init-from", f"{job.model.init_from} is not a file")
    check_metrics_file(job.metrics)
    check_decode(job.data.decode, job.data.source)
    return job


def check_record(cfg: CheckpointConfig, record: dict) -> dict | None:
    """Before any process group: the directory opens (trainer.checkpoint.existing_checkpoints),
    and its checkpoints (if any) are of this model and class count, so a mistake is one line, not
    a run from epoch 0. Returns the record the checkpoints were written with (None: none yet)."""
    found = existing_checkpoints(cfg)
    if found is None:
        return None
    path, existing = found
    model = {k: v for k, v in (existing or {}).items() if k not in RUN_SETTINGS}
    if model != record:
        raise UsageError("--checkpoint-dir", f"{path} holds checkpoints of {model}, not of {record}; "
                                             "use another directory")
    return existing


def main(argv=None) -> int:
    job = parse_job(argv)
    train_set, val_set, classes = build_datasets(job.data, job.synthetic, job.seed)
    record = {"workload": "vision", "model": job.model.name, "classes": classes}
    existing = check_record(job.checkpoint, record)
    # Before the process group: a global batch that does not divide is one line on every rank.
    global_batch = resolve_global_batch(job.batch, (existing or {}).get(GLOBAL_BATCH), world_size_from_env())
    if len(train_set) < global_batch:  # the sampler drops a short tail: every epoch would be no step at all
        field = "--train-samples" if job.data.source == "synthetic" else "--data"
        raise UsageError(field, f"{len(train_set)} training images are fewer than one step trains on (the global "
                                f"batch, {global_batch})")
    rt = tdist.init(job.dist, checkpoint_group=bool(job.checkpoint.directory))
    try:
        return train(job, rt, train_set, val_set, classes, {**record, GLOBAL_BATCH: global_batch})
    finally:
        tdist.shutdown()


def accumulate_gradients(ddp, forward, micro_batches, accumulation: int, job: VisionJobConfig,
                         metrics: VisionMetrics, device: torch.device, unreadable: UnreadableImages,
                         step: int) -> torch.Tensor:
    """Forward and backward over this rank's micro-batches of step `step`; DDP reduces the gradients
    once, after the last. `forward` is `ddp` or its compiled form; `micro_batches` yields the
    model's inputs on the device (vision_decode.model_inputs), and the time waited for each is the
    data wait. Returns this rank's mean loss of the step (micro-batches are equal, so the mean over
    the global batch is the mean of their means; DDP averages over ranks). Once the loader raised
    FolderUnreadable (recorded in `unreadable`), this rank has no data: without_data stands in."""
    loss = torch.zeros((), device=device)
    for k in range(accumulation):
        fetch_start = time.perf_counter()
        batch = None
        if unreadable.gone is None:
            try:
                batch = next(micro_batches)
            except FolderUnreadable as gone:  # from a loader process as well, or a GPU decoder's thread
                unreadable.folder_gone(f"in step {step}", step=step, problem=gone.problem)
        metrics.data_wait(time.perf_counter() - fetch_start)
        with micro_batch_sync(ddp, last=k == accumulation - 1):
            if batch is None:
                micro_loss = without_data(ddp, job, device) / accumulation
            else:
                images, labels = batch
                with autocast(device):
                    micro_loss = F.cross_entropy(forward(images), labels,
                                                 label_smoothing=job.optimizer.label_smoothing) / accumulation
            micro_loss.backward()
        loss += micro_loss.detach()
    return loss


def without_data(ddp, job: VisionJobConfig, device: torch.device) -> torch.Tensor:
    """A micro-batch's forward on zeros, for a rank whose data is gone: its peers' DDP still waits
    for its collectives (the buffers' broadcast, the gradients' all-reduce), and every rank then
    skips the step (NonFiniteSteps.check's abandon), so these gradients are never applied. In eval
    mode, so that the zeros move no BatchNorm statistics (rank 0's are the ones saved); uncompiled,
    so that the mode costs no recompilation."""
    size, micro = job.data.image_size, job.batch.batch_size
    images = torch.zeros(micro, 3, size, size, device=device)
    if device.type == "cuda":
        images = images.contiguous(memory_format=torch.channels_last)
    ddp.eval()
    try:
        with autocast(device):
            return F.cross_entropy(ddp(images), torch.zeros(micro, dtype=torch.long, device=device))
    finally:
        ddp.train()


def seed_dropout(seed: int, rank: int, step: int) -> None:
    """Seeds this rank's torch generators (CPU and GPU), which draw the dropout and stochastic depth
    masks, from (seed, rank, the steps done), before each step: each rank's micro-batches get their
    own masks, as one GPU's would over the whole global batch, a resume at step N does not replay
    step 1's, and it draws the masks of the run that went on (a host-side reset, no device work).
    Re-seeding rather than saving each rank's generator state: a resume may be on another number of
    ranks, where saved per-rank states have no rank to go to. Augmentations do not draw from this
    stream (trainer.vision_data.SeededAugmentation), and nothing else between steps (the loader's
    worker seeds) moves the masks."""
    torch.manual_seed(((seed * 1_000_003 + step) * 1_000_000_007 + rank) % 2**63)


def autocast(device: torch.device):
    """bf16 autocast on GPU; off on CPU, which has no fast bf16 path."""
    return torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")


def train(job: VisionJobConfig, rt: tdist.Runtime, train_set, val_set, classes: int, record: dict) -> int:
    on_gpu = rt.device.type == "cuda"
    if on_gpu:  # fixed input shapes: let cuDNN time its algorithms once per shape and keep the fastest
        torch.backends.cudnn.benchmark = True
    torch.manual_seed(job.seed)  # identical initial weights on every rank
    model = place(build_classifier(job.model, classes), job.efficiency, rt.device, rt.world_size)
    optimizer = build_sgd(model, job.optimizer)
    progress = Progress()
    state = {"app": ModelAndOptimizer(model, optimizer, replicated_buffers=True), "train": progress}
    ckpt = CheckpointManager(job.checkpoint, rt, state, model_record=record)
    step = ckpt.resume()
    first_step = step + 1
    start = (progress.epoch, progress.epoch_images_done)
    # Gradients live in DDP's buckets (no second copy to reduce from, and no copy back).
    ddp = DistributedDataParallel(model, device_ids=[rt.device.index] if on_gpu else None,
                                  gradient_as_bucket_view=True)
    forward = torch.compile(ddp) if job.efficiency.compile else ddp
    global_batch = record[GLOBAL_BATCH]
    micro = job.batch.batch_size
    accumulation = global_batch // (rt.world_size * micro)
    sampler = ElasticSampler(train_set, num_replicas=rt.world_size, rank=rt.rank, global_batch=global_batch,
                             seed=job.seed)
    unreadable = UnreadableImages(job.data.max_bad_images, rank=rt.rank)
    to_input = device_input(job.data, rt.device, unreadable)
    if rt.is_main and hasattr(to_input, "describe"):  # a decoder that says where it decodes
        log(to_input.describe())
    loader = train_loader(train_set, sampler, job.data, batch_size=micro, seed=job.seed, rank=rt.rank, pin=on_gpu,
                          unreadable=unreadable)
    evaluation = val_loader(val_set, job.data, batch_size=micro, rank=rt.rank, world_size=rt.world_size, pin=on_gpu,
                            unreadable=unreadable)
    epoch_images = len(train_set)
    if rt.is_main:
        log(f"Model {job.model.name}: {sum(p.numel() for p in model.parameters()) / 1e6:,.1f}M parameters, "
            f"{classes} classes, world size {rt.world_size}, global batch {global_batch}; "
            f"starting at epoch {start[0]}, image {start[1]} of {epoch_images} (step {step}); "
            f"{accumulation} micro-batch(es) of {micro} per rank per step")
    preemption = Preemption(rt)
    metrics = VisionMetrics(job.metrics, rt, global_batch // rt.world_size)
    nonfinite = NonFiniteSteps(rt, job.optimizer.max_nonfinite_steps, optimizer)

    def start_reading(epoch: int, images_done: int):
        """Epoch `epoch`'s micro-batches from image `images_done` of its order: the loader processes
        start reading now (as many micro-batches ahead as they hold)."""
        sampler.set_position(epoch, images_done)
        unreadable.reading(epoch)
        return iter(loader)

    stopped = False
    gone_ranks: list[int] = []  # the ranks whose data was gone, once they stop (UnreadableImages.agree_gone)
    stop_step = None
    last = None
    micro_batches = None
    batches = start_reading(progress.epoch, progress.epoch_images_done) if progress.epoch < job.epochs else None
    try:
        for epoch in range(progress.epoch, job.epochs):
            progress.epoch, progress.epoch_images_done = epoch, sampler.start
            steps_left = sampler.steps()
            metrics.epoch_start(epoch)
            unreadable.epoch_start(epoch)
            micro_batches = model_inputs(batches, to_input, rt.device)
            for i in range(steps_left):
                seed_dropout(job.seed, rt.rank, step)
                lr = image_learning_rate(job.optimizer, job.epochs, global_batch, progress.images_seen, epoch_images)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                optimizer.zero_grad(set_to_none=True)
                loss = accumulate_gradients(ddp, forward, micro_batches, accumulation, job, metrics, rt.device,
                                            unreadable, step + 1)
                # Decided on the device, the same on every rank; fused SGD skips the step itself when
                # it is 1.0 (found_inf). Nothing in a step waits for the device: the metrics and the
                # non-finite limit read their values LAG_STEPS steps late (trainer/late_read.py).
                skipped = nonfinite.check(step + 1, loss, abandon=unreadable.gone_step is not None)
                ckpt.wait_staging()  # an asynchronous save's copy of the weights must finish first
                optimizer.step()
                step += 1
                progress.epoch_images_done += global_batch
                progress.images_seen += global_batch
                metrics.step_done(step, epoch, loss, lr, skipped=skipped)
                nonfinite.stop_at_limit(step, now=epoch == job.epochs - 1 and i + 1 == steps_left)
                # The epoch's last step saves after the evaluation, below; no rank saves a step after
                # one whose data was gone: it was skipped, not trained. The ranks agreed on that with
                # the step's flags, on the device; a due save waits for the device anyway.
                if i + 1 < steps_left and not (ckpt.due(step) and nonfinite.any_abandoned):
                    ckpt.step_done(step)
                if step == first_step:
                    tdist.end_startup(rt)  # start-up, the first step included, is over
                # A rank's unreadable images past the limit, or its data gone, ride on the flag too
                # (UnreadableImages: when they stop).
                bad_data = unreadable.over_limit() or unreadable.gone is not None
                if preemption.agreed(now=i + 1 == steps_left, bad_data=bad_data):
                    stop_step = step
                    gone_at, gone_ranks = unreadable.agree_gone()
                    if gone_at is not None:  # skipped from there on, on every rank: saved as it was before
                        back = (step - gone_at + 1) * global_batch
                        progress.epoch_images_done -= back
                        progress.images_seen -= back
                        step = gone_at - 1
                    ckpt.save_now(step)
                    if not preemption.bad_data and not gone_ranks:
                        preemption.stopped_at(f"step {step} (epoch {epoch})")
                    stopped = True
                    break
            micro_batches.close()  # a decoder thread ends with its epoch
            if stopped:
                break
            metrics.train_done()
            # The next epoch's loader processes read while this one evaluates and saves: its first
            # step does not wait for them to fill (a whole micro-batch per process, a second or more
            # on a GPU node, where an ImageNet epoch over many GPUs is a few hundred steps or fewer).
            batches = start_reading(epoch + 1, 0) if epoch + 1 < job.epochs else None
            result = evaluate(model, evaluation, to_input, rt, unreadable)
            # Once an epoch, what the evaluation met: past the limit or gone, the epoch is saved as
            # trained, not evaluated. A stop request read here stays requested: the next step's flag sends it again.
            if preemption.agreed(now=True, bad_data=unreadable.over_limit() or unreadable.gone is not None) and \
                    preemption.bad_data:
                stop_step, gone_ranks = step, unreadable.agree_gone()[1]
                ckpt.save_now(step)
                stopped = True
                break
            last = metrics.epoch_done(step, epoch, result)
            progress.epoch, progress.epoch_images_done = epoch + 1, 0
            if ckpt.enabled:
                ckpt.save(step)
                ckpt.poll()
    except NonFiniteLoss:
        ckpt.close()  # a save in flight holds the last good weights: let it complete
        metrics.close()
        raise
    finally:  # however the loop ends (a preemption's stop, a failed step), no decoder thread reads on
        if micro_batches is not None:
            micro_batches.close()
    ckpt.close(finished=not stopped)
    metrics.close()
    if gone_ranks:
        unreadable.raise_gone(gone_ranks, job.data.source, stopped_with(ckpt, stop_step, step))
    if preemption.bad_data:
        unreadable.raise_agreed_problem()
    if rt.is_main:
        summary = {"workload": "vision", "model": job.model.name, "epochs": job.epochs,
                   "epochs_this_run": progress.epoch - start[0], "resumed_from": {"epoch": start[0], "image": start[1]},
                   "steps": step, "world_size": rt.world_size,
                   "images_per_sec": last["images_per_sec"] if last else None,
                   "top1": last["top1"] if last else None, "top5": last["top5"] if last else None,
                   "metrics_file": str(Path(job.metrics.file).resolve()) if job.metrics.file else None,
                   "checkpoint_dir": job.checkpoint.directory, "config": asdict(job.model)}
        log("SUMMARY " + json.dumps(summary))
    return preemption.exit_status(finished=not stopped)


def stopped_with(ckpt: CheckpointManager, stop_step: int, saved: int) -> str:
    """Where a run whose data was gone stopped, and the step its checkpoints resume from."""
    if saved == stop_step:  # the evaluation's: the end of the epoch's training
        held = f"the checkpoint of step {saved}, the epoch's training (a resume evaluates it again)"
    else:
        held = f"the checkpoint of step {saved}, the last step before it"
    if not ckpt.enabled:
        held = "no checkpoint (no --checkpoint-dir)"
    elif saved == 0:
        held = "no step trained before it"
    return f"every rank stopped at step {stop_step} with {held}"


def evaluate(model, loader, to_input, rt: tdist.Runtime, unreadable: UnreadableImages | None = None) -> dict:
    """Loss, top-1 and top-5 over the validation set, every image counted once over all ranks, of
    rank 0's model. Each rank's BatchNorm running statistics last moved with its own micro-batch
    (DDP broadcasts rank 0's only at the next training forward): rank 0's are broadcast first, so
    every rank evaluates the model the checkpoint saves, whatever the world size. (SyncBatchNorm's
    are already the same on every rank.) A loader that raises FolderUnreadable ends this rank's
    share early, recorded in `unreadable`: the others still meet its all-reduce, and trainer.vision
    then stops every rank without counting the evaluation."""
    tdist.same_buffers(model)
    model.eval()
    totals = torch.zeros(4, dtype=torch.float64, device=rt.device)  # loss sum, top-1, top-5, count
    batches = iter(loader)
    with torch.no_grad(), autocast(rt.device):
        while True:
            try:
                # A GPU decoder decodes here, and stops here where it decodes none of a micro-batch
                images, labels = to_input(*next(batches))
            except StopIteration:
                break
            except FolderUnreadable as gone:
                if unreadable is None:
                    raise
                unreadable.folder_gone(f"in epoch {unreadable.epoch.value}'s evaluation", problem=gone.problem)
                break
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


if __name__ == "__main__":
    run_main(main, finalize=False)
