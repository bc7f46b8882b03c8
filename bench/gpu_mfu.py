"""MFU of a Llama-3-8B-shaped model on one GPU at seq 8192, with as many layers as fit.

    python bench/gpu_mfu.py [--configs 12:1 8:2 14:1:ac] [--steps 15]

Each configuration runs `python -m trainer.llm` in its own process (an out-of-memory run then
costs nothing to the next one) and the MFU of the last logging window is read back from its
metrics file, so compilation and warm-up stay out of the figure. The trainer computes MFU as
(6·N + attention FLOPs per token) × tokens/s / the GPU's peak dense bf16 FLOPs from
config/instance_types.py. Skips with a message on machines without CUDA.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from config.options import non_negative_int, positive_int, timeout_seconds  # noqa: E402
from ops import proc  # noqa: E402
from trainer.cli import Parser  # noqa: E402


def run_config(layers: int, batch: int, compile_: bool, ac: bool, steps: int, timeout: float,
               loss_chunk_tokens: int = 0, alloc_conf: str | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / "m.jsonl"
        argv = [sys.executable, "-m", "trainer.llm", "--model", "llama3.1-8b", "--layers", str(layers),
                "--seq-len", "8192", "--batch-size", str(batch), "--steps", str(steps), "--log-every", "5",
                "--warmup-steps", "2", "--metrics-file", str(metrics)]
        argv += ["--compile"] if compile_ else []
        argv += ["--activation-checkpointing"] if ac else []
        argv += ["--loss-chunk-tokens", str(loss_chunk_tokens)] if loss_chunk_tokens else []
        env = dict(os.environ, PYTHONPATH=str(REPO))
        if alloc_conf is not None:
            env["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf
        try:
            p = proc.run(argv, cwd=REPO, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"ok": False, "why": f"timeout {timeout:g}s"}
        records = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
        if p.returncode != 0 or len(records) < 2:
            oom = "OutOfMemoryError" in p.stderr or "CUDA out of memory" in p.stderr
            tail = p.stderr.strip().splitlines()[-1:] or ["?"]
            return {"ok": False, "why": "out of memory" if oom else tail[0][:200]}
        last = records[-1]
        return {"ok": True, "mfu": last["mfu"], "tokens_per_sec": last["tokens_per_sec"],
                "peak_mem_gib": last["peak_mem_gib"], "loss": last["loss"]}


def run_spec(text: str) -> str:
    """One --configs entry, checked here: main reads it only on a GPU, after the runs before it."""
    parts = text.split(":")
    try:
        numbers = len(parts) in (2, 3) and positive_int(parts[0]) and positive_int(parts[1])
    except (ValueError, argparse.ArgumentTypeError):
        numbers = False
    if not numbers or parts[2:] not in ([], ["ac"]):
        raise argparse.ArgumentTypeError(f"{text!r} is not LAYERS:BATCH[:ac] (two positive whole numbers, "
                                         "then ac for activation checkpointing: 8:2 or 8:2:ac)")
    return text


def main(argv=None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--configs", nargs="+", type=run_spec, default=["13:1", "12:1", "10:2", "8:2", "8:1"],
                   help="LAYERS:BATCH[:ac] per run; larger first, an out-of-memory run is reported and skipped")
    p.add_argument("--steps", type=positive_int, default=15)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--timeout", type=timeout_seconds, default=240, help="seconds per run")
    p.add_argument("--loss-chunk-tokens", type=non_negative_int, default=0,
                   help="pass through to trainer.llm (0 = plain loss)")
    p.add_argument("--alloc-conf", default="expandable_segments:True",
                   help="PYTORCH_CUDA_ALLOC_CONF for the runs ('' = the allocator's defaults)")
    args = p.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("gpu_mfu: skipped, no CUDA device on this machine")
        return 0
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB")
    best = None
    for spec in args.configs:
        parts = spec.split(":")
        layers, batch, ac = int(parts[0]), int(parts[1]), len(parts) > 2 and parts[2] == "ac"
        r = run_config(layers, batch, not args.no_compile, ac, args.steps, args.timeout,
                       args.loss_chunk_tokens, args.alloc_conf)
        tag = (f"layers={layers} batch={batch} seq=8192 compile={not args.no_compile} ac={ac} "
               f"loss_chunk={args.loss_chunk_tokens} alloc={args.alloc_conf!r}")
        if r["ok"]:
            print(f"{tag}: MFU {100 * r['mfu']:.1f}% | {r['tokens_per_sec']:,.0f} tok/s | "
                  f"peak {r['peak_mem_gib']:.1f} GiB | loss {r['loss']}", flush=True)
            if best is None or r["mfu"] > best[1]["mfu"]:
                best = (tag, r)
        else:
            print(f"{tag}: did not run ({r['why']})", flush=True)
    if best:
        print(f"best: {best[0]}: MFU {100 * best[1]['mfu']:.1f}% (target >= 45%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
