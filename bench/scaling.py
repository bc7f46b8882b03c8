"""Scaling of the vision workload: vision-tiny at 1 and 2 processes, and the scaling figure.

    python bench/scaling.py [--epochs 3] [--output bench/scaling-vision-tiny.png]

Runs the vision-tiny preset's own workload arguments under torchrun (--standalone) once per
process count, one thread per process (OMP_NUM_THREADS=1) so that one process is one core's
worth of device. Every run trains the preset's global batch with the preset's micro-batch per
rank: more processes accumulate fewer micro-batches per step, and an epoch's work is shared.
Each run's median epoch throughput (the first epoch left out) goes into `trainer.plot scaling`,
which draws throughput and efficiency against the ideal line; the ratios printed come from
these two runs of this one invocation.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from config import paths  # noqa: E402
from config.options import positive_int  # noqa: E402
from config.presets import get_preset  # noqa: E402
from ops import proc  # noqa: E402
from ops.local import child_env  # noqa: E402
from trainer.cli import Parser  # noqa: E402
from trainer.plot import plot_scaling, run_point, scaling_table  # noqa: E402


def run(nproc: int, root: Path, epochs: int) -> Path:
    preset = get_preset("vision-tiny")
    args = preset.workload_args(str(root / f"n{nproc}"))
    args[args.index("--epochs") + 1] = str(epochs)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "--module", preset.module, *args]
    env = dict(child_env(), OMP_NUM_THREADS="1")
    p = proc.run(argv, cwd=REPO, env=env, timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"vision-tiny on {nproc} processes failed (exit {p.returncode}):\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return Path(preset.job_dir(str(root / f"n{nproc}"))) / "metrics.jsonl"


def main(argv=None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=positive_int, default=3, help="epochs per run (the first is left out of the median)")
    p.add_argument("--output", default=str(REPO / "bench" / "scaling-vision-tiny.png"))
    args = p.parse_args(argv)
    try:  # before minutes of training, not after
        paths.output_file(args.output)
    except paths.PathProblem as problem:
        p.error(f"--output: {problem}")
    with tempfile.TemporaryDirectory(prefix="scaling-") as tmp:
        table = scaling_table([run_point(run(n, Path(tmp), args.epochs)) for n in (1, 2)])
    plot_scaling(table, Path(args.output))
    w = get_preset("vision-tiny").workload
    print(f"vision-tiny (resnet18, 32x32 synthetic, micro-batch {w.batch_size} per process, global batch "
          f"{w.global_batch_size}), torch {_torch()} on {os.cpu_count()} cores")
    for row in table:
        print(f"  {row['devices']} process(es): {row['images_per_sec']:8.1f} images/s, epoch {row['epoch_time_s']:.1f} s,"
              f" efficiency {100 * row['efficiency']:.0f}%")
    one, two = table
    print(f"  throughput 2 / 1 processes = {two['images_per_sec'] / one['images_per_sec']:.2f} (ideal 2.00)")
    print(f"  epoch time 2 / 1 processes = {two['epoch_time_s'] / one['epoch_time_s']:.2f} (ideal 0.50)")
    print(f"  figure: {args.output}")
    return 0


def _torch() -> str:
    import torch
    return torch.__version__


if __name__ == "__main__":
    raise SystemExit(main())
