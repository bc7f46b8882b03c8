"""trainer.vision's model: a torchvision classifier with random weights, or a state_dict file's.
Nothing is downloaded: pretrained weights come from a file the user put on shared storage."""

from __future__ import annotations

import pickle

import torch

from config.workloads.vision import ClassifierConfig, VisionEfficiencyConfig
from trainer.cli import UsageError
from trainer.log import log
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



def place(model: torch.nn.Module, cfg: VisionEfficiencyConfig, device: torch.device,
          world_size: int) -> torch.nn.Module:
    """The model on its device, as the GPU runs it fastest: channels_last (cuDNN's NHWC kernels
    under bf16), and with --sync-batchnorm BatchNorm statistics over all ranks. SyncBatchNorm runs
    only on GPUs (torch's SyncBatchNorm refuses CPU tensors) and only means something with more
    than one rank; elsewhere the flag is logged and left out, so one preset runs everywhere."""
    if cfg.sync_batchnorm and device.type == "cuda" and world_size > 1:
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    elif cfg.sync_batchnorm:
        log(f"--sync-batchnorm: off here ({device.type}, {world_size} rank(s)); it needs GPUs and more than one rank")
    model = model.to(device)
    if device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)
    return model
