"""trainer.vision_model: torchvision's classifiers with random weights and the class count, or a
local state_dict's weights; another model's file is one line."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("torchvision", reason="torchvision is a pinned dependency")

from config.workloads.vision import CLASSIFIERS, ClassifierConfig  # noqa: E402
from trainer.cli import UsageError  # noqa: E402
from trainer.vision_model import build_classifier  # noqa: E402


@pytest.mark.parametrize("name", CLASSIFIERS)
def test_the_models_come_from_torchvision_with_random_weights_and_the_class_count(name):
    model = build_classifier(ClassifierConfig(name), classes=7)
    head = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1]
    assert head.out_features == 7


def test_init_from_loads_a_local_state_dict_and_refuses_another_models_in_one_line(tmp_path):
    source = build_classifier(ClassifierConfig("resnet18"), classes=5)
    torch.save(source.state_dict(), tmp_path / "w.pt")
    loaded = build_classifier(ClassifierConfig("resnet18", str(tmp_path / "w.pt")), classes=5)
    assert torch.equal(loaded.fc.weight, source.fc.weight)
    with pytest.raises(UsageError, match="--init-from") as err:
        build_classifier(ClassifierConfig("resnet18", str(tmp_path / "w.pt")), classes=9)
    assert "\n" not in str(err.value)


def test_sync_batchnorm_is_left_out_with_a_line_where_torch_cannot_run_it(capsys):
    """torch's SyncBatchNorm runs on GPUs only: on CPU or one rank the model keeps BatchNorm, and
    the log says so, so the EfficientNet-B7 preset (which asks for it) still runs anywhere."""
    import torch

    from config.workloads.vision import ClassifierConfig, VisionEfficiencyConfig
    from trainer.vision_model import build_classifier, place

    model = place(build_classifier(ClassifierConfig(name="resnet18"), 4), VisionEfficiencyConfig(sync_batchnorm=True),
                  torch.device("cpu"), world_size=2)
    assert not any(isinstance(m, torch.nn.SyncBatchNorm) for m in model.modules())
    assert "--sync-batchnorm: off here (cpu, 2 rank(s))" in capsys.readouterr().out
    converted = torch.nn.SyncBatchNorm.convert_sync_batchnorm(build_classifier(ClassifierConfig(name="resnet18"), 4))
    assert sum(isinstance(m, torch.nn.SyncBatchNorm) for m in converted.modules()) == 20  # what a GPU run gets
