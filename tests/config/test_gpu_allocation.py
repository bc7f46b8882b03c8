"""`gpuAllocation` per GPU node group (config/nodegroup_parser.py): GPUs from NVIDIA's GPU DRA driver
only where the EFA devices come through DRA too and the type's GPU/EFA-per-PCIe-root layout is a
verified fact (config/instance_types.py PCIE_ROOT_LAYOUTS); every refusal one line naming the field."""

from __future__ import annotations

from dataclasses import replace

import pytest

from config import ConfigError, load_environment
from config.instance_types import INSTANCE_TYPES, PCIE_ROOT_LAYOUTS
from config.kubernetes import GPU_ALLOCATION_LABEL, TRAINING_ROLE, nodegroup_labels
from config.nodegroup_parser import check_dra_kubernetes_version
from tests.config.test_accelerator_options import parsed
from tests.config.test_environment import CONTEXT, GPU0, P, error_line

GPU1 = "gpuNodegroups[1]"  # dev's p5 group (GPU0 is p4d)
P5_DRA = [(f"{GPU1}.efaAllocation", "dra"), (f"{GPU1}.gpuAllocation", "dra")]
NVIDIA_DRA_PAGE = "https://docs.aws.amazon.com/eks/latest/userguide/device-management-nvidia-dra-device-plugin.html"


def test_the_committed_environments_keep_gpus_on_the_device_plugin():
    for name in CONTEXT["environments"]:
        env = load_environment(CONTEXT["environments"], name)
        assert {g.gpu_allocation for g in env.gpu_nodegroups} == {"devicePlugin"}


def test_a_p5_group_with_both_allocations_on_dra_is_the_only_gpu_dra_group():
    env = parsed(*P5_DRA)
    assert [g.name for g in env.gpu_groups("dra")] == ["p5"]
    assert [g.name for g in env.gpu_groups("devicePlugin")] == ["p4d"]


CASES = [
    ("unknown value", [(f"{GPU1}.gpuAllocation", "mig")],
     f"{GPU1}.gpuAllocation: must be one of devicePlugin, dra, got 'mig'"),
    ("without efa dra", [(f"{GPU1}.gpuAllocation", "dra")],
     f"{GPU1}.gpuAllocation: dra needs efaAllocation dra on the same group (GPUs and EFA devices are aligned by "
     "PCIe root within one DRA claim)"),
    ("p4d layout unverified", [(f"{GPU0}.efaAllocation", "dra"), (f"{GPU0}.gpuAllocation", "dra")],
     f"{GPU0}.gpuAllocation: dra needs a verified GPU/EFA-per-PCIe-root layout, known for p5.48xlarge; nobody "
     "here has verified p4d.24xlarge's, so it is refused rather than guessed (use devicePlugin)"),
    ("type without efa", [(f"{GPU1}.instanceType", "g5.xlarge"), (f"{GPU1}.gpuAllocation", "dra")],
     f"{GPU1}.gpuAllocation: dra needs efaAllocation dra on the same group (GPUs and EFA devices are aligned by "
     "PCIe root within one DRA claim)"),
    ("on a CPU group", [("cpuNodegroups[0].gpuAllocation", "dra")],
     "cpuNodegroups[0].gpuAllocation: unknown key; allowed keys are desiredSize, instanceType, maxSize, minSize, "
     "name, nodeAutoRepair"),
    ("not a string", [(f"{GPU1}.gpuAllocation", 1)], f"{GPU1}.gpuAllocation: "),
]


@pytest.mark.parametrize("changes, expected", [pytest.param(c, e, id=i) for i, c, e in CASES])
def test_each_refusal_is_one_line_naming_the_field(changes, expected):
    line = error_line(*changes)
    assert line.startswith(P + expected) and "\n" not in line, line


def test_gpu_dra_needs_kubernetes_1_34_and_the_error_cites_the_nvidia_dra_page():
    """Every version EKS supports today is 1.34 or later, so the rule is held with an older one; the
    GPU rule is shown on a group whose EFA stays on the plugin (the EFA rule would speak first)."""
    p4d, p5 = parsed(*P5_DRA).gpu_nodegroups
    check_dra_kubernetes_version((p4d, p5), "1.34", "environments.dev.gpuNodegroups")
    with pytest.raises(ConfigError) as err:
        check_dra_kubernetes_version((p4d, replace(p5, efa_allocation="devicePlugin")), "1.33",
                                     "environments.dev.gpuNodegroups")
    assert err.value.line() == (f"{P}{GPU1}.gpuAllocation: dra needs kubernetesVersion 1.34 or later, got 1.33 "
                                f"({NVIDIA_DRA_PAGE})")


@pytest.mark.parametrize("name", sorted(PCIE_ROOT_LAYOUTS))
def test_each_known_layout_covers_every_gpu_and_efa_device_of_its_type(name):
    layout, instance = PCIE_ROOT_LAYOUTS[name], INSTANCE_TYPES[name]
    roots, rest = divmod(instance.gpus, layout.gpus_per_root)
    assert rest == 0 and roots * layout.efa_per_root == instance.efa_interfaces
    assert layout.source.startswith("https://docs.aws.amazon.com/")


def test_p5_layout_is_the_eks_guides_four_efa_devices_per_gpu_root_and_p4d_is_not_guessed():
    p5 = PCIE_ROOT_LAYOUTS["p5.48xlarge"]
    assert (p5.gpus_per_root, p5.efa_per_root) == (1, 4)
    assert "four EFA devices that share the same PCIe root with one GPU" in p5.source
    assert "p4d.24xlarge" not in PCIE_ROOT_LAYOUTS


def test_only_gpu_dra_groups_carry_the_gpu_allocation_label():
    assert GPU_ALLOCATION_LABEL not in nodegroup_labels("a", TRAINING_ROLE, gpu=True, efa=True, efa_allocation="dra")
    labels = nodegroup_labels("a", TRAINING_ROLE, gpu=True, efa=True, efa_allocation="dra", gpu_allocation="dra")
    assert labels[GPU_ALLOCATION_LABEL] == "dra"
    assert GPU_ALLOCATION_LABEL not in nodegroup_labels("c", TRAINING_ROLE, gpu=False, efa=False, gpu_allocation="dra")
