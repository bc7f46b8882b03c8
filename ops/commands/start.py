"""`ops start PRESET --env ENV`: the preset's run of the deployed code, resumed or created (ops/runs.py)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from config.presets import PRESETS
from ops.arguments import RunOptions

HELP = "start a preset's run of the deployed code: resume it, or create it"
EPILOG = RunOptions.epilog()


@dataclass(frozen=True, kw_only=True)
class Options(RunOptions):
    preset: str


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("preset", choices=PRESETS, metavar="PRESET", help=f"one of {', '.join(PRESETS)}")
    RunOptions.add_to(parser)


def run(options: Options) -> int:
    return options.launch(options.preset, name=None, resume=True)
