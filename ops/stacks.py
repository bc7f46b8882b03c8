"""`python -m ops stacks --env ENV`: the cdk stack pattern of an environment, and who deploys it.

An environment listed in `promotion` (with a `pipeline` configured) belongs to the pipeline: the
pipeline deploys what was tested and approved, from its branch. `make deploy` asks with `--deploy`
first and is refused for such an environment unless forced (`make deploy ENV=prod FORCE=1`); then
it deploys the pipeline's own stage, so the templates are the ones the pipeline would deploy from
this checkout. `make diff` and `make destroy` use the same pattern without asking.
"""

from __future__ import annotations

from config.pipeline import owned_by_pipeline, stack_selector
from ops import envconfig
from ops.errors import OpsError


def selector(env: str, context_file: str | None, *, deploy: bool, force: bool) -> str:
    """The stack pattern for the Makefile; with `deploy`, OpsError (one line, exit 2) where the
    pipeline deploys the environment, unless `force`."""
    envconfig.load(env, context_file)  # an unknown or invalid environment: one line
    pipeline = envconfig.load_pipeline_settings(context_file)
    if deploy and not force and owned_by_pipeline(pipeline, env):
        raise OpsError(f"{env} is deployed by the pipeline ({pipeline.repository}@{pipeline.branch}, promotion "
                       f"{' -> '.join(e.name for e in pipeline.stages)}): push to {pipeline.branch} to deploy it, or "
                       f"run `make deploy ENV={env} FORCE=1` to deploy this checkout by hand (the pipeline's "
                       f"next run deploys {pipeline.branch} over it)")
    return stack_selector(pipeline, env)
