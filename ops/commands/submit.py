"""`ops submit --preset PRESET --env ENV`: create exactly this run (ops/runs.py)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from config.presets import PRESETS
from ops.arguments import RunOptions, run_name

HELP = "create a preset's run (named PRESET-<spec digest> unless --name)"
EPILOG = RunOptions.epilog()


@dataclass(frozen=True, kw_only=True)
class Options(RunOptions):
    preset: str
    name: str | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", required=True, choices=PRESETS, metavar="PRESET",
                        help=f"one of {', '.join(PRESETS)}")
    parser.add_argument("--name", type=run_name, help="run name (default: PRESET-<digest of its spec, image included>)")
    RunOptions.add_to(parser)


def run(options: Options) -> int:
    return options.launch(options.preset, name=options.name, resume=False)
