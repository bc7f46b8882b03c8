"""Asynchronous against synchronous DCP save: how long the training loop is blocked.

    python bench/dcp_async.py [--dim 768 --layers 6] [--saves 3]

Both modes go through the trainer's CheckpointManager on the same FSDP2 model in one process.
Blocked time is what the loop waits for: the whole save when synchronous; when asynchronous, the
save call plus the wait for staging before the next optimizer step (the next forward and
backward run in between, as in training). Prints the ratio async / sync (target <= 0.1).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from config import paths  # noqa: E402
from trainer import dist as tdist  # noqa: E402
from trainer.checkpoint import CheckpointConfig, CheckpointManager, ModelAndOptimizer  # noqa: E402
from trainer.llm import build_model  # noqa: E402
from trainer.model import ModelConfig, loss_fn  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--saves", type=int, default=3)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    args = p.parse_args()
    if args.dir:
        try:
            paths.output_dir(args.dir)
        except paths.PathProblem as problem:
            p.error(f"--dir: {problem}")
    rt = tdist.init(checkpoint_group=True)
    cfg = ModelConfig(dim=args.dim, n_layers=args.layers, n_heads=args.dim // 64, n_kv_heads=max(1, args.dim // 256),
                      vocab_size=32000, ffn_dim=int(args.dim * 8 / 3) // 64 * 64, max_seq_len=args.seq_len)
    model = build_model(cfg, rt)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    n_params = sum(p.numel() for p in model.parameters())

    def step(ckpt=None):
        x = torch.randint(cfg.vocab_size, (2, args.seq_len), device=rt.device)
        loss_fn(model(x), x).backward()
        t = time.perf_counter()
        if ckpt:
            ckpt.wait_staging()
        waited = time.perf_counter() - t
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return waited

    step()  # optimizer state exists before the first save, as in training
    results = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for mode in ("sync", "async"):
            ckpt = CheckpointManager(CheckpointConfig(str(Path(tmp) / mode), every=1, keep=1, async_save=mode == "async"),
                                     rt, {"app": ModelAndOptimizer(model, optimizer)})
            blocked = []
            for i in range(1, args.saves + 2):  # the first save of each mode warms up and is dropped
                if rt.device.type == "cuda":
                    torch.cuda.synchronize()
                t = time.perf_counter()
                ckpt.save(i)
                spent = time.perf_counter() - t
                spent += step(ckpt)  # the next step's forward/backward overlap the background copy
                ckpt.wait()  # let the write finish outside the timing, so saves do not pile up
                if i > 1:
                    blocked.append(spent)
            ckpt.close()
            results[mode] = statistics.median(blocked)
    if rt.is_main:
        print(f"dcp_async: {n_params / 1e6:.0f}M parameters (+AdamW state) on {rt.device.type}, "
              f"median of {args.saves} saves")
        print(f"  sync save blocks the loop   {results['sync'] * 1000:8.1f} ms")
        print(f"  async save blocks the loop  {results['async'] * 1000:8.1f} ms")
        print(f"  ratio async/sync = {results['async'] / results['sync']:.3f} (target <= 0.1)")
    tdist.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
