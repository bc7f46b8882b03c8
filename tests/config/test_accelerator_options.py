"""The issue-23 options of an environment: `efaAllocation` per GPU node group and `queueing`, their
defaults and every refusal as one line naming the field (config/nodegroup_parser.py,
config/queueing.py)."""

from __future__ import annotations

import pytest

from config import ConfigError, load_environment
from config.nodegroup_parser import check_dra_kubernetes_version
from config.queueing import KUEUE_INTEGRATIONS, KUEUE_VERSION, PYTORCHJOB_FRAMEWORK, check_queueing
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


def test_kueue_is_refused_until_this_project_installs_it():
    assert error_line(("queueing", "kueue")) == (f"{P}queueing: kueue cannot be deployed by this version yet (its "
                                                 "controller and CRDs are not installed; issue 23); use none")


def test_kueue_with_training_operator_v1_is_accepted_while_the_pinned_kueue_integrates_pytorchjobs():
    assert PYTORCHJOB_FRAMEWORK in KUEUE_INTEGRATIONS[KUEUE_VERSION]
    check_queueing(queued(parsed()), "environments.dev.queueing", installable=True)


def test_kueue_with_v1_is_refused_by_a_kueue_pin_without_the_pytorchjob_integration():
    env = queued(parsed())
    without = {"v0.20.0": ("trainer.kubeflow.org/trainjob",)}
    with pytest.raises(ConfigError) as err:
        check_queueing(env, "environments.dev.queueing", integrations=without, version="v0.20.0", installable=True)
    assert err.value.line() == (f"{P}queueing: kueue needs trainingApi v2: Kueue v0.20.0 has no kubeflow.org/pytorchjob "
                                "integration (removed upstream; see kueue#12620)")
    check_queueing(env, "environments.dev.queueing", training_api="v2", integrations=without, version="v0.20.0",
                   installable=True)


def test_kueue_without_training_node_groups_is_refused():
    env = queued(parsed(("gpuNodegroups", []), ("cpuNodegroups", []), ("dataSources", {})))
    with pytest.raises(ConfigError) as err:
        check_queueing(env, "environments.dev.queueing", installable=True)
    assert err.value.line() == (f"{P}queueing: kueue needs at least one gpuNodegroups or cpuNodegroups entry: its "
                                "ClusterQueue has a ResourceFlavor per training node group")
