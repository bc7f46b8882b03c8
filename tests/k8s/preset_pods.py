"""The worker pod of every preset in every environment, as render_pytorchjob makes it."""

from __future__ import annotations

from k8s.pods.pytorchjob import presets_for, render_pytorchjob

IMAGE = "111111111111.dkr.ecr.us-west-2.amazonaws.com/trainer:abc123"


def rendered(environments, *, image: str = IMAGE):
    """(environment, preset, pod spec, the container's env as a dict) for each preset pod."""
    for env in environments.values():
        for preset in presets_for(env):
            pod = render_pytorchjob(env, preset.name, image=image)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
            env_vars = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
            yield env, preset, pod["spec"], env_vars
