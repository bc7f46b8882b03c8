"""Trainer step overhead: trainer.llm's loop against a bare PyTorch loop of the same model.

    python bench/step_overhead.py [--dim 512 --layers 4 --seq-len 256 --batch 4] [--rounds 3]

Both run in this one process on the same FSDP2-sharded model shape, alternating, so machine
noise hits both alike. The bare loop is forward, loss, backward, gradient clipping, AdamW on
tensors already in memory; the trainer adds its data pipeline, schedule, metrics, checkpoint
polling and preemption check. Ratio = trainer tokens/s / bare tokens/s (target >= 0.97).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from trainer import dist as tdist  # noqa: E402
from trainer import llm  # noqa: E402
from trainer.model import MODEL_PRESETS, ModelConfig, loss_fn  # noqa: E402


def bare_loop(cfg: ModelConfig, rt, batch: int, seq: int, steps: int, warmup: int) -> float:
    model = llm.build_model(cfg, rt, compile=False, activation_checkpointing=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                  fused=rt.device.type == "cuda")
    data = torch.randint(cfg.vocab_size, (steps + warmup, batch, seq + 1), device=rt.device)
    for i in range(steps + warmup):
        if i == warmup:
            if rt.device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
        x = data[i]
        loss = loss_fn(model(x[:, :-1]), x[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    loss.item()  # wait for the device
    return steps * batch * seq / (time.perf_counter() - t0)


def trainer_loop(batch: int, seq: int, steps: int, warmup: int, rt) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / "m.jsonl"
        args, mcfg = llm.parse_args(["--model", "bench", "--steps", str(steps + warmup), "--batch-size", str(batch),
                                     "--seq-len", str(seq), "--log-every", str(warmup), "--warmup-steps", "1",
                                     "--lr", "1e-4", "--metrics-file", str(metrics)])
        llm.train(args, mcfg, rt)
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
    # The first window holds the warm-up steps; the rest is steady state.
    steady = [r for r in records if r["step"] > warmup]
    return statistics.mean(r["tokens_per_sec_per_device"] for r in steady)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    cfg = ModelConfig(dim=args.dim, n_layers=args.layers, n_heads=max(1, args.dim // 128), n_kv_heads=max(1, args.dim // 512),
                      vocab_size=args.vocab, ffn_dim=int(args.dim * 8 / 3) // 64 * 64, max_seq_len=args.seq_len)
    MODEL_PRESETS["bench"] = cfg  # the trainer's --model reads the preset table
    rt = tdist.init()
    warmup = 5
    bare, trainer = [], []
    for _ in range(args.rounds):
        bare.append(bare_loop(cfg, rt, args.batch, args.seq_len, args.steps, warmup))
        trainer.append(trainer_loop(args.batch, args.seq_len, args.steps, warmup, rt))
    if rt.is_main:
        b, t = statistics.median(bare), statistics.median(trainer)
        print(f"step_overhead: dim {args.dim}, {args.layers} layers, batch {args.batch} x seq {args.seq_len} "
              f"on {rt.device.type}, median of {args.rounds} rounds of {args.steps} steps")
        print(f"  bare loop  {b:12,.0f} tokens/s   (rounds: {', '.join(f'{x:,.0f}' for x in bare)})")
        print(f"  trainer    {t:12,.0f} tokens/s   (rounds: {', '.join(f'{x:,.0f}' for x in trainer)})")
        print(f"  ratio trainer/bare = {t / b:.3f} (target >= 0.97)")
    tdist.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
