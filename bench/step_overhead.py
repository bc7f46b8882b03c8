"""Trainer step overhead: trainer.llm's loop against bare PyTorch loops of the same model.

    python bench/step_overhead.py [--dim 256 --layers 2 --seq-len 128 --batch 4] [--rounds 5]

Everything runs in this one process, alternating within each round, and each ratio is the
median over rounds of that round's ratio: on a shared machine a slow round then slows both sides
of its ratio instead of skewing one median. A bare loop is forward, loss, backward, gradient clipping and AdamW on tensors already in
memory; the trainer adds its data pipeline, schedule, metrics, checkpoint polling and preemption
check. Ratios = trainer tokens/s / bare tokens/s (target >= 0.97):
- one process: the trainer as it runs on one process (no FSDP2) against a plain loop of the
  unwrapped model, and against a plain loop of transformers' LlamaForCausalLM of the same shape
  (where transformers is installed);
- FSDP2: the trainer with --fsdp always against a bare loop of the FSDP2-wrapped model;
- mixture of experts: the same one-process comparison for a Mixtral-style model (8 experts,
  top-2) with the dense model's dimensions.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from config.models import MODELS, ModelConfig  # noqa: E402
from config.options import build, positive_int  # noqa: E402
from config.workloads.llm import FsdpConfig, LlmJobConfig  # noqa: E402
from trainer import dist as tdist  # noqa: E402
from trainer import llm  # noqa: E402
from trainer.cli import Parser  # noqa: E402
from trainer.llm_job import resolve  # noqa: E402
from trainer.parallel import build_decoder  # noqa: E402

WARMUP = 5


def timed_loop(model, step_loss, cfg: ModelConfig, device, batch: int, seq: int, steps: int) -> float:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                  fused=device.type == "cuda")
    data = torch.randint(cfg.vocab_size, (steps + WARMUP, batch, seq + 1), device=device)
    for i in range(steps + WARMUP):
        if i == WARMUP:
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
        loss = step_loss(model, data[i])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    loss.item()  # wait for the device
    return steps * batch * seq / (time.perf_counter() - t0)


def bare_loop(cfg: ModelConfig, rt, batch: int, seq: int, steps: int, fsdp: str) -> float:
    model = build_decoder(cfg, rt, rope_length=seq, fsdp=FsdpConfig(mode=fsdp))
    # The model's own loss (cross-entropy, plus the balancing loss of a mixture of experts), as
    # the trainer computes it.
    return timed_loop(model, lambda m, x: m(x[:, :-1], x[:, 1:]), cfg, rt.device, batch, seq, steps)


def transformers_loop(cfg: ModelConfig, rt, batch: int, seq: int, steps: int) -> float | None:
    from trainer.torchvision_compat import prepare
    prepare()  # transformers imports torchvision when it is installed
    try:
        import transformers
    except ImportError:
        return None
    from trainer.hf_config import to_hf_config
    hf_cfg = transformers.AutoConfig.for_model(**to_hf_config(cfg, "float32"))
    model = transformers.AutoModelForCausalLM.from_config(hf_cfg, dtype=torch.float32).to(rt.device).train()
    return timed_loop(model, lambda m, x: m(input_ids=x[:, :-1], labels=x[:, :-1]).loss, cfg, rt.device, batch, seq,
                      steps)


def trainer_loop(model: str, batch: int, seq: int, steps: int, rt, fsdp: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / "m.jsonl"
        # Built, not parsed: --model's choices are the table as imported, without the bench's models.
        job = resolve(build(LlmJobConfig, {"model": model, "steps": steps + WARMUP, "batch_size": batch,
                                           "seq_len": seq, "log_every": WARMUP, "warmup_steps": 1, "lr": 1e-4,
                                           "metrics_file": str(metrics), "fsdp": fsdp}))
        llm.train(job, rt, global_batch=batch * rt.world_size)
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
    # The first window holds the warm-up steps; the rest is steady state.
    steady = [r for r in records if r["step"] > WARMUP]
    return statistics.mean(r["tokens_per_sec_per_device"] for r in steady)


def main(argv=None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--dim", type=positive_int, default=256, help="model width; its heads are 128 wide")
    p.add_argument("--layers", type=positive_int, default=2)
    p.add_argument("--vocab", type=positive_int, default=8192)
    p.add_argument("--seq-len", type=positive_int, default=128)
    p.add_argument("--batch", type=positive_int, default=4)
    p.add_argument("--steps", type=positive_int, default=20)
    p.add_argument("--rounds", type=positive_int, default=5)
    args = p.parse_args(argv)
    try:
        dense = ModelConfig(dim=args.dim, n_layers=args.layers, n_heads=max(1, args.dim // 128),
                            n_kv_heads=max(1, args.dim // 512), vocab_size=args.vocab,
                            ffn_dim=int(args.dim * 8 / 3) // 64 * 64, max_seq_len=args.seq_len)
    except ValueError as problem:  # the heads follow --dim: one per 128, a kv head per 4 of them
        p.error(f"--dim: {args.dim} makes no model ({problem}); a multiple of 512 does")
    moe = replace(dense, ffn_dim=dense.ffn_dim // 2, n_experts=8, experts_per_token=2, router_aux_loss_coef=0.02,
                  family="mixtral")
    MODELS.update({"bench": dense, "bench-moe": moe})  # the trainer resolves --model from the table
    rt = tdist.init()
    shape = (args.batch, args.seq_len, args.steps)
    runs = {name: [] for name in ("plain", "transformers", "trainer", "bare_fsdp", "trainer_fsdp", "plain_moe",
                                  "trainer_moe")}
    for _ in range(args.rounds):
        runs["plain"].append(bare_loop(dense, rt, *shape, fsdp="auto"))
        runs["transformers"].append(transformers_loop(dense, rt, *shape))
        runs["trainer"].append(trainer_loop("bench", *shape, rt, fsdp="auto"))
        runs["bare_fsdp"].append(bare_loop(dense, rt, *shape, fsdp="always"))
        runs["trainer_fsdp"].append(trainer_loop("bench", *shape, rt, fsdp="always"))
        runs["plain_moe"].append(bare_loop(moe, rt, *shape, fsdp="auto"))
        runs["trainer_moe"].append(trainer_loop("bench-moe", *shape, rt, fsdp="auto"))
    if rt.is_main:
        def ratio(a: str, b: str) -> str:
            pairs = [x / y for x, y in zip(runs[a], runs[b]) if x is not None and y is not None]
            return f"{statistics.median(pairs):.3f} (rounds: {', '.join(f'{r:.2f}' for r in pairs)})"

        print(f"step_overhead: dim {args.dim}, {args.layers} layers, batch {args.batch} x seq {args.seq_len} "
              f"on {rt.device.type}, {args.rounds} rounds of {args.steps} steps")
        for name, values in runs.items():
            if None not in values:
                print(f"  {name:<13} median {statistics.median(values):10,.0f} tokens/s   "
                      f"(rounds: {', '.join(f'{x:,.0f}' for x in values)})")
        print(f"  one process: trainer/plain loop = {ratio('trainer', 'plain')}  target >= 0.97")
        if None not in runs["transformers"]:
            print(f"  one process: trainer/transformers loop = {ratio('trainer', 'transformers')}")
        print(f"  FSDP2: trainer/bare FSDP2 loop = {ratio('trainer_fsdp', 'bare_fsdp')}  target >= 0.97")
        print(f"  one process: FSDP2-wrapped/unwrapped bare loop = {ratio('bare_fsdp', 'plain')}")
        print(f"  MoE, one process: trainer/plain loop = {ratio('trainer_moe', 'plain_moe')}  target >= 0.97")
    tdist.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
