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
from config.pipeline import load_pipeline


def main() -> int:
    app = cdk.App()
    try:
        env_name = app.node.try_get_context("env") or "dev"
        environments = app.node.try_get_context("environments")
        config = load_environment(environments, env_name)
        pipeline_context = app.node.try_get_context("pipeline")
        pipeline = None
        if pipeline_context is not None:
            pipeline = load_pipeline(pipeline_context, app.node.try_get_context("promotion"), environments)
    except ConfigError as err:
        print(err.line(), file=sys.stderr)
        return 2

    from k8s.sinks import write_dist
    from stacks.stage import TrainingClusterStage

    stages = [TrainingClusterStage(app, env_name, config=config)]
    if pipeline is not None:
        from stacks.pipeline import PipelineStack

        stages += PipelineStack(app, "Pipeline", settings=pipeline).stages.values()
    # The dist sink: the same chart objects the Workloads stacks apply, as YAML for kubectl/GitOps,
    # once per environment (the standalone stage and the pipeline's stage of it are identical).
    written: set[str] = set()
    for stage in stages:
        if stage.config.name not in written:
            write_dist(stage.workloads.charts, Path(__file__).resolve().parent / "dist" / stage.config.name)
            written.add(stage.config.name)
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
