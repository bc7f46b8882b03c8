#!/usr/bin/env python3
"""CDK entry: read the environment config, build one TrainingClusterStage, and the pipeline.

`-c env=NAME` picks the environment (default dev). When context `pipeline` is set the app also
builds the PipelineStack, which builds the same stage once per environment in `promotion` order.
A configuration error stops here with one line and exit code 2, before any construct exists.
"""

from __future__ import annotations

import sys
from pathlib import Path

import aws_cdk as cdk

from config import ConfigError, load_environment


def main() -> int:
    app = cdk.App()
    try:
        env_name = app.node.try_get_context("env") or "dev"
        config = load_environment(app.node.try_get_context("environments"), env_name)
    except ConfigError as err:
        print(err.line(), file=sys.stderr)
        return 2

    from stacks.stage import TrainingClusterStage

    stage = TrainingClusterStage(app, env_name, config=config)
    # The dist sink: the same chart objects the Workloads stack applies, as YAML for kubectl/GitOps.
    from k8s.sinks import write_dist

    write_dist(stage.workloads.charts, Path(__file__).resolve().parent / "dist" / env_name)
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
