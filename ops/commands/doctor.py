"""`ops doctor --env ENV`: a live cluster's health as a pass/warn/fail table (ops/doctor.py)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ops.arguments import ClusterOptions, EnvOptions, OutputOptions

HELP = "check a live cluster: nodes, devices, add-ons, storage, node health, NCCL"


@dataclass(frozen=True, kw_only=True)
class Options(EnvOptions, ClusterOptions, OutputOptions):
    pass


def add_arguments(parser: argparse.ArgumentParser) -> None:
    EnvOptions.add_to(parser)
    ClusterOptions.add_to(parser)
    OutputOptions.add_to(parser)


def run(options: Options) -> int:
    from ops import checks, doctor, images

    env = options.environment()
    published, unknown = images.published_images(env)
    rows = doctor.run(env, options.api_client(), images=published, images_unknown=unknown)
    return checks.report(rows, as_json=options.json, about={"environment": env.name, "cluster": env.cluster_name},
                         title=f"doctor {env.name}: cluster {env.cluster_name}")
