"""Launch to first step: how long a pod's torchrun takes from its start to trainer.llm's first step.

    python bench/launch_to_first_step.py [--repeats 3] [--nproc 2] [--compile]

Each repeat starts `torchrun --standalone --nproc-per-node=N -m trainer.llm` (tiny model, CPU,
no checkpoints) and timestamps its output: the trainer's first line (imports, process group and
model built) and the line of step 1 (its forward, backward and optimizer step done; with
--compile, torch.compile's warm-up too). In the same run, fresh interpreters time `import torch`
and `import trainer.llm`: the difference is what the trainer's own imports add on the start-up
path. Each figure is the median of the repeats; imports and launches alternate, so a busy moment on
a shared machine slows both. With --compile, each repeat after the first finds the compile cache
of the one before it, as a restarted pod does with its cache on FSx (k8s/pods/pytorchjob.py
compile_cache_env): the first repeat is then the cold compile, printed apart.
"""

from __future__ import annotations

import os
import re
import selectors
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from config.options import positive_int  # noqa: E402
from ops.proc import run as proc_run, start as proc_start, stop as proc_stop  # noqa: E402
from trainer.cli import Parser  # noqa: E402

TIMEOUT_S = 600
FIRST_LINE = re.compile(r"^Model ")
FIRST_STEP = re.compile(r"^step +1 \|")


def timed_lines(cmd: list[str], env: dict, patterns: dict[str, re.Pattern]) -> dict[str, float]:
    """Seconds from the start of `cmd` to the first output line matching each pattern; the
    command runs to its end (non-zero exit or timeout: SystemExit with its output's tail)."""
    start = time.perf_counter()
    proc = proc_start(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: dict[str, float] = {}
    tail: list[str] = []
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    try:
        while True:
            left = TIMEOUT_S - (time.perf_counter() - start)
            if left <= 0:
                raise SystemExit(f"launch_to_first_step: no exit after {TIMEOUT_S} s:\n" + "".join(tail[-20:]))
            if not selector.select(timeout=left):
                continue
            line = proc.stdout.readline()
            if not line:
                break
            tail.append(line)
            for name, pattern in patterns.items():
                if name not in seen and pattern.search(line):
                    seen[name] = time.perf_counter() - start
        rc = proc.wait(timeout=max(1.0, TIMEOUT_S - (time.perf_counter() - start)))
    finally:
        proc_stop(proc)  # a no-op once it has ended; else its whole group goes
    if rc != 0 or len(seen) != len(patterns):
        raise SystemExit(f"launch_to_first_step: {' '.join(cmd[:6])} ... exited {rc}, missing "
                         f"{sorted(set(patterns) - set(seen))}:\n" + "".join(tail[-20:]))
    return seen


def import_time(module: str, env: dict) -> float:
    """Seconds a fresh interpreter takes to start and import `module`."""
    start = time.perf_counter()
    done = proc_run([sys.executable, "-c", f"import {module}"], cwd=REPO, env=env, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise SystemExit(f"launch_to_first_step: import {module} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def main(argv=None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=positive_int, default=3)
    p.add_argument("--nproc", type=positive_int, default=2)
    p.add_argument("--compile", action="store_true", help="trainer.llm --compile, the compile cache kept between repeats")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO),
               "TORCHINDUCTOR_CACHE_DIR": f"{cache}/inductor", "TRITON_CACHE_DIR": f"{cache}/triton"}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.nproc}",
               "-m", "trainer.llm", "--model", "tiny", "--steps", "2", "--batch-size", "2", "--seq-len", "32",
               "--log-every", "1", *(["--compile"] if args.compile else [])]
        runs, torch_s, trainer_s = [], [], []
        for _ in range(args.repeats):
            torch_s.append(import_time("torch", env))
            trainer_s.append(import_time("trainer.llm", env))
            runs.append(timed_lines(cmd, env, {"first line": FIRST_LINE, "first step": FIRST_STEP}))

    def med(values):
        return f"{statistics.median(values):6.2f} s"

    warm = runs[1:] if args.compile and len(runs) > 1 else runs
    print(f"launch_to_first_step: trainer.llm tiny on {args.nproc} CPU rank(s) under torchrun, "
          f"median of {len(warm)} launch(es){' with --compile' if args.compile else ''}")
    print(f"  import torch in a fresh interpreter        {med(torch_s)}")
    print(f"  import trainer.llm in a fresh interpreter  {med(trainer_s)} "
          f"(the trainer's own imports add {statistics.median(t - s for t, s in zip(trainer_s, torch_s)):.2f} s)")
    print(f"  launch to the trainer's first line         {med([r['first line'] for r in warm])}")
    print(f"  launch to step 1 done                      {med([r['first step'] for r in warm])}")
    if warm is not runs:
        print(f"  the first launch, compiling into an empty cache: step 1 done after {runs[0]['first step']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
