"""FSDP2 training of a Llama-family decoder, resumable from distributed checkpoints.

    torchrun --nproc-per-node=2 -m trainer.llm --model tiny --steps 40 --checkpoint-dir ckpt

Steps count from 1: the metrics line for step N is written after the N-th optimizer step, and
a checkpoint taken at step N resumes with step N+1.
"""

from __future__ import annotations

import json
import math
import signal
import time
import warnings
from dataclasses import dataclass

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from trainer import dist as tdist
from trainer.checkpoint import CheckpointConfig, CheckpointManager, ModelAndOptimizer
from trainer.cli import Parser, UsageError, non_negative_int, positive_float, positive_int, run_main
from trainer.data import DataConfig, RankBatches
from trainer.log import log
from trainer.metrics import MetricsConfig, MetricsLogger
from trainer.model import MODEL_PRESETS, ModelConfig, Transformer, loss_fn, model_config

DEFAULT_LR = {"tiny": 3e-3}  # tiny models learn a toy task in tens of steps only with a larger rate


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 3e-4
    warmup_steps: int = 10
    total_steps: int = 1000
    min_lr_ratio: float = 0.1  # cosine decays to this fraction of the peak rate
    weight_decay: float = 0.1
    max_grad_norm: float = 1.0


def warmup_cosine(cfg: OptimConfig):
    """Linear warm-up to the peak rate, then a cosine down to min_lr_ratio of it at the last step."""
    def factor(step: int) -> float:  # `step` is the number of optimizer steps already taken
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        progress = (step - cfg.warmup_steps) / max(1, cfg.total_steps - cfg.warmup_steps)
        cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
        return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cosine
    return factor


class TrainState:
    """The scheduler, saved with the model so a resumed run picks up the same rate. The step is
    the checkpoint folder's own number, and the data position follows from it."""

    def __init__(self, scheduler):
        self.scheduler = scheduler

    def state_dict(self) -> dict:
        return {"scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.scheduler.load_state_dict(state["scheduler"])


class Preemption:
    """SIGTERM (a pod being evicted; torchrun forwards it) asks for a checkpoint and a clean exit.

    The signal can reach ranks at different steps, so they agree through an all-reduce. Its
    result is read one step later: reading it at once would make the host wait for the device
    every step and leave the GPU idle while the next step is queued.
    """

    def __init__(self, rt: tdist.Runtime):
        self.rt, self.requested, self.inflight = rt, False, None
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame):
        self.requested = True

    def agreed(self, *, now: bool = False) -> bool:
        """True once any rank has been asked to stop (as of the previous step, or now)."""
        # fill_ launches a kernel with the value as an argument; building the tensor from a host
        # list would copy from pageable memory, which synchronises the stream every step.
        flag = torch.empty(1, device=self.rt.device).fill_(1.0 if self.requested else 0.0)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        previous, self.inflight = self.inflight, flag
        if now:
            return bool(flag.item() > 0)
        return previous is not None and bool(previous.item() > 0)


def to_device(batch: tuple[torch.Tensor, ...], device: torch.device) -> tuple[torch.Tensor, ...]:
    """Copy a batch to the GPU without stopping the host: a copy from pageable memory waits for
    the stream to drain, a copy from pinned memory is queued behind the running step."""
    if device.type != "cuda":
        return batch
    return tuple(t.pin_memory().to(device, non_blocking=True) for t in batch)


def build_model(cfg: ModelConfig, rt: tdist.Runtime, *, compile: bool, activation_checkpointing: bool):
    # The meta device records shapes without memory: a 70B model is built in a second and
    # each rank only ever allocates its own shard.
    with torch.device("meta"):
        model = Transformer(cfg)
    on_gpu = rt.device.type == "cuda"
    # bf16 compute with fp32 gradient reduction on GPU; CPUs have no fast bf16 path, stay fp32.
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if on_gpu else MixedPrecisionPolicy()
    layers = list(model.layers.values())
    for i, block in enumerate(layers):
        block.activation_checkpointing = activation_checkpointing
        if compile:
            block.compile()  # per block: all blocks share one compiled graph, so compile time does not grow with depth
        # The last block's parameters are needed again at once by backward: keep them gathered.
        fully_shard(block, mp_policy=mp, reshard_after_forward=i < len(layers) - 1)
    fully_shard(model, mp_policy=mp)
    model.to_empty(device=rt.device)
    # Same seed on every rank: replicated buffers and any replicated parameter agree.
    torch.manual_seed(0)
    with warnings.catch_warnings():
        # DTensor warns that its random ops are incomplete on CPU meshes: each CPU rank then
        # draws its shard from its own generator, which is all initialisation needs.
        warnings.filterwarnings("ignore", message="DTensor random operators")
        model.init_weights(rt.device)
    return model


