"""`python -m ops stacks --env ENV`: the cdk stack pattern of an environment, and who deploys it.

An environment listed in `promotion` (with a `pipeline` configured) belongs to the pipeline: the
pipeline deploys what was tested and approved, from its branch. `make deploy` asks with `--deploy`
first and is refused for such an environment unless forced (`make deploy ENV=prod FORCE=1`); then
it deploys the pipeline's own stage, so the templates are the ones the pipeline would deploy from
this checkout. `make diff` and `make destroy` use the same pattern without asking.

`deployed_stack` finds one of an environment's stacks in its account, as either path deployed it.
"""

from __future__ import annotations

import json
from typing import Any

from config import Environment
from config.outputs import stack_name
from config.pipeline import owned_by_pipeline, stack_selector
from ops import envconfig
from ops.checks import WARN, Check
from ops.errors import OpsError

_GONE = ("DELETE_COMPLETE",)


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


def deployed_stack(cloudformation: Any, env: Environment, stack_id: str) -> dict | None:
    """The environment's stack `<env>-<stack id>` (config/outputs.py) as DescribeStacks gives it, or
    the one stack whose name ends in `-<env>-<stack id>`; None when there is none (nothing deployed
    yet), OpsError when several match."""
    from botocore.exceptions import ClientError

    name = stack_name(env.name, stack_id)
    try:
        [stack] = cloudformation.describe_stacks(StackName=name)["Stacks"]
        return stack
    except ClientError as err:
        if "does not exist" not in str(err):
            raise
    pages = cloudformation.get_paginator("describe_stacks").paginate()
    found = [s for page in pages for s in page["Stacks"]
             if s["StackName"].endswith(f"-{name}") and s["StackStatus"] not in _GONE]
    if len(found) > 1:
        raise OpsError(f"several stacks end in -{name} ({', '.join(s['StackName'] for s in found)})")
    return found[0] if found else None


def deployed_stack_for(row: str, cloudformation: Any, env: Environment,
                       stack_id: str) -> tuple[dict | None, Check | None]:
    """deployed_stack for a preflight row: (the stack or None, None), or (None, a warn row saying
    which stack could not be told) when several match."""
    try:
        return deployed_stack(cloudformation, env, stack_id), None
    except OpsError as err:
        return None, Check(row, WARN, f"could not tell which stack is {stack_name(env.name, stack_id)} ({err})")


def stack_output(stack: dict, key: str) -> str | None:
    return next((o["OutputValue"] for o in stack.get("Outputs") or [] if o.get("OutputKey") == key), None)


def deployed_template(cloudformation: Any, name: str) -> dict | None:
    """Stack `name`'s template as deployed; None when it is not JSON (cdk deploys JSON)."""
    template = cloudformation.get_template(StackName=name, TemplateStage="Original")["TemplateBody"]
    if isinstance(template, str):  # botocore decodes a JSON body
        try:
            template = json.loads(template)
        except ValueError:
            return None
    return template if isinstance(template, dict) else None
