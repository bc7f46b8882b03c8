"""`ops local --job PRESET`: a CPU job preset on this machine under torchrun and a real etcd (ops/local.py)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from config.presets import PRESETS
from ops.arguments import positive_seconds
from ops.local import DEFAULT_CHECKPOINT_ROOT, DEFAULT_TIMEOUT_S

HELP = "run a CPU job preset on this machine under torchrun and a real etcd"


@dataclass(frozen=True, kw_only=True)
class Options:
    job: str = "cpu-ddp"
    checkpoint_root: str = DEFAULT_CHECKPOINT_ROOT
    resume: bool = False
    etcd: str | None = None
    timeout: float = DEFAULT_TIMEOUT_S
    check: bool = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--job", default="cpu-ddp", help=f"job preset (default cpu-ddp): {', '.join(PRESETS)}")
    parser.add_argument("--checkpoint-root", default=DEFAULT_CHECKPOINT_ROOT,
                        help=f"local stand-in for /fsx/checkpoints (default {DEFAULT_CHECKPOINT_ROOT})")
    parser.add_argument("--resume", action="store_true",
                        help="keep earlier checkpoints of this job and resume from them")
    parser.add_argument("--etcd", default=None, help="etcd binary (default: etcd on PATH)")
    parser.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT_S,
                        help=f"seconds the job may run before it is stopped like Ctrl-C (default {DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--check", action="store_true",
                        help="only check --job and exit (make local runs it before the synth)")


def run(options: Options) -> int:
    """0 when the job succeeded, 1 when it ran and failed (--check: 0 when --job runs here)."""
    from ops import local

    preset = local.local_preset(options.job)
    if options.check:
        return 0
    return local.run_locally(preset, checkpoint_root=options.checkpoint_root, resume=options.resume,
                             etcd=options.etcd, timeout_s=options.timeout)
