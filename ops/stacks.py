"""`python -m ops stacks --env ENV`: the cdk stack pattern of an environment, and who deploys it.

An environment listed in `promotion` (with a `pipeline` configured) belongs to the pipeline: the
pipeline deploys what was tested and approved, from its branch. `make deploy` asks with `--deploy`
first and is refused for such an environment unless forced (`make deploy ENV=prod FORCE=1`); then
it deploys the pipeline's own stage, so the templates are the ones the pipeline would deploy from
this checkout. `make diff` and `make destroy` use the same pattern without asking.
"""

from __future__ import annotations

import argparse

from config.pipeline import owned_by_pipeline, stack_selector
from ops import envconfig
from ops.errors import OpsError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", required=True, help="environment name in cdk.json context `environments`")
    parser.add_argument("--context-file", help="read the context from this file instead of cdk.json")
    parser.add_argument("--deploy", action="store_true",
                        help="refuse (exit 2) when the pipeline deploys this environment, unless --force")
    parser.add_argument("--force", action="store_true", help="with --deploy: deploy by hand all the same")


def run(args: argparse.Namespace) -> int:
    """Prints the pattern on stdout (for the Makefile); a refusal is one line on stderr, exit 2."""
    envconfig.load(args.env, args.context_file)  # an unknown or invalid environment: one line
    pipeline = envconfig.load_pipeline_settings(args.context_file)
    if args.deploy and not args.force and owned_by_pipeline(pipeline, args.env):
        raise OpsError(f"{args.env} is deployed by the pipeline ({pipeline.repository}@{pipeline.branch}, promotion "
                       f"{' -> '.join(e.name for e in pipeline.stages)}): push to {pipeline.branch} to deploy it, or "
                       f"run `make deploy ENV={args.env} FORCE=1` to deploy this checkout by hand (the pipeline's "
                       f"next run deploys {pipeline.branch} over it)")
    print(stack_selector(pipeline, args.env))
    return 0
