"""Preemption: the time a worker needs from SIGTERM to a complete checkpoint, against the time its pod gets.

    python bench/preemption.py [--repeats 2]

First, for every preset each environment renders, the estimate `ops plan` prints and the pods are
given (config/checkpoint_time.py): checkpoint size, one write at full FSx throughput, the worst
case for a worker to stop (two steps and two writes: an asynchronous save in flight, then the
blocking one), torchrun's shutdown timeout and terminationGracePeriodSeconds.
Then, measured here: the llm-tiny workload under the pod's command (trainer.launch: torchrun, 2 CPU
ranks), SIGTERM to it at step 10 as the kubelet sends it; seconds from the signal to the checkpoint
saved and to the command's exit, with the exit status the pod would show, against llm-tiny's grace
period.
"""

from __future__ import annotations

import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.recovery import running  # noqa: E402
from config.checkpoint_time import stop_budget  # noqa: E402
from config.options import positive_int  # noqa: E402
from config.presets import PRESETS  # noqa: E402
from k8s.pods.pytorchjob import presets_for  # noqa: E402
from ops.envconfig import load, read_environments  # noqa: E402
from trainer.cli import Parser  # noqa: E402


def table() -> list[str]:
    rows = ["| environment | preset | checkpoint | one write | worker worst case | torchrun shutdown timeout | grace period |",
            "|---|---|---|---|---|---|---|"]
    for env_name in read_environments():
        env = load(env_name)
        for preset in presets_for(env):
            budget = stop_budget(preset, env.nodegroup(preset.nodegroup).instance_type, env.fsx)
            est = budget.estimate
            size = f"{est.bytes / 1e9:,.1f} GB" if est else "no estimate"
            write = f"{est.write_s:,.0f} s" if est else "-"
            worst = f"{budget.worker_s:,.0f} s" if est else "-"
            rows.append(f"| {env_name} | {preset.name} | {size} | {write} | {worst} | {budget.shutdown_timeout_s:,} s | "
                        f"{budget.grace_s:,} s |")
    return rows


def one_preemption() -> tuple[float, float, int]:
    """(seconds to the saved checkpoint, seconds to the pod command's exit, its exit status)."""
    preset = PRESETS["llm-tiny"]
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "trainer.launch", "--standalone", f"--nproc-per-node={preset.local_nproc}",
                "--max-restarts=0", "--monitor-interval=0.2", "-m", preset.module,
                *preset.workload_args(tmp), "--steps", "5000", "--log-every", "10"]
        with running(argv) as (proc, out):
            out.wait_for(r"^step\s+10 ")
            signalled = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            saved = out.wait_for(r"SIGTERM: checkpoint saved", after=signalled)
            rc = proc.wait(timeout=300)
            return saved - signalled, time.monotonic() - signalled, rc


def main(argv=None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=positive_int, default=2)
    args = p.parse_args(argv)
    print("\n".join(table()))
    runs = [one_preemption() for _ in range(args.repeats)]
    envs = [load(name) for name in read_environments()]
    preset = PRESETS["llm-tiny"]
    grace = min(stop_budget(preset, env.nodegroup(preset.nodegroup).instance_type, env.fsx).grace_s for env in envs)
    saved = [r[0] for r in runs]
    exited = [r[1] for r in runs]
    print(f"\nllm-tiny here, SIGTERM to the pod's command at step 10 ({args.repeats} runs): checkpoint saved after "
          f"median {statistics.median(saved):.2f} s, the command exited after median {statistics.median(exited):.2f} s "
          f"with status {sorted({r[2] for r in runs})}; its grace period is {grace} s "
          f"({grace / max(exited):.0f}x the slowest exit)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