def parse_args(argv=None):
    p = Parser(prog="python -m trainer.llm", description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=sorted(MODEL_PRESETS), default="tiny", help="model dimensions")
    p.add_argument("--loss-chunk-tokens", type=non_negative_int, default=0,
                   help="compute the output layer and loss this many tokens at a time, never holding all "
                        "logits (saves ~10 GiB at seq 8192 with a 128k vocabulary); 0 = off")
    p.add_argument("--layers", type=positive_int, default=None, help="override the preset's layer count (benchmarks)")
    p.add_argument("--steps", type=positive_int, default=40, help="total optimizer steps, counting resumed ones")
    p.add_argument("--batch-size", type=positive_int, default=4, help="sequences per rank per step")
    p.add_argument("--seq-len", type=positive_int, default=128, help="tokens per sequence")
    p.add_argument("--data", default="synthetic", help="'synthetic' or a directory of token shards (trainer.data prepare)")
    p.add_argument("--lr", type=positive_float, default=None, help="peak learning rate (default: 3e-3 for tiny, else 3e-4)")
    p.add_argument("--warmup-steps", type=non_negative_int, default=10)
    p.add_argument("--max-grad-norm", type=positive_float, default=1.0)
    p.add_argument("--checkpoint-dir", default=None, help="where checkpoints are saved and resumed from (none: no checkpoints)")
    p.add_argument("--checkpoint-every", type=positive_int, default=100, help="steps between checkpoints")
    p.add_argument("--keep-checkpoints", type=positive_int, default=2, help="newest complete checkpoints kept")
    p.add_argument("--sync-checkpoint", action="store_true", help="save synchronously (benchmarks compare)")
    p.add_argument("--log-every", type=positive_int, default=10, help="steps between metrics lines")
    p.add_argument("--metrics-file", default=None, help="append metrics as JSON lines here (rank 0)")
    p.add_argument("--compile", action="store_true", help="torch.compile each decoder block")
    p.add_argument("--activation-checkpointing", action="store_true", help="recompute block activations in backward")
    p.add_argument("--seed", type=non_negative_int, default=0, help="synthetic data seed")
    p.add_argument("--dist-timeout", type=positive_float, default=60.0,
                   help="seconds before a stuck rendezvous or collective fails (torchrun then restarts)")
    args = p.parse_args(argv)
    mcfg = model_config(args.model, n_layers=args.layers)
    if args.seq_len > mcfg.max_seq_len:
        raise UsageError("--seq-len", f"{args.seq_len} is longer than {args.model}'s context of {mcfg.max_seq_len}")
    return args, mcfg


def main(argv=None) -> int:
    args, mcfg = parse_args(argv)
    rt = tdist.init(tdist.DistConfig(timeout_s=args.dist_timeout), checkpoint_group=args.checkpoint_dir is not None)
    try:
        return train(args, mcfg, rt)
    finally:
        tdist.shutdown()


def train(args, mcfg: ModelConfig, rt: tdist.Runtime) -> int:
    preemption = Preemption(rt)
    batches = RankBatches(DataConfig(args.data, args.batch_size, args.seq_len, args.seed), rt.rank,
                          rt.world_size, mcfg.vocab_size)
    model = build_model(mcfg, rt, compile=args.compile, activation_checkpointing=args.activation_checkpointing)
    ocfg = OptimConfig(lr=args.lr or DEFAULT_LR.get(args.model, OptimConfig.lr),
                       warmup_steps=min(args.warmup_steps, args.steps // 2),  # short runs still decay
                       total_steps=args.steps, max_grad_norm=args.max_grad_norm)
    # The fused kernel updates all parameters in one pass over memory on GPU; CPUs use foreach.
    optimizer = torch.optim.AdamW(model.parameters(), lr=ocfg.lr, betas=(0.9, 0.95), weight_decay=ocfg.weight_decay,
                                  fused=rt.device.type == "cuda")
    compute_loss = torch.compile(loss_fn) if args.compile else loss_fn  # fuses the fp32 cast into the softmax
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(ocfg))
    train_state = TrainState(scheduler)
    ckpt = CheckpointManager(
        CheckpointConfig(args.checkpoint_dir, args.checkpoint_every, args.keep_checkpoints, not args.sync_checkpoint),
        rt, {"app": ModelAndOptimizer(model, optimizer), "train": train_state})
    start = ckpt.resume()
    # batches.next() runs once per step, so the data position is the step: nothing per rank is
    # saved, and a checkpoint written by N ranks resumes on M.
    batches.position = start
    if start >= args.steps and rt.is_main:
        log(f"Checkpoint at step {start} already reaches --steps {args.steps}; nothing to train")
    metrics = MetricsLogger(
        MetricsConfig(args.log_every, args.metrics_file), is_main=rt.is_main, device=rt.device,
        world_size=rt.world_size, tokens_per_step_per_device=args.batch_size * args.seq_len,
        flops_per_token=mcfg.flops_per_token(args.seq_len))

    t0, loss_sum, loss_count, last_loss, step = time.perf_counter(), torch.zeros((), device=rt.device), 0, None, start
    for step in range(start + 1, args.steps + 1):
        inputs, labels = to_device(batches.next(), rt.device)
        if args.loss_chunk_tokens:
            loss = model(inputs, labels, args.loss_chunk_tokens)
        else:
            loss = compute_loss(model(inputs), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), ocfg.max_grad_norm)
        ckpt.wait_staging()  # an asynchronous save's copy of the weights must finish first
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        loss_sum += loss.detach()
        loss_count += 1
        metrics.step_done()

        if metrics.due(step) or step == args.steps:
            # The mean over the window and over ranks: one synchronising collective per log line.
            last_loss = tdist.all_reduce_mean(loss_sum.item() / loss_count, rt)
            metrics.log(step, last_loss, scheduler.get_last_lr()[0])
            loss_sum.zero_()
            loss_count = 0
        if ckpt.due(step, args.steps):
            ckpt.save(step)
        ckpt.poll()
        if preemption.agreed(now=step == args.steps):
            ckpt.save(step, blocking=True)
            ckpt.wait()
            if rt.is_main:
                log(f"SIGTERM: checkpoint saved at step {step}; exiting cleanly")
            break
    ckpt.close()
    metrics.close()
    elapsed = time.perf_counter() - t0
    if rt.is_main:
        done = step - start
        summary = {"workload": "llm", "model": args.model, "steps": step, "steps_this_run": done,
                   "tokens_per_sec": round(done * args.batch_size * args.seq_len * rt.world_size / elapsed, 1)
                   if elapsed > 0 and done else None,
                   "final_loss": round(last_loss, 4) if last_loss is not None else None,
                   "checkpoint_dir": args.checkpoint_dir}
        log("SUMMARY " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    run_main(main)
