"""trainer.vision's model: a torchvision classifier with random weights, or a state_dict file's.
Nothing is downloaded: pretrained weights come from a file the user put on shared storage."""

from __future__ import annotations

import pickle

import torch

from config.workloads.vision import ClassifierConfig
from trainer.cli import UsageError
from trainer.safe_load import weights_only_refusal
from trainer.torchvision_compat import import_torchvision


def build_classifier(cfg: ClassifierConfig, classes: int) -> torch.nn.Module:
    model = import_torchvision().models.get_model(cfg.name, weights=None, num_classes=classes)
    if cfg.init_from:
        try:
            state = torch.load(cfg.init_from, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:  # code in a file on shared storage never runs
            raise UsageError("--init-from", f"{cfg.init_from}: {weights_only_refusal(exc)}") from None
        except Exception as exc:  # not a torch.save file at all (text, another format, truncated)
            raise UsageError("--init-from", f"{cfg.init_from} is not a torch.save file ({str(exc).strip()[:200]})") from None
        try:
            model.load_state_dict(state.get("model", state) if isinstance(state, dict) else state)
        except Exception as exc:  # a foreign file or another model's weights: one line
            raise UsageError("--init-from", f"{cfg.init_from} is not a {cfg.name} state_dict with {classes} "
                                            f"classes ({str(exc).strip().splitlines()[0][:200]})") from None
    return model


def to_device(images: torch.Tensor, labels: torch.Tensor, device: torch.device):
    """A batch on the GPU, images channels_last like the model (trainer.vision puts it so there)."""
    if device.type != "cuda":
        return images, labels
    return (images.to(device, non_blocking=True, memory_format=torch.channels_last),
            labels.to(device, non_blocking=True))
