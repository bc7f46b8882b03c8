"""The CPU DDP smoke job, done right: a task the model can learn, and snapshots that resume.

    torchrun --nproc-per-node=2 -m trainer.ddp --epochs 20 --save-every 2 --snapshot-path s.pt

The target is a fixed random "teacher" classifier, so the loss falls for real (a single-logit
cross-entropy is identically zero and teaches nothing). Rank 0 alone writes the snapshot,
atomically, so a kill mid-write leaves the previous snapshot intact.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from config.paths import output_file
from config.workloads.ddp import DdpJobConfig
from trainer import dist as tdist
from trainer.cli import UsageError, checked_path, parse_config, run_main, write_whole
from trainer.log import log
from trainer.preemption import Preemption
from trainer.safe_load import weights_only_refusal


@dataclass(frozen=True)
class TaskConfig:
    samples: int = DdpJobConfig.samples
    features: int = 32
    classes: int = 8
    hidden: int = 128
    seed: int = 1234  # every rank builds the same dataset; the sampler splits it


def make_dataset(cfg: TaskConfig) -> TensorDataset:
    g = torch.Generator().manual_seed(cfg.seed)
    x = torch.randn(cfg.samples, cfg.features, generator=g)
    teacher = torch.randn(cfg.features, cfg.classes, generator=g)
    y = (x @ teacher).argmax(dim=1)
    return TensorDataset(x, y)


def make_model(cfg: TaskConfig) -> nn.Module:
    return nn.Sequential(nn.Linear(cfg.features, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, cfg.classes))


# --- snapshot -----------------------------------------------------------------------------------

def save_snapshot(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, epochs_run: int) -> None:
    """Written whole (trainer.cli.write_whole), then the folder fsynced: a reader sees the old
    snapshot or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "epochs_run": epochs_run,
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
    }
    write_whole(path, lambda f: torch.save(state, f))
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def load_snapshot(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Restore from `path` and return the epochs already run (0 when there is no snapshot).

    The snapshot sits on shared, writable storage, so it is read with weights_only=True: tensors
    and plain data only (the Python RNG state is a tuple of ints), never pickled code. Snapshots
    written before this rule have the same content and still load."""
    if not path.exists():
        return 0
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise UsageError("--snapshot-path", f"{path}: {weights_only_refusal(exc)} (snapshots load with "
                                            "weights_only=True)") from None
    except Exception as exc:  # a foreign or damaged file is the user's to fix, said in one line
        raise UsageError("--snapshot-path", f"{path} is not a snapshot this job can resume from "
                                            f"({_first_line(exc)})") from None
    try:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])
        epochs_run = state["epochs_run"]
        if not isinstance(epochs_run, int) or epochs_run < 0:
            raise ValueError(f"epochs_run is {epochs_run!r}")
    except Exception as exc:
        raise UsageError("--snapshot-path", f"{path} is not a snapshot this job can resume from "
                                            f"({type(exc).__name__}: {_first_line(exc)})") from None
    return epochs_run


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


# --- training -----------------------------------------------------------------------------------

def parse_job(argv=None) -> DdpJobConfig:
    job = parse_config(DdpJobConfig, argv)
    checked_path("--snapshot-path", output_file, job.snapshot_path)  # before training, not at the first save
    return job


def main(argv=None) -> int:
    job = parse_job(argv)
    rt = tdist.init(job.dist)
    try:
        return train(job, rt)
    finally:
        tdist.shutdown()


def train(job: DdpJobConfig, rt: tdist.Runtime) -> int:
    snapshot = Path(job.snapshot_path)
    task = TaskConfig(samples=job.samples)
    torch.manual_seed(task.seed)  # identical initial weights on every rank
    model = make_model(task).to(rt.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=job.lr, momentum=0.9)
    epochs_run = load_snapshot(snapshot, model, optimizer)
    if epochs_run and rt.is_main:
        log(f"[RANK {rt.rank}] Resuming from snapshot {snapshot} at epoch {epochs_run}")
    ddp = DistributedDataParallel(model, device_ids=[rt.device.index] if rt.device.type == "cuda" else None)
    tdist.end_startup(rt)  # the snapshot is loaded and the weights broadcast: training from here
    dataset = make_dataset(task)
    sampler = DistributedSampler(dataset, num_replicas=rt.world_size, rank=rt.rank, shuffle=True, seed=task.seed)
    loader = DataLoader(dataset, batch_size=job.batch_size, sampler=sampler, drop_last=True)
    preemption = Preemption(rt)
    t0, samples, loss, epoch = time.perf_counter(), 0, float("nan"), epochs_run - 1
    for epoch in range(epochs_run, job.epochs):
        sampler.set_epoch(epoch)  # a new shuffle per epoch, the same on every rank
        total, steps = 0.0, 0
        for x, y in loader:
            x, y = x.to(rt.device), y.to(rt.device)
            step_loss = F.cross_entropy(ddp(x), y)
            optimizer.zero_grad(set_to_none=True)
            step_loss.backward()
            optimizer.step()
            total, steps = total + step_loss.item(), steps + 1
        samples += steps * job.batch_size * rt.world_size
        loss = tdist.all_reduce_mean(total / max(steps, 1), rt)
        log(f"[RANK {rt.rank}] Epoch {epoch} | Batchsize {job.batch_size} | Steps {steps} | Loss {loss:.4f}")
        # A SIGTERM stops the run at the end of the epoch in flight (short in this smoke job),
        # with a snapshot of it: snapshots only hold whole epochs.
        stop = epoch + 1 < job.epochs and preemption.agreed(now=True)  # the last epoch ends the run complete
        if rt.is_main and ((epoch + 1) % job.save_every == 0 or epoch + 1 == job.epochs or stop):
            save_snapshot(snapshot, model, optimizer, epoch + 1)
            log(f"[RANK {rt.rank}] Epoch {epoch} | Snapshot saved at {snapshot}")
        if stop:
            preemption.stopped_at(f"epoch {epoch}")
            break
    elapsed = time.perf_counter() - t0
    if rt.is_main:
        summary = {"workload": "ddp", "epochs": job.epochs, "epochs_this_run": epoch + 1 - epochs_run,
                   "samples_per_sec": round(samples / elapsed, 1) if elapsed > 0 else None,
                   "final_loss": None if math.isnan(loss) else round(loss, 4), "snapshot": str(snapshot.resolve())}
        log("SUMMARY " + json.dumps(summary))
    return preemption.exit_status(finished=epoch + 1 >= job.epochs)


if __name__ == "__main__":
    run_main(main, finalize=False)
