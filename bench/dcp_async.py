"""Checkpoint saves against a bare `dcp.save`, and how long each blocks the training loop.

    python bench/dcp_async.py [--dim 768 --layers 6] [--rounds 5] [--dir DIR]

One process, one FSDP2 model with its AdamW state, and in each round, in an order that rotates from
round to round, four measurements of the same state:
- `dcp.save` of get_state_dict(model, optimizer), the bare call a hand-written loop makes;
- a synchronous save through the trainer's CheckpointManager (keep 1, so each save retires the
  previous checkpoint): target <= 1.1 x dcp.save. The `dcp.save` the manager makes inside it is
  timed too: the rest is the manager's own cost (lease check, COMPLETE marker, hand-off of
  retention), a difference taken within one call and so free of the noise between two calls,
  which on a machine whose disk and cores others use swings a side-by-side ratio from 0.4 to 1.8;
- an asynchronous save: the time the loop is blocked, the save call plus the wait for staging
  before the next optimizer step (the next forward and backward run in between, as in training):
  target <= 0.1 x the synchronous save;
- the retention stall on the training thread: deleting one checkpoint there (what the trainer did
  before deletions moved to a background thread) against the finalisation call that retires it
  now (COMPLETE marker, hand-off to trainer/retention.py).
Before each measurement the page cache is flushed (os.sync) and background deletions have ended,
so no save pays for another's writes. Each ratio is the median of the rounds' own ratios. The
first round warms up and is dropped. On a shared machine whose cores are busy, wall times wait for
a core; the process's CPU time of the two saves is printed beside them (a save to --dir /dev/shm
then measures the work without the disk). Also prints the asynchronous stager's host copy of the
state, the memory it keeps for the run (bytes per parameter).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.state_dict import get_state_dict  # noqa: E402

from config import paths  # noqa: E402
from config.models import ModelConfig  # noqa: E402
from config.options import positive_int  # noqa: E402
from config.workloads.common import CheckpointConfig  # noqa: E402
from config.workloads.llm import FsdpConfig  # noqa: E402
from trainer import checkpoint as checkpoint_module  # noqa: E402
from trainer import dist as tdist  # noqa: E402
from trainer.checkpoint import CheckpointManager, ModelAndOptimizer  # noqa: E402
from trainer.cli import Parser  # noqa: E402
from trainer.model import loss_fn  # noqa: E402
from trainer.parallel import build_decoder  # noqa: E402

MODES = ("dcp", "sync", "async", "retention")


class Timer:
    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


class TimedDCP:
    """torch.distributed.checkpoint as trainer.checkpoint sees it, with `save` timed."""

    def __init__(self):
        self.last: Timer | None = None

    def __getattr__(self, name):
        return getattr(dcp, name)

    def save(self, *args, **kwargs):
        with Timer() as self.last:
            return dcp.save(*args, **kwargs)


def state_bytes(state) -> int:
    """Bytes of every tensor in a (nested) state dict: what a stager copies to host memory."""
    if isinstance(state, dict):
        return sum(state_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(v) for v in state)
    if isinstance(state, torch.Tensor):
        local = state.to_local() if hasattr(state, "to_local") else state
        return local.numel() * local.element_size()
    return 0


def main(argv=None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--dim", type=positive_int, default=768, help="model width; its heads are 64 wide")
    p.add_argument("--layers", type=positive_int, default=6)
    p.add_argument("--rounds", type=positive_int, default=5)
    p.add_argument("--seq-len", type=positive_int, default=128)
    p.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    args = p.parse_args(argv)
    if args.dir:
        try:
            paths.output_dir(args.dir)
        except paths.PathProblem as problem:
            p.error(f"--dir: {problem}")
    try:
        cfg = ModelConfig(dim=args.dim, n_layers=args.layers, n_heads=args.dim // 64,
                          n_kv_heads=max(1, args.dim // 256), vocab_size=32000,
                          ffn_dim=int(args.dim * 8 / 3) // 64 * 64, max_seq_len=args.seq_len)
    except ValueError as problem:  # the heads follow --dim: one per 64, a kv head per 4 of them
        p.error(f"--dim: {args.dim} makes no model ({problem}); a multiple of 256 does")
    rt = tdist.init(checkpoint_group=True)
    model = build_decoder(cfg, rt, fsdp=FsdpConfig(mode="always"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    n_params = sum(p.numel() for p in model.parameters())

    def step(ckpt=None) -> Timer:
        """One training step; returns the time it waited for an asynchronous save's staging."""
        x = torch.randint(cfg.vocab_size, (2, args.seq_len), device=rt.device)
        loss_fn(model(x), x).backward()
        with Timer() as waited:
            if ckpt:
                ckpt.wait_staging()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return waited

    step()  # optimizer state exists before the first save, as in training
    staged = state_bytes(ModelAndOptimizer(model, optimizer).state_dict())
    times: dict[str, list[Timer]] = {m: [] for m in MODES}
    inner: list[Timer] = []  # the dcp.save inside each synchronous save
    checkpoint_module.dcp = timed_dcp = TimedDCP()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        managers = {}
        for mode in ("sync", "async", "retention"):
            directory = Path(tmp, mode)
            directory.mkdir()
            managers[mode] = CheckpointManager(CheckpointConfig(str(directory), every=1, keep=1,
                                                                synchronous=mode == "sync"),
                                               rt, {"app": ModelAndOptimizer(model, optimizer)})
            managers[mode].resume()
        saved = {mode: 0 for mode in managers}

        def settle():
            for ckpt in managers.values():
                ckpt.wait()
                if ckpt.remover is not None:
                    ckpt.remover.wait()
            if rt.device.type == "cuda":
                torch.cuda.synchronize()
            os.sync()

        def measure(mode: str, r: int) -> Timer:
            settle()
            ckpt = managers.get(mode)
            if mode == "retention":  # the write of an asynchronous save is done, not yet finalised
                saved[mode] += 1
                ckpt.save(saved[mode])
                ckpt.wait_staging()
                ckpt.pending[1].result()
            if mode == "async":  # the save call, then the next step's wait for staging
                saved[mode] += 1
                with Timer() as timer:
                    ckpt.save(saved[mode])
                waited = step(ckpt)
                timer.wall, timer.cpu = timer.wall + waited.wall, timer.cpu + waited.cpu
                return timer
            with Timer() as timer:
                if mode == "dcp":
                    model_sd, optim_sd = get_state_dict(model, optimizer)
                    dcp.save({"app": {"model": model_sd, "optim": optim_sd}}, checkpoint_id=f"{tmp}/dcp-{r}",
                             process_group=rt.checkpoint_group)
                elif mode == "sync":
                    saved[mode] += 1
                    ckpt.save(saved[mode], blocking=True)
                    inner.append(timed_dcp.last)
                else:
                    ckpt.poll()  # writes the COMPLETE marker and retires the previous checkpoint
            return timer

        rmtree_s = []
        for r in range(args.rounds + 1):
            order = MODES[r % len(MODES):] + MODES[:r % len(MODES)]
            spent = {mode: measure(mode, r) for mode in order}
            settle()
            t = time.perf_counter()
            shutil.rmtree(f"{tmp}/dcp-{r}")  # one checkpoint deleted on this thread: the stall before
            if r:
                rmtree_s.append(time.perf_counter() - t)
                for mode, value in spent.items():
                    times[mode].append(value)
        for ckpt in managers.values():
            ckpt.close(finished=True)
    if rt.is_main:
        def ms(values):
            return f"{statistics.median(values) * 1000:9.1f} ms"

        def ratio(a, b):
            pairs = [x / y for x, y in zip(a, b)]
            return f"{statistics.median(pairs):.3f} (rounds: {', '.join(f'{x:.2f}' for x in pairs)})"

        wall = {mode: [t.wall for t in values] for mode, values in times.items()}
        cpu = {mode: [t.cpu for t in values] for mode, values in times.items()}
        print(f"dcp_async: {n_params / 1e6:.0f}M parameters (+AdamW state) on {rt.device.type}, median of "
              f"{args.rounds} rounds")
        print(f"  dcp.save of the same state               {ms(wall['dcp'])}   CPU {ms(cpu['dcp'])}")
        print(f"  sync save through CheckpointManager      {ms(wall['sync'])}   CPU {ms(cpu['sync'])}")
        print(f"  async save, loop blocked                 {ms(wall['async'])}")
        own = [t.wall - i.wall for t, i in zip(times["sync"], inner[1:])]
        print(f"  ratio sync save / its own dcp.save = {ratio(wall['sync'], [i.wall for i in inner[1:]])}  "
              f"target <= 1.1 (the manager's own cost {ms(own).strip()})")
        print(f"  ratio sync save / a separate dcp.save = {ratio(wall['sync'], wall['dcp'])}, in CPU time "
              f"{ratio(cpu['sync'], cpu['dcp'])} (two calls apart: on a shared machine, mostly the noise between them)")
        print(f"  ratio async blocked / sync save = {ratio(wall['async'], wall['sync'])}  target <= 0.1")
        print(f"  retention stall on the training thread: deleting one checkpoint there {ms(rmtree_s)} (before), "
              f"finalising the save that retires it {ms(wall['retention'])} (now)")
        print(f"  async stager's host copy (kept for the run): {staged / 2**20:,.0f} MiB = "
              f"{staged / n_params:.2f} bytes per parameter on {rt.world_size} rank(s)")
    tdist.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
