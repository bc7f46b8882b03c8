"""`ops synth-summary --env ENV`: an offline cdk synth, then what a deploy would create (ops/synth_summary.py)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from ops.arguments import OutputOptions

HELP = "offline cdk synth, then what a deploy would create"


@dataclass(frozen=True, kw_only=True)
class Options(OutputOptions):
    env: str = "dev"
    outdir: Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ops.synth_summary import REPO_ROOT

    parser.add_argument("--env", default="dev", help="environment name from cdk.json (default dev)")
    parser.add_argument("--outdir", type=Path, default=REPO_ROOT / "cdk.out", help="cloud assembly directory")
    OutputOptions.add_to(parser)


def run(options: Options) -> int:
    from ops import synth_summary

    return synth_summary.synth_and_summarize(options.env, options.outdir, as_json=options.json)
