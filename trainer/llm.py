"""FSDP2 training of a Llama-family decoder (dense or mixture of experts), resumable from
distributed checkpoints, optionally starting from Hugging Face weights.

    torchrun --nproc-per-node=2 -m trainer.llm --model tiny --steps 40 --checkpoint-dir ckpt
    torchrun --nproc-per-node=8 -m trainer.llm --init-from-hf /fsx/models/Llama-2-7b-hf ...

Steps count from 1: the metrics line for step N is written after the N-th optimizer step, and
a checkpoint taken at step N resumes with step N+1. A step trains on the global batch
(--global-batch-size sequences over all ranks, trainer/batching.py): the same on any number of
ranks, so a run resumed on another world size continues the same optimisation.
"""

from __future__ import annotations

import json
import time

import torch
from torch.distributed.tensor import DTensor

from config.memory import estimate_memory
from config.workloads.llm import LlmJobConfig
from trainer import dist as tdist
from trainer.batching import GLOBAL_BATCH, NonFiniteLoss, NonFiniteSteps, resolve_global_batch, world_size_from_env
from trainer.checkpoint import CheckpointManager, ModelAndOptimizer, check_directory
from trainer.cli import run_main
from trainer.data import RankBatches
from trainer.float8 import check_supported, precompute_scales_after_each_step
from trainer.late_read import LAG_STEPS
from trainer.llm_job import parse_job
from trainer.log import log
from trainer.metrics import MetricsLogger
from trainer.optim import TrainState, build_adamw
from trainer.parallel import build_decoder, check_expert_sharding
from trainer.preemption import Preemption


def to_device(batch: tuple[torch.Tensor, ...], device: torch.device) -> tuple[torch.Tensor, ...]:
    """Copy a batch to the GPU without stopping the host: a copy from pageable memory waits for
    the stream to drain, a copy from pinned memory is queued behind the running step."""
    if device.type != "cuda":
        return batch
    return tuple(t.pin_memory().to(device, non_blocking=True) for t in batch)


def main(argv=None) -> int:
    job = parse_job(argv)
    if job.efficiency.float8:
        check_supported()  # one line on a GPU without float8 matmuls (or none), before the group forms
    record = check_directory(job.checkpoint, job.model.shape)
    if record is None and job.model.init_from_hf:
        from trainer.hf import check_hf_weights
        check_hf_weights(job.model.init_from_hf, job.model.shape)  # before a model of its size is built
    # Before the process group: a global batch that does not divide is one line on every rank.
    global_batch = resolve_global_batch(job.batch, (record or {}).get(GLOBAL_BATCH), world_size_from_env())
    check_expert_sharding(job.model.name, job.model.shape, world_size_from_env(), job.fsdp)
    rt = tdist.init(job.dist, checkpoint_group=job.checkpoint.directory is not None)
    try:
        return train(job, rt, global_batch)
    finally:
        tdist.shutdown()


