"""The trainer image an environment's stacks published, from the Registry stack's outputs.

`ops submit` defaults `--image` to it, so nobody copies an ECR URI by hand. The stack is
`<env>-Registry` (config/outputs.py); under the pipeline its name carries a further prefix, so a
stack whose name ends in `-<env>-Registry` is taken when it is the only one.
"""

from __future__ import annotations

from typing import Any

from config import Environment
from config.outputs import REGISTRY_STACK_ID, stack_name, trainer_image_output
from ops.errors import OpsError
from ops.stacks import deployed_stack, stack_output


def registry_stack(cloudformation: Any, env: Environment) -> dict:
    name = stack_name(env.name, REGISTRY_STACK_ID)
    try:
        stack = deployed_stack(cloudformation, env, REGISTRY_STACK_ID)
    except OpsError as err:
        raise OpsError(f"{err}; pass --image") from None
    if stack is None:
        raise OpsError(f"no stack {name} in {env.account}/{env.region}: deploy the environment first "
                       f"(make deploy ENV={env.name}) or pass --image")
    return stack


def trainer_image(cloudformation: Any, env: Environment, variant: str) -> str:
    """The URI of the `variant` ("cpu" / "gpu") trainer image the deployed preset jobs run."""
    stack = registry_stack(cloudformation, env)
    key = trainer_image_output(variant)
    image = stack_output(stack, key)
    if image is None:
        raise OpsError(f"stack {stack['StackName']} has no output {key} (deployed by an older version?): "
                       f"redeploy it (make deploy ENV={env.name}) or pass --image")
    return image


def published_image(env: Environment, variant: str) -> str:
    """The trainer image (cpu or gpu) the environment's Registry stack published, from its outputs:
    the default `--image` of every command that starts a pod (submit, data, model download)."""
    from ops import aws

    cloudformation = aws.session(env.region).client("cloudformation", config=aws.CLIENT_CONFIG)
    return trainer_image(cloudformation, env, variant)


def published_images(env: Environment) -> tuple[dict[str, str] | None, str]:
    """Every trainer image the Registry stack published (what `ops start` runs), or None and why
    not (no stack, no credentials): for reports that can do without them (`ops doctor`)."""
    from ops.aws import api_failure_types, explain

    try:
        return {variant: published_image(env, variant) for variant in ("cpu", "gpu")}, ""
    except OpsError as err:
        return None, str(err)
    except api_failure_types() as err:
        return None, explain(err)
