"""FSDP2 training of a Llama-family decoder (dense or mixture of experts), resumable from
distributed checkpoints, optionally starting from Hugging Face weights.

    torchrun --nproc-per-node=2 -m trainer.llm --model tiny --steps 40 --checkpoint-dir ckpt
    torchrun --nproc-per-node=8 -m trainer.llm --init-from-hf /fsx/models/Llama-2-7b-hf ...

Steps count from 1: the metrics line for step N is written after the N-th optimizer step, and
a checkpoint taken at step N resumes with step N+1.
"""

from __future__ import annotations

import json
import time

import torch

from config.memory import estimate_memory
from trainer import dist as tdist
from trainer.checkpoint import CheckpointManager, ModelAndOptimizer, check_directory
from trainer.cli import run_main
from trainer.data import RankBatches
from trainer.job_config import JobConfig, parse_job
from trainer.log import log
from trainer.metrics import MetricsLogger
from trainer.optim import TrainState, build_optimizer
from trainer.parallel import build_model
from trainer.preemption import Preemption


def to_device(batch: tuple[torch.Tensor, ...], device: torch.device) -> tuple[torch.Tensor, ...]:
    """Copy a batch to the GPU without stopping the host: a copy from pageable memory waits for
    the stream to drain, a copy from pinned memory is queued behind the running step."""
    if device.type != "cuda":
        return batch
    return tuple(t.pin_memory().to(device, non_blocking=True) for t in batch)


def main(argv=None) -> int:
    job = parse_job(argv)
    check_directory(job.checkpoint, job.model.config)
    rt = tdist.init(tdist.DistConfig(job.parallel.dist_timeout_s, job.parallel.startup_timeout_s),
                    checkpoint_group=job.checkpoint.directory is not None)
    try:
        return train(job, rt)
    finally:
        tdist.shutdown()


def setup_model(job: JobConfig, rt: tdist.Runtime):
    spec = job.model
    model = build_model(spec.config, rt, compile=spec.compile, activation_checkpointing=spec.activation_checkpointing,
                        rope_length=job.data.seq_len, parallel=job.parallel)
    model.loss_chunk_tokens = spec.loss_chunk_tokens
    if spec.compile:
        model.compute_loss = torch.compile(model.compute_loss)  # fuses the fp32 cast into the softmax
    return model


def train(job: JobConfig, rt: tdist.Runtime) -> int:
    mcfg = job.model.config
    preemption = Preemption(rt)
    batches = RankBatches(job.data, rt.rank, rt.world_size, mcfg.vocab_size)
    model = setup_model(job, rt)
    optimizer, scheduler = build_optimizer(model, job.optim, rt.device)
    ckpt = CheckpointManager(job.checkpoint, rt, {"app": ModelAndOptimizer(model, optimizer),
                                                  "train": TrainState(scheduler)},
                             last_step=job.steps,
                             model_record={"model": mcfg.to_dict(), "init_from_hf": job.model.init_from_hf})
    start = ckpt.resume()  # our own checkpoints take precedence over --init-from-hf
    if start == 0 and job.model.init_from_hf:
        from trainer.hf import load_hf_weights
        load_hf_weights(model, job.model.init_from_hf, rt)
    # batches.next() runs once per step, so the data position is the step: nothing per rank is
    # saved, and a checkpoint written by N ranks resumes on M.
    batches.position = start
    if rt.is_main:
        memory = estimate_memory(mcfg, shards=rt.world_size if job.parallel.shards(rt.world_size) else 1,
                                 batch_size=job.data.batch_size, seq_len=job.data.seq_len,
                                 activation_checkpointing=job.model.activation_checkpointing,
                                 mixed_precision=rt.device.type == "cuda",
                                 loss_chunk_tokens=job.model.loss_chunk_tokens)
        log(f"Model {job.model.name}: {mcfg.num_params() / 1e6:,.1f}M parameters "
            f"({mcfg.num_params(active=True) / 1e6:,.1f}M active per token) on {rt.world_size} rank(s); "
            f"estimated memory per rank {memory.summary()}")
        if start >= job.steps:
            log(f"Checkpoint at step {start} already reaches --steps {job.steps}; nothing to train")
    metrics = MetricsLogger(job.metrics, rt, tokens_per_step_per_device=job.data.batch_size * job.data.seq_len,
                            flops_per_token=mcfg.flops_per_token(job.data.seq_len), last_step=job.steps)
    lr = lambda: scheduler.get_last_lr()[0]  # noqa: E731

    t0, step = time.perf_counter(), start
    for step in range(start + 1, job.steps + 1):
        inputs, labels = to_device(batches.next(), rt.device)
        loss = model(inputs, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), job.optim.max_grad_norm)
        ckpt.wait_staging()  # an asynchronous save's copy of the weights must finish first
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        metrics.step_done(step, loss, lr)
        ckpt.step_done(step)
        if step == start + 1:
            tdist.end_startup(rt)  # start-up, the first step's compile warm-up included, is over
        if preemption.agreed(now=step == job.steps):
            ckpt.save_now(step)
            preemption.stopped_at(f"step {step}")
            break
    ckpt.close(finished=step >= job.steps)
    metrics.close()
    elapsed = time.perf_counter() - t0
    if rt.is_main:
        done = step - start
        summary = {"workload": "llm", "model": job.model.name, "steps": step, "steps_this_run": done,
                   "tokens_per_sec": round(done * job.data.batch_size * job.data.seq_len * rt.world_size / elapsed, 1)
                   if elapsed > 0 and done else None,
                   "final_loss": round(metrics.last_loss, 4) if metrics.last_loss is not None else None,
                   "checkpoint_dir": job.checkpoint.directory}
        log("SUMMARY " + json.dumps(summary))
    return preemption.exit_status(finished=step >= job.steps)


if __name__ == "__main__":
    run_main(main, finalize=False)
