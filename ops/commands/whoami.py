"""`ops whoami --env ENV`: the caller's identity and the path to cluster admin that applies to it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ops.arguments import EnvOptions
from ops.errors import EXIT_PROBLEM

HELP = "the caller's identity and which path to cluster admin applies"


@dataclass(frozen=True, kw_only=True)
class Options(EnvOptions):
    pass


def add_arguments(parser: argparse.ArgumentParser) -> None:
    EnvOptions.add_to(parser)


def run(options: Options) -> int:
    from ops import access, aws

    env = options.environment()
    report, ok = access.whoami(env, aws.clients(env.region))
    print(report)
    return 0 if ok else EXIT_PROBLEM
