"""Kueue, when an environment sets `"queueing": "kueue"`: the pinned release, the job kinds it
integrates, and the rule that refuses a combination the pinned release cannot queue.

Kueue v0.19.2 still compiles and registers its PyTorchJob integration, though its default
configuration leaves it commented out (../shared/contracts/kueue-v0.19.2/
components-manager-controller_manager_config.yaml: `kubeflow.org/pytorchjob` commented,
`trainer.kubeflow.org/trainjob` on). Upstream plans to remove it (kueue#12606; the removal was
delayed on 2026-08-18, kueue#12620), so the table below says per release what it can queue, and
the rule fires by itself once a pin without the PyTorchJob row is chosen.
"""

from __future__ import annotations

from typing import Mapping

from config.errors import ConfigError

KUEUE_VERSION = "v0.19.2"
PYTORCHJOB_FRAMEWORK = "kubeflow.org/pytorchjob"
TRAINJOB_FRAMEWORK = "trainer.kubeflow.org/trainjob"
# Kueue's `integrations.frameworks` names, per release, of the run kinds this project creates.
KUEUE_INTEGRATIONS: Mapping[str, tuple[str, ...]] = {
    "v0.19.2": (TRAINJOB_FRAMEWORK, PYTORCHJOB_FRAMEWORK),
}
# The run kind of each training API: PyTorchJob (Training Operator v1) or TrainJob (Trainer v2).
RUN_FRAMEWORK = {"v1": PYTORCHJOB_FRAMEWORK, "v2": TRAINJOB_FRAMEWORK}


def queued_frameworks(training_api: str) -> tuple[str, ...]:
    """What our Kueue configuration enables: only the kind of run we queue. Kueue's webhooks for
    batch Jobs and pods would otherwise manage our data Jobs and intercept every pod."""
    return (RUN_FRAMEWORK[training_api],)


def check_queueing(env, path: str, *, training_api: str = "v1",
                   integrations: Mapping[str, tuple[str, ...]] = KUEUE_INTEGRATIONS,
                   version: str = KUEUE_VERSION) -> None:
    """One ConfigError line for a queueing choice that cannot work. `env` is the parsed
    Environment; `training_api` is the environment's run API ("v1": PyTorchJob). Kueue with v1 is
    accepted while the pinned Kueue integrates PyTorchJobs (it is deprecated there: the README says
    so); the rule refuses it by itself once the pin's row lacks the framework."""
    if env.queueing != "kueue":
        return
    framework = RUN_FRAMEWORK[training_api]
    if framework not in integrations.get(version, ()):
        raise ConfigError(path, f"kueue needs trainingApi v2: Kueue {version} has no {framework} integration "
                                "(removed upstream; see kueue#12620)")
    if not env.training_nodegroups:
        raise ConfigError(path, "kueue needs at least one gpuNodegroups or cpuNodegroups entry: its ClusterQueue "
                                "has a ResourceFlavor per training node group")
