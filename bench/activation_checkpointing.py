"""Activation checkpointing none / selective / full: step time and peak memory on this machine.

    python bench/activation_checkpointing.py [--dim 512 --layers 4 --seq-len 256 --batch 4] [--rounds 3 --steps 3]

Step time: the three modes alternate within each round in this one process (forward, loss,
backward and AdamW on the same model and batch), and each ratio is the median over rounds of
that round's ratio. Memory: each mode trains in a child process of its own, which reports its
peak resident set (VmHWM); the differences between modes are held against config/memory.py's activation
terms (fp32 on CPU: the estimate's c = 4 bytes). On a CPU a matmul is not much dearer than the
elementwise work around it, so the time ratios understate what selective saves on a GPU, where
full recomputation costs about a third more forward matmul FLOPs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from config.memory import CHECKPOINTING_MODES, GIB, estimate_memory  # noqa: E402
from config.models import ModelConfig  # noqa: E402
from config.options import positive_int  # noqa: E402
from config.workloads.llm import EfficiencyConfig  # noqa: E402
from trainer import dist as tdist  # noqa: E402
from trainer.cli import Parser  # noqa: E402
from ops import proc  # noqa: E402
from trainer.parallel import build_decoder  # noqa: E402

WARMUP = 2
CHILD_TIMEOUT_S = 900


def bench_config(args) -> ModelConfig:
    return ModelConfig(dim=args.dim, n_layers=args.layers, n_heads=args.dim // 64, n_kv_heads=max(1, args.dim // 256),
                       vocab_size=args.vocab, ffn_dim=int(args.dim * 8 / 3) // 64 * 64, max_seq_len=args.seq_len)


def train_steps(model, optimizer, data: torch.Tensor) -> None:
    for batch in data:
        model(batch[:, :-1], batch[:, 1:]).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def model_in_mode(cfg: ModelConfig, rt, mode: str):
    checkpointing = mode if mode in CHECKPOINTING_MODES else "none"  # "params-only" builds and never steps
    model = build_decoder(cfg, rt, efficiency=EfficiencyConfig(activation_checkpointing=checkpointing),
                          rope_length=cfg.max_seq_len)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)


def peak_resident_bytes() -> int:
    """This process's peak resident set since its exec (VmHWM). Not ru_maxrss: that high-water mark
    survives exec, so a child forked from this benchmark's large parent would report the parent's."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise SystemExit("activation_checkpointing: /proc/self/status has no VmHWM (Linux only)")


def child(args) -> int:
    """One mode's training, for its peak resident memory (printed as the last line)."""
    cfg = bench_config(args)
    rt = tdist.Runtime(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), backend="gloo")
    model, optimizer = model_in_mode(cfg, rt, args.child)
    if args.child != "params-only":
        train_steps(model, optimizer, torch.randint(cfg.vocab_size, (3, args.batch, args.seq_len + 1)))
    print(peak_resident_bytes())
    return 0


def peak_rss(args, mode: str) -> int:
    argv = [sys.executable, __file__, "--child", mode, "--dim", str(args.dim), "--layers", str(args.layers),
            "--seq-len", str(args.seq_len), "--batch", str(args.batch), "--vocab", str(args.vocab)]
    p = proc.run(argv, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=CHILD_TIMEOUT_S)
    if p.returncode != 0:
        raise SystemExit(f"activation_checkpointing: the {mode} child failed: {p.stderr.strip()[-300:]}")
    return int(p.stdout.split()[-1])


def main(argv=None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--dim", type=positive_int, default=512, help="model width; its heads are 64 wide")
    p.add_argument("--layers", type=positive_int, default=4)
    p.add_argument("--vocab", type=positive_int, default=8192)
    p.add_argument("--seq-len", type=positive_int, default=256)
    p.add_argument("--batch", type=positive_int, default=4)
    p.add_argument("--steps", type=positive_int, default=3)
    p.add_argument("--rounds", type=positive_int, default=3)
    p.add_argument("--child", choices=[*CHECKPOINTING_MODES, "params-only"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.layers < 2:  # the modes' estimates are then equal, and measured/estimate divided by their 0 difference
        p.error(f"--layers: must be at least 2 (one layer's activations are the peak whether checkpointed or not, "
                f"so the modes' memory cannot differ), got {args.layers}")
    try:
        cfg = bench_config(args)
    except ValueError as problem:  # the heads follow --dim: one per 64, a kv head per 4 of them
        p.error(f"--dim: {args.dim} makes no model ({problem}); a multiple of 256 does")
    torch.manual_seed(0)
    if args.child:
        return child(args)
    rt = tdist.Runtime(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), backend="gloo")
    data = torch.randint(cfg.vocab_size, (args.steps, args.batch, args.seq_len + 1))
    models = {mode: model_in_mode(cfg, rt, mode) for mode in CHECKPOINTING_MODES}
    seconds = {mode: [] for mode in CHECKPOINTING_MODES}
    for _ in range(args.rounds):
        for mode, (model, optimizer) in models.items():
            train_steps(model, optimizer, data[:WARMUP])
            t0 = time.perf_counter()
            train_steps(model, optimizer, data)
            seconds[mode].append((time.perf_counter() - t0) / args.steps)
    print(f"activation_checkpointing: dim {args.dim}, {args.layers} layers, batch {args.batch} x seq {args.seq_len}, "
          f"{cfg.num_params() / 1e6:.1f}M parameters, fp32 on {torch.get_num_threads()} CPU thread(s), "
          f"{args.rounds} rounds of {args.steps} steps")
    for mode in ("selective", "full"):
        ratios = [a / b for a, b in zip(seconds[mode], seconds["none"])]
        print(f"  step time {mode}/none = {statistics.median(ratios):.3f} "
              f"(rounds: {', '.join(f'{r:.2f}' for r in ratios)}; none {statistics.median(seconds['none']):.3f} s)")
    rss = {mode: peak_rss(args, mode) for mode in (*CHECKPOINTING_MODES, "params-only")}
    estimate = {mode: estimate_memory(cfg, shards=1, batch_size=args.batch, seq_len=args.seq_len,
                                      activation_checkpointing=mode, mixed_precision=False) for mode in CHECKPOINTING_MODES}
    for mode in CHECKPOINTING_MODES:
        over = rss[mode] - rss["params-only"]
        print(f"  peak RSS {mode:<9} {rss[mode] / GIB:6.2f} GiB: {over / GIB:5.2f} GiB over the model and optimizer "
              f"alone; estimated activations {estimate[mode].activations / GIB:5.2f} GiB")
    for mode in ("none", "selective"):
        measured = rss[mode] - rss["full"]
        counted = estimate[mode].activations - estimate["full"].activations
        print(f"  peak RSS {mode} - full = {measured / GIB:.3f} GiB, estimate {counted / GIB:.3f} GiB "
              f"(measured/estimate {measured / counted:.2f})")
    print("  " + json.dumps({"step_time_ratio": {m: round(statistics.median(
        [a / b for a, b in zip(seconds[m], seconds["none"])]), 3) for m in ("selective", "full")},
        "peak_rss_gib": {m: round(v / GIB, 3) for m, v in rss.items()}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
