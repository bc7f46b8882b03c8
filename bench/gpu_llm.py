"""Tokens/s and MFU on one GPU at the Llama 3.1 8B layer shape: bf16 with full, selective and no
activation recompute, and float8 with selective recompute.

    python bench/gpu_llm.py --out gpu_llm.json [--layers 8 --batch 2 --seq-len 8192] [--no-compile]
    python bench/gpu_llm.py --dry-run --out /tmp/gpu_llm.json   # a tiny model on the CPU: checks the script

Each configuration trains in a `python -m trainer.llm` process of its own: the trainer's model,
FSDP2 units (--fsdp always: FSDP2 on a world of one, bf16 parameters, fp32 reduction), activation
checkpointing and float8 code, on synthetic tokens. An out-of-memory run then costs nothing to the
next one, and each peak is its own. Of each run's steps the first window (the first step compiles)
is warm-up; tokens/s and MFU cover the timed windows after it, read from the trainer's metrics
file. MFU is the trainer's: (6·N + attention FLOPs per token) × tokens/s / the GPU's peak dense
bf16 FLOP/s (config/instance_types.py), for float8 too, so the float8 row shows its gain as a
higher MFU. Peak GiB is torch.cuda.max_memory_allocated. The runs share one compile cache, and
a time budget (--budget-s) bounds the whole script: a configuration that no longer fits in it is
reported as skipped, with the reason, like float8 where the GPU or torchao lacks it. Beside each
peak stands config/memory.py's estimate for the same run.

Float8 needs torchao. torch 2.11 machines without it: torchao 0.17.0 is the release for torch
2.11 (torchao's compatibility table, pytorch/ao issue #2919: "0.17.0 | 2.11.0+"; its C++
extensions are ABI-stable from torch 2.11, and float8 training needs none of them). The float8
API the trainer calls (Float8LinearConfig, convert_to_float8_training,
precompute_float8_dynamic_scale_for_fsdp) is the same in 0.17.0 and in 0.18.0, the project's pin
for torch 2.13. Where there is network:

    pip download --no-deps --only-binary=:all: --python-version 3.12 \\
        --platform manylinux_2_28_x86_64 torchao==0.17.0 -d wheels/
    # torchao-0.17.0-cp310-abi3-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl (an abi3 wheel, any
    # CPython >= 3.10), sha256 87a418ce0ec064a821ceab83c921b501acef0ce9a6ccd1be358fcd16c3ae8c58

and on the GPU machine, without touching its site-packages:

    pip install --no-deps --target /tmp/torchao wheels/torchao-0.17.0-*.whl
    PYTHONPATH=/tmp/torchao python bench/gpu_llm.py --out gpu_llm.json

Without torchao the float8 row says it was skipped and why; the bf16 rows still run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from config import paths  # noqa: E402
from config.memory import GIB, estimate_memory  # noqa: E402
from config.models import MODELS, model_config  # noqa: E402
from config.options import non_negative_int, positive_int, timeout_seconds  # noqa: E402
from ops import proc  # noqa: E402
from trainer.cli import Parser  # noqa: E402

# Run order: the comparisons that matter most first, so that a tight budget drops the least.
CONFIGS = (("bf16", "full"), ("bf16", "selective"), ("float8", "selective"), ("bf16", "none"))
# What a configuration needs beyond its steps: imports, the process group, model build and a cold compile.
MIN_START_S = 45
RECOMPUTE = {"full": "full recompute", "selective": "selective recompute", "none": "no recompute"}


@dataclass
class Result:
    config: str
    precision: str
    activation_checkpointing: str
    ok: bool = False
    tokens_per_sec: float | None = None
    mfu: float | None = None
    peak_gib: float | None = None
    reserved_gib: float | None = None
    alloc_retries: int | None = None
    estimate_gib: float | None = None
    seconds: float | None = None
    why: str | None = None  # a skipped or failed configuration's reason


def label(precision: str, mode: str) -> str:
    return f"{precision}, {RECOMPUTE[mode]}"


def float8_unavailable() -> str | None:
    """Why the float8 configuration cannot run here (None when it can): the trainer's own refusal
    for the device, then torchao's import."""
    import torch

    from trainer.float8 import refusal

    if torch.cuda.is_available():
        problem = refusal("cuda", torch.cuda.get_device_capability(0), torch.cuda.get_device_name(0))
    else:
        problem = refusal("cpu")
    if problem:
        return problem
    try:
        import torchao
        from torchao.float8 import convert_to_float8_training  # noqa: F401
    except Exception as err:  # noqa: BLE001 (any import failure means the same thing here)
        return (f"torchao does not import ({type(err).__name__}: {err}); put a torchao wheel for this torch on "
                f"PYTHONPATH (see this script's docstring)")
    print(f"torchao {getattr(torchao, '__version__', '?')} from {Path(torchao.__file__).parent}")
    return None


