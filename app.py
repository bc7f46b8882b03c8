#!/usr/bin/env python3
"""CDK entry: read the environment config, build one TrainingClusterStage, and the pipeline.

`-c env=NAME` picks the environment (default dev). When context `pipeline` is set the app also
builds the PipelineStack, which builds the same stage once per environment in `promotion` order.
Both give an environment the same stack names and logical ids (tests/stacks/test_deploy_paths.py);
`make deploy` of an environment the pipeline owns deploys the pipeline's stage (config/pipeline.py).
A configuration error stops here with one line and exit code 2, before any construct exists.
"""

from __future__ import annotations

import sys
from pathlib import Path

import aws_cdk as cdk

from config import ConfigError, Environment, load_environment
from config.kubernetes import EXIT_USAGE
from config.outputs import PIPELINE_STACK_ID
from config.pipeline import PipelineSettings, owned_by_pipeline, pipeline_settings


def environment_stage(app: cdk.App, config: Environment, pipeline: PipelineSettings | None):
    """The stage `make deploy` addresses for an environment the pipeline does not own (its id is
    the environment's name, so its stacks are `<env>/*`). An environment the pipeline owns gets the
    pipeline's account here too, so this stage and the pipeline's have the same resources (the
    validation starter role included)."""
    from stacks.stage import TrainingClusterStage

    pipeline_account = pipeline.account if owned_by_pipeline(pipeline, config.name) else None
    return TrainingClusterStage(app, config.name, config=config, pipeline_account=pipeline_account)


def repeated_keys_problem(settings: Path) -> str | None:
    """Why the CDK CLI's settings file cannot be trusted, or None. The CLI hands app.py the context
    it parsed with JSON.parse, which keeps the last of two equal keys: a second `dev` would silently
    replace the first environment in the template. config.paths.read_json refuses the repeat."""
    from config.paths import PathProblem, read_json

    if not settings.is_file():
        return None  # context from -c or CDK_CONTEXT_JSON alone: nothing here to check
    try:
        read_json(settings)
    except PathProblem as problem:
        return str(problem)
    return None


def main() -> int:
    # The CLI runs the app in the folder of the cdk.json it read.
    if problem := repeated_keys_problem(Path("cdk.json")):
        print(f"config error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    app = cdk.App()
    try:
        # Only an absent env means dev: `-c env=` (an empty ENV) names none and is refused.
        env_name = app.node.try_get_context("env")
        env_name = "dev" if env_name is None else env_name
        environments = app.node.try_get_context("environments")
        config = load_environment(environments, env_name)
        pipeline = pipeline_settings(app.node.try_get_context("pipeline"), app.node.try_get_context("promotion"),
                                     environments)
    except ConfigError as err:
        print(err.line(), file=sys.stderr)
        return EXIT_USAGE

    from k8s.sinks import write_dist

    stages = [environment_stage(app, config, pipeline)]
    if pipeline is not None:
        from stacks.pipeline import PipelineStack

        stages += PipelineStack(app, PIPELINE_STACK_ID, settings=pipeline).stages.values()
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
