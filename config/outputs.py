"""Names of the stack outputs the ops CLI reads: stacks/ declares them, ops/ looks them up.

Stack names follow the stage: `<env>-<stack id>`, whether app.py builds the stage (its id is the
environment name) or the pipeline does (a stage inside a stack is named for its own id only), so
`make deploy` and the pipeline address the same CloudFormation stacks.
"""

from __future__ import annotations

REGISTRY_STACK_ID = "Registry"


def stack_name(env_name: str, stack_id: str) -> str:
    return f"{env_name}-{stack_id}"


def trainer_image_output(variant: str) -> str:
    """The Registry stack's output holding the full URI of the trainer image of `variant`
    (JobPreset.image_variant: "cpu" or "gpu"), the image the deployed preset jobs run."""
    return f"TrainerImageUri{variant.capitalize()}"
