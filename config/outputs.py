"""Names of the stack outputs the ops CLI reads: stacks/ declares them, ops/ looks them up.

Stack names follow the stage: `<env>-<stack id>` (app.py's stage id is the environment name);
under the pipeline the stage's stacks carry a further prefix, `<pipeline>-<env>-<stack id>`.
"""

from __future__ import annotations

REGISTRY_STACK_ID = "Registry"


def stack_name(env_name: str, stack_id: str) -> str:
    return f"{env_name}-{stack_id}"


def trainer_image_output(variant: str) -> str:
    """The Registry stack's output holding the full URI of the trainer image of `variant`
    (JobPreset.image_variant: "cpu" or "gpu"), the image the deployed preset jobs run."""
    return f"TrainerImageUri{variant.capitalize()}"
