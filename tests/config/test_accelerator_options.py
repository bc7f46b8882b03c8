"""The issue-23 options of an environment: `efaAllocation` per GPU node group and `queueing`, their
defaults and every refusal as one line naming the field (config/nodegroup_parser.py,
config/queueing.py)."""

from __future__ import annotations

import pytest

from config import ConfigError, load_environment
from config.nodegroup_parser import check_dra_kubernetes_version
from config.queueing import (
    KUEUE_INTEGRATIONS, KUEUE_VERSION, PYTORCHJOB_FRAMEWORK, RUN_FRAMEWORK, TRAINJOB_FRAMEWORK, check_queueing,
    queued_frameworks,
)
from tests.config.test_environment import CONTEXT, GPU0, P, dev, error_line, put

EKS_EFA_PAGE = "https://docs.aws.amazon.com/eks/latest/userguide/device-management-efa.html"


def parsed(*changes):
    raw = dev()
    for path, value in changes:
        put(raw, path, value)
    return load_environment({"dev": raw}, "dev")


def test_the_committed_environments_use_the_device_plugin_and_no_queue():
    for name in CONTEXT["environments"]:
        env = load_environment(CONTEXT["environments"], name)
        assert env.queueing == "none"
        assert {g.efa_allocation for g in env.gpu_nodegroups} == {"devicePlugin"}


def test_a_group_on_dra_is_the_only_dra_group_and_the_others_stay_on_the_plugin():
    env = parsed((f"{GPU0}.efaAllocation", "dra"))
    assert [g.name for g in env.efa_groups("dra")] == ["p4d"]
    assert [g.name for g in env.efa_groups("devicePlugin")] == ["p5"]


CASES = [
    ("efaAllocation unknown", [(f"{GPU0}.efaAllocation", "sriov")],
     f"{GPU0}.efaAllocation: must be one of devicePlugin, dra, got 'sriov'"),
    ("dra on a type without EFA", [(f"{GPU0}.instanceType", "g5.xlarge"), (f"{GPU0}.efaAllocation", "dra")],
     f"{GPU0}.efaAllocation: dra needs an EFA instance type; g5.xlarge has no EFA interfaces"),
    ("efaAllocation on a CPU group", [("cpuNodegroups[0].efaAllocation", "dra")],
     "cpuNodegroups[0].efaAllocation: unknown key; allowed keys are desiredSize, instanceType, maxSize, minSize, "
     "name, nodeAutoRepair"),
    ("queueing unknown", [("queueing", "volcano")], "queueing: must be one of none, kueue, got 'volcano'"),
]


@pytest.mark.parametrize("changes, expected", [pytest.param(c, e, id=i) for i, c, e in CASES])
def test_rule_reports_one_line_naming_the_field(changes, expected):
    assert error_line(*changes) == P + expected


def test_dra_needs_kubernetes_1_34_and_the_error_cites_the_eks_page():
    """Every version EKS supports today is 1.34 or later, so the rule is held with an older one."""
    env = parsed((f"{GPU0}.efaAllocation", "dra"))
    check_dra_kubernetes_version(env.gpu_nodegroups, "1.34", "environments.dev.gpuNodegroups")
    with pytest.raises(ConfigError) as err:
        check_dra_kubernetes_version(env.gpu_nodegroups, "1.33", "environments.dev.gpuNodegroups")
    assert err.value.line() == (f"{P}{GPU0}.efaAllocation: dra needs kubernetesVersion 1.34 or later, got 1.33 "
                                f"({EKS_EFA_PAGE})")
    # 1.4 is not later than 1.34: versions compare as numbers, not text.
    with pytest.raises(ConfigError):
        check_dra_kubernetes_version(env.gpu_nodegroups, "1.4", "environments.dev.gpuNodegroups")


def queued(env):
    from dataclasses import replace

    return replace(env, queueing="kueue")


def test_kueue_is_accepted_with_either_training_api_while_the_pinned_kueue_integrates_both():
    assert set(KUEUE_INTEGRATIONS[KUEUE_VERSION]) == {PYTORCHJOB_FRAMEWORK, TRAINJOB_FRAMEWORK}
    for api in ("v1", "v2"):
        env = parsed(("queueing", "kueue"), ("trainingApi", api))
        assert (env.queueing, env.training_api) == ("kueue", api)


# (training API, the pinned release's integrations, refused?): the rule reads the table, so a pin
# whose row lacks a run kind refuses that API without a code change.
INTEGRATION_CASES = [
    ("v1", (TRAINJOB_FRAMEWORK, PYTORCHJOB_FRAMEWORK), False),
    ("v2", (TRAINJOB_FRAMEWORK, PYTORCHJOB_FRAMEWORK), False),
    ("v1", (TRAINJOB_FRAMEWORK,), True),
    ("v2", (TRAINJOB_FRAMEWORK,), False),
    ("v2", (PYTORCHJOB_FRAMEWORK,), True),
    ("v1", (), True),
]


@pytest.mark.parametrize("api, row, refused", INTEGRATION_CASES)
def test_kueue_is_refused_exactly_when_the_pinned_release_lacks_the_run_kinds_integration(api, row, refused):
    env = queued(parsed())
    kind = RUN_FRAMEWORK[api]
    if not refused:
        check_queueing(env, "environments.dev.queueing", training_api=api, integrations={"v9.9.9": row},
                       version="v9.9.9")
        return
    with pytest.raises(ConfigError) as err:
        check_queueing(env, "environments.dev.queueing", training_api=api, integrations={"v9.9.9": row},
                       version="v9.9.9")
    assert err.value.line() == (f"{P}queueing: kueue needs trainingApi v2: Kueue v9.9.9 has no {kind} "
                                "integration (removed upstream; see kueue#12620)")


def test_kueue_without_training_node_groups_is_refused_in_one_line():
    assert error_line(("queueing", "kueue"), ("gpuNodegroups", []), ("cpuNodegroups", []), ("dataSources", {})) == (
        f"{P}queueing: kueue needs at least one gpuNodegroups or cpuNodegroups entry: its ClusterQueue has a "
        "ResourceFlavor per training node group")


def test_the_queued_frameworks_are_only_the_run_kind_of_the_training_api():
    assert queued_frameworks("v1") == (PYTORCHJOB_FRAMEWORK,)
    assert queued_frameworks("v2") == (TRAINJOB_FRAMEWORK,)