def timed_summary(records: list[dict], window: int) -> dict:
    """Tokens/s and MFU over the timed windows (every window after the first): each window has
    the same steps, so the rate over all of them is the harmonic mean of the windows' rates."""
    timed = [r for r in records if r["step"] > window and r.get("tokens_per_sec")]
    if not timed:
        return {}
    out = {"tokens_per_sec": round(len(timed) / sum(1 / r["tokens_per_sec"] for r in timed), 1),
           "peak_gib": max(r["peak_mem_gib"] for r in records)}
    if all(r.get("mfu") for r in timed):
        out["mfu"] = round(len(timed) / sum(1 / r["mfu"] for r in timed), 4)
    if "reserved_gib" in records[-1]:
        out["reserved_gib"] = max(r["reserved_gib"] for r in records)
        out["alloc_retries"] = records[-1]["alloc_retries"]
    return out


def run_config(args, precision: str, mode: str, timeout: float, env: dict) -> Result:
    result = Result(label(precision, mode), precision, mode)
    with tempfile.TemporaryDirectory(prefix="gpu_llm-") as tmp:
        metrics = Path(tmp) / "metrics.jsonl"
        steps = args.window * (1 + args.timed_windows)
        argv = [sys.executable, "-m", "trainer.llm", "--model", args.model, "--layers", str(args.layers),
                "--seq-len", str(args.seq_len), "--batch-size", str(args.batch), "--steps", str(steps),
                "--log-every", str(args.window), "--metrics-file", str(metrics), "--fsdp", "always",
                "--activation-checkpointing", mode, "--loss-chunk-tokens", str(args.loss_chunk_tokens)]
        argv += ["--compile"] if args.compile else []
        argv += ["--float8"] if precision == "float8" else []
        t0 = time.monotonic()
        try:
            p = proc.run(argv, cwd=REPO, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            result.seconds, result.why = round(timeout, 1), f"did not finish within {timeout:.0f} s (the budget left)"
            return result
        result.seconds = round(time.monotonic() - t0, 1)
        records = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
        summary = timed_summary(records, args.window)
        if p.returncode != 0 or not summary:
            oom = "OutOfMemoryError" in p.stderr or "out of memory" in p.stderr
            tail = (p.stderr.strip() or p.stdout.strip()).splitlines()[-1:] or ["no output"]
            result.why = "out of memory" if oom else f"exit {p.returncode}: {tail[0][:300]}"
            # The trainer's own last words, for the reader of a failed run.
            print("\n".join(f"    | {line}" for line in p.stderr.strip().splitlines()[-12:]), flush=True)
            return result
    result.ok = True
    for key, value in summary.items():
        setattr(result, key, value)
    return result


def estimate_gib(args, mode: str, on_gpu: bool) -> float:
    """config/memory.py's estimate for the run, shown beside the measured peak: a configuration
    runs even where the estimate is above the GPU's memory (the estimate counts eager activations;
    compiled blocks keep fewer), and an out-of-memory run is reported as such."""
    cfg = model_config(args.model, n_layers=args.layers)
    return estimate_memory(cfg, shards=1, batch_size=args.batch, seq_len=args.seq_len, activation_checkpointing=mode,
                           mixed_precision=on_gpu, loss_chunk_tokens=args.loss_chunk_tokens,
                           async_checkpoints=False).total / GIB


def ratio(results: dict[str, Result], a: str, b: str, key: str) -> float | None:
    x, y = results.get(a), results.get(b)
    if x and y and x.ok and y.ok and getattr(x, key) and getattr(y, key):
        return round(getattr(x, key) / getattr(y, key), 3)
    return None


def table(results: list[Result]) -> str:
    def num(value, fmt):
        return "-" if value is None else format(value, fmt)
    lines = [f"{'config':<28} {'tokens/s':>10} {'MFU':>7} {'peak GiB':>9} {'estimate':>9}  note",
             f"{'-' * 28} {'-' * 10} {'-' * 7} {'-' * 9} {'-' * 9}  ----"]
    for r in results:
        mfu = None if r.mfu is None else 100 * r.mfu
        note = "" if r.ok else ("skipped: " if r.seconds is None else "failed: ") + (r.why or "")
        lines.append(f"{r.config:<28} {num(r.tokens_per_sec, ',.0f'):>10} {num(mfu, '.1f') + '%' if mfu else '-':>7} "
                     f"{num(r.peak_gib, '.2f'):>9} {num(r.estimate_gib, '.2f'):>9}  {note}")
    return "\n".join(lines)


def write_json(path: Path, payload: dict) -> None:
    """All or nothing: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    tmp.replace(path)


def parse_args(argv=None) -> argparse.Namespace:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=None, help="write the results here as JSON")
    p.add_argument("--dry-run", action="store_true",
                   help="the tiny model at seq 128 on whatever device there is, without compile: checks the script")
    p.add_argument("--model", default="llama3.1-8b", choices=sorted(MODELS), help="a trainer.llm --model whose layer shape is measured")
    p.add_argument("--layers", type=positive_int, default=8, help="decoder layers (the 8B has 32; 8 at batch 2 fit an H100 without recompute, bench/RESULTS.md)")
    p.add_argument("--batch", type=positive_int, default=2)
    p.add_argument("--seq-len", type=positive_int, default=8192)
    p.add_argument("--loss-chunk-tokens", type=non_negative_int, default=0, help="trainer.llm --loss-chunk-tokens (0: plain loss)")
    p.add_argument("--window", type=positive_int, default=5, help="steps per metrics window; the first window is warm-up")
    p.add_argument("--timed-windows", type=positive_int, default=2, help="windows timed after the warm-up one")
    p.add_argument("--no-compile", dest="compile", action="store_false", help="eager (float8 is slow without compile)")
    p.add_argument("--budget-s", type=timeout_seconds, default=270.0, help="wall-clock bound of the whole script")
    args = p.parse_args(argv)
    if args.dry_run:
        args.model, args.layers, args.batch, args.seq_len, args.compile = "tiny", 2, 2, 128, False
        args.window, args.timed_windows = 2, 1
    if args.out:
        try:  # before minutes of GPU time, not after them
            paths.output_file(args.out)
        except paths.PathProblem as problem:
            p.error(f"--out: {problem}")
    return args


def run_all(args, on_gpu: bool, no_float8: str | None, cache: str, deadline: float) -> dict[str, Result]:
    """Each configuration in CONFIGS order, measured or skipped with its reason."""
    # The repository first, then whatever PYTHONPATH brings (a torchao unpacked beside torch).
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=pythonpath)
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", cache)
    env.setdefault("TRITON_CACHE_DIR", os.path.join(cache, "triton"))
    results: dict[str, Result] = {}
    for precision, mode in CONFIGS:
        key = f"{precision}/{mode}"
        left = deadline - time.monotonic()
        if precision == "float8" and no_float8:
            results[key] = Result(label(precision, mode), precision, mode, why=no_float8)
        elif left < MIN_START_S:
            results[key] = Result(label(precision, mode), precision, mode,
                                  why=f"{left:.0f} s of the --budget-s {args.budget_s:.0f} left")
        else:
            results[key] = run_config(args, precision, mode, left, env)
        results[key].estimate_gib = round(estimate_gib(args, mode, on_gpu), 2)
        r = results[key]
        state = (f"{r.tokens_per_sec:,.0f} tokens/s, peak {r.peak_gib:.1f} GiB in {r.seconds} s" if r.ok
                 else f"not measured: {r.why}")
        print(f"  {r.config}: {state}", flush=True)
    return results


def main(argv=None) -> int:
    args = parse_args(argv)
    deadline = time.monotonic() + args.budget_s
    import torch

    on_gpu = torch.cuda.is_available()
    if not on_gpu and not args.dry_run:
        print("gpu_llm: skipped, no CUDA device on this machine (--dry-run runs a tiny model on the CPU)")
        return 0
    device = torch.cuda.get_device_name(0) if on_gpu else "CPU"
    print(f"gpu_llm: {device}, torch {torch.__version__}; {args.model} shape, {args.layers} layers, "
          f"batch {args.batch} x seq {args.seq_len}, compile {args.compile}, loss chunk {args.loss_chunk_tokens}; "
          f"{args.window} warm-up + {args.window * args.timed_windows} timed steps per configuration"
          + ("" if on_gpu else "; on a CPU the trainer computes in fp32, so the bf16 rows are fp32 there"), flush=True)
    no_float8 = float8_unavailable()
    with tempfile.TemporaryDirectory(prefix="gpu_llm-compile-") as cache:
        results = run_all(args, on_gpu, no_float8, cache, deadline)
    ordered = [results[k] for k in ("bf16/full", "bf16/selective", "bf16/none", "float8/selective")]
    ratios = {"tokens/s bf16 selective / bf16 full": ratio(results, "bf16/selective", "bf16/full", "tokens_per_sec"),
              "tokens/s bf16 none / bf16 full": ratio(results, "bf16/none", "bf16/full", "tokens_per_sec"),
              "tokens/s float8 selective / bf16 selective": ratio(results, "float8/selective", "bf16/selective",
                                                                  "tokens_per_sec"),
              "peak bf16 selective / bf16 full": ratio(results, "bf16/selective", "bf16/full", "peak_gib")}
    print(table(ordered))
    for name, value in ratios.items():
        print(f"  {name}: {'-' if value is None else value}")
    if args.out:
        write_json(args.out, {
            "device": device, "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
            "shape": {"model": args.model, "layers": args.layers, "batch": args.batch, "seq_len": args.seq_len,
                      "compile": args.compile, "loss_chunk_tokens": args.loss_chunk_tokens,
                      "warmup_steps": args.window, "timed_steps": args.window * args.timed_windows},
            "results": [asdict(r) for r in ordered], "ratios": ratios})
        print(f"gpu_llm: wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
