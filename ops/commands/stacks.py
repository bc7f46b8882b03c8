"""`ops stacks --env ENV [--deploy [--force]]`: the cdk stack pattern of an environment for the
Makefile, refused with --deploy where the pipeline deploys it (ops/stacks.py)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ops.arguments import EnvOptions

HELP = "the cdk stack pattern of an environment; with --deploy, refused where the pipeline deploys it"


@dataclass(frozen=True, kw_only=True)
class Options(EnvOptions):
    deploy: bool = False
    force: bool = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", required=True, help="environment name in cdk.json context `environments`")
    parser.add_argument("--context-file", help="read the context from this file instead of cdk.json")
    parser.add_argument("--deploy", action="store_true",
                        help="refuse (exit 2) when the pipeline deploys this environment, unless --force")
    parser.add_argument("--force", action="store_true", help="with --deploy: deploy by hand all the same")


def run(options: Options) -> int:
    """Prints the pattern on stdout; a refusal is one line on stderr, exit 2."""
    from ops import stacks

    print(stacks.selector(options.env, options.context_file, deploy=options.deploy, force=options.force))
    return 0
