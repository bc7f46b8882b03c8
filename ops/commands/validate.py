"""`ops validate --dist dist/ENV`: the post-deploy GPU checks and NCCL tests through kubectl, as the
pipeline's runner runs them after each stage (ops/validate.py); with `--drill preemption`, instead,
the smoke run preempted mid-run to prove the cluster resumes it (ops/preemption_drill.py)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from ops.arguments import positive_seconds

HELP = "post-deploy GPU checks and NCCL tests through kubectl (the pipeline's runner), or a preemption drill"
DRILLS = ("preemption",)


@dataclass(frozen=True, kw_only=True)
class Options:
    dist: Path
    timeout: float = 1800
    drill: str | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dist", type=Path, required=True, help="dist/<env> folder written by make synth")
    parser.add_argument("--timeout", type=positive_seconds, default=1800,
                        help="seconds each check, or the whole drill, may take (default 1800)")
    parser.add_argument("--drill", choices=DRILLS,
                        help="instead of the checks: run the smoke run, delete the worker pod that saved its first "
                             "snapshot, and check that the job resumes from it and ends Succeeded only when finished "
                             "(needs the right to delete pods in the training namespace)")


def run(options: Options) -> int:
    if options.drill == "preemption":
        from ops import preemption_drill

        return preemption_drill.run_drill(options.dist, options.timeout)
    from ops import validate

    return validate.run_checks(options.dist, options.timeout)