def forward_backward(model, micro_batches, rt: tdist.Runtime) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Accumulate the gradient of the step's mean loss over the global batch; return this rank's
    shares of the mean LM loss and of the mean load-balancing loss (their sums over ranks are the
    global means). Every label counts (trainer/data.py) and every micro-batch holds the same
    number of tokens, so the mean over the global batch is the mean of the micro-batch means;
    FSDP2 averages the gradients over ranks, which leaves 1 / micro-batches per rank."""
    weight, coef = 1.0 / len(micro_batches), model.cfg.router_aux_loss_coef
    lm_share = torch.zeros((), device=rt.device)
    aux_share = torch.zeros((), device=rt.device) if model.cfg.is_moe and coef else None
    for inputs, labels in micro_batches:
        lm, aux = model(*to_device((inputs, labels), rt.device), separate_aux=True)
        (lm * weight if aux is None else (lm + coef * aux) * weight).backward()
        lm_share += lm.detach() * (weight / rt.world_size)
        if aux is not None:
            aux_share += aux.detach() * (weight / rt.world_size)
    return lm_share, aux_share


def train(job: LlmJobConfig, rt: tdist.Runtime, global_batch: int) -> int:
    shape = job.model.shape
    preemption = Preemption(rt)
    batches = RankBatches(job.data, job.batch, seed=job.seed, rank=rt.rank, world_size=rt.world_size,
                          vocab_size=shape.vocab_size, global_batch=global_batch)
    model = build_decoder(shape, rt, efficiency=job.efficiency, fsdp=job.fsdp, rope_length=job.batch.seq_len,
                          seed=job.seed)
    optimizer, scheduler = build_adamw(model, job.optimizer, total_steps=job.steps)
    if job.efficiency.float8:
        precompute_scales_after_each_step(optimizer, model)
    ckpt = CheckpointManager(job.checkpoint, rt, {"app": ModelAndOptimizer(model, optimizer),
                                                  "train": TrainState(scheduler), "data": batches},
                             last_step=job.steps,
                             model_record={"model": shape.to_dict(), "init_from_hf": job.model.init_from_hf,
                                           GLOBAL_BATCH: global_batch})
    start = ckpt.resume()  # our own checkpoints take precedence over --init-from-hf
    if start == 0 and job.model.init_from_hf:
        from trainer.hf import load_hf_weights
        load_hf_weights(model, job.model.init_from_hf, rt)
    tokens_per_step = global_batch * job.batch.seq_len
    if rt.is_main:
        log_start(job, rt, batches, start)
    metrics = MetricsLogger(job.metrics, rt, tokens_per_step_per_device=tokens_per_step // rt.world_size,
                            flops_per_token=shape.flops_per_token(job.batch.seq_len), last_step=job.steps)
    nonfinite = NonFiniteSteps(rt, job.optimizer.max_nonfinite_steps, optimizer)
    # Bad data (a token id past the vocabulary) found on one rank must stop every rank, before any
    # trains on it. Each step checks the batch LAG_STEPS + 1 steps ahead and sends the answer with
    # the preemption flag, which every rank reads LAG_STEPS steps later: just before that batch.
    # The first steps' batches, before any flag could arrive, are agreed on once, here.
    batches.check_ahead(range(min(LAG_STEPS + 1, job.steps - start)))
    batches.raise_agreed_problem()

    # Nothing in a step waits for the device: values the host needs are read a few steps late
    # (trainer/late_read.py), or once per metrics line; only checkpoint saves synchronise.
    t0, step = time.perf_counter(), start
    try:
        for step in range(start + 1, job.steps + 1):
            lm, aux = forward_backward(model, batches.next_step(), rt)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), job.optimizer.max_grad_norm)
            if isinstance(grad_norm, DTensor):
                grad_norm = grad_norm.full_tensor()
            skipped = nonfinite.check(step, grad_norm, lm)  # decided on the device, the same on every rank
            lr = scheduler.get_last_lr()[0]  # the rate this step uses; step() moves it to the next one
            ckpt.wait_staging()  # an asynchronous save's copy of the weights must finish first
            optimizer.step()  # applies nothing when `skipped`
            scheduler.step()  # a skipped step still advances the schedule (NonFiniteSteps)
            optimizer.zero_grad(set_to_none=True)
            metrics.step_done(step, lm, aux, grad_norm, lr, skipped=skipped)
            nonfinite.stop_at_limit(step, now=step == job.steps)
            ckpt.step_done(step)
            if step == start + 1:
                tdist.end_startup(rt)  # start-up, the first step's compile warm-up included, is over
            # A stop asked for in the last steps is read only after the last one: the run is complete then.
            bad_ahead = step + LAG_STEPS < job.steps and batches.check_ahead(range(LAG_STEPS, LAG_STEPS + 1))
            if step < job.steps and preemption.agreed(bad_data=bad_ahead):
                ckpt.save_now(step)
                if not preemption.bad_data:
                    preemption.stopped_at(f"step {step}")
                break
    except NonFiniteLoss:
        ckpt.close()  # a save in flight holds the last good weights: let it complete
        metrics.close()
        raise
    ckpt.close(finished=step >= job.steps)
    metrics.close()
    if preemption.bad_data:
        batches.raise_agreed_problem()
    elapsed = time.perf_counter() - t0
    if rt.is_main:
        done = step - start
        summary = {"workload": "llm", "model": job.model.name, "steps": step, "steps_this_run": done,
                   "global_batch": global_batch,
                   "tokens_per_sec": round(done * tokens_per_step / elapsed, 1) if elapsed > 0 and done else None,
                   "final_loss": round(metrics.last_loss, 4) if metrics.last_loss is not None else None,
                   "nonfinite_steps": nonfinite.total, "checkpoint_dir": job.checkpoint.directory}
        log("SUMMARY " + json.dumps(summary))
    return preemption.exit_status(finished=step >= job.steps)


def log_start(job: LlmJobConfig, rt: tdist.Runtime, batches: RankBatches, start: int) -> None:
    """Rank 0's opening lines: the model and its memory estimate, the batch, where the run starts."""
    shape, seq_len, micro = job.model.shape, job.batch.seq_len, job.batch.batch_size
    memory = estimate_memory(shape, shards=rt.world_size if job.fsdp.shards(rt.world_size) else 1,
                             batch_size=micro, seq_len=seq_len,
                             activation_checkpointing=job.efficiency.activation_checkpointing,
                             mixed_precision=rt.device.type == "cuda",
                             loss_chunk_tokens=job.efficiency.loss_chunk_tokens,
                             async_checkpoints=job.checkpoint.directory is not None and not job.checkpoint.synchronous)
    log(f"Model {job.model.name}: {shape.num_params() / 1e6:,.1f}M parameters "
        f"({shape.num_params(active=True) / 1e6:,.1f}M active per token) on {rt.world_size} rank(s), "
        f"activation checkpointing {job.efficiency.activation_checkpointing}; "
        f"estimated memory per rank {memory.summary()}")
    log(f"Global batch {batches.global_batch} sequences ({batches.global_batch * seq_len:,} tokens) per step: "
        f"{batches.accumulation} micro-batch(es) of {micro} per rank; starting at sample {batches.position:,}")
    if start >= job.steps:
        log(f"Checkpoint at step {start} already reaches --steps {job.steps}; nothing to train")


if __name__ == "__main__":
    run_main(main, finalize=False)
