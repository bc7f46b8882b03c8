"""Which decoder turns a loader's micro-batch into the model's input (--decode): the one-line
refusals before any process group, where a decoder cannot run here, and the decoder itself, made
for a rank's device. --decode cpu: the loader processes decode, and the device only normalises
(vision_data.DeviceImages); nvjpeg and nvimgcodec: trainer/vision_decode.py; dali:
trainer/vision_dali.py."""

from __future__ import annotations

import torch

from config.workloads.vision import ImageDataConfig
from trainer.cli import UsageError
from trainer.torchvision_compat import prepare
from trainer.vision_dali import DaliImages, import_dali
from trainer.vision_data import DeviceImages, UnreadableImages
from trainer.vision_decode import CodecImages, NvjpegImages, import_nvimgcodec


def check_nvjpeg(source: str, *, cuda: bool, native_torchvision: bool) -> None:
    """UsageError naming --decode when nvJPEG cannot decode this run's images here."""
    if source == "synthetic":
        raise UsageError("--decode", "nvjpeg decodes JPEG files; --data synthetic has none (use --decode cpu)")
    if not cuda:
        raise UsageError("--decode", "nvjpeg decodes on a GPU and this machine has none (torch.cuda.is_available() "
                                     "is False); use --decode cpu")
    if not native_torchvision:
        raise UsageError("--decode", "nvjpeg needs torchvision's C++ operators, which this torchvision build lacks "
                                     "(install the build matching torch from PyTorch's index); use --decode cpu")


# The package each decoder of the training process imports (the trainer images install them).
PACKAGES = {"nvimgcodec": "nvidia-nvimgcodec-cu12", "dali": "nvidia-dali-cuda120"}


def check_installed(decode: str, source: str, *, installed: bool) -> None:
    """UsageError naming --decode when `decode` (nvimgcodec, dali) cannot decode this run's images
    here: synthetic data has no files, or its package is missing. A CPU is allowed: both run there."""
    if source == "synthetic":
        raise UsageError("--decode", f"{decode} decodes image files; --data synthetic has none (use --decode cpu)")
    if not installed:
        raise UsageError("--decode", f"{decode} needs the {PACKAGES[decode]} package, which the trainer images "
                                     "install and this Python lacks; use --decode cpu")


def check_decode(decode: str, source: str) -> None:
    """trainer.vision's check of --decode, before any process group."""
    if decode == "nvjpeg":
        check_nvjpeg(source, cuda=torch.cuda.is_available(), native_torchvision=prepare())
    elif decode in PACKAGES:
        check_installed(decode, source, installed=installed(decode))


def installed(decode: str) -> bool:
    """Whether `decode`'s package (nvimgcodec, dali) imports here."""
    if decode == "dali":
        return import_dali() is not None
    return import_nvimgcodec() is not None


def device_input(data: ImageDataConfig, device: torch.device, unreadable: UnreadableImages | None = None):
    """What turns a loader's micro-batch into the model's input on `device`, for data.decode; a GPU
    decoder counts the files it cannot decode in `unreadable`."""
    if data.decode == "nvjpeg":
        return NvjpegImages(device, data.image_size, unreadable=unreadable)
    if data.decode == "nvimgcodec":
        # Its CPU threads parse headers (and Huffman-decode what CUDA decodes); the loader
        # processes beside it only read files, so they share the rank's loader vCPUs.
        return CodecImages(device, data.image_size, hw_decoder_load=data.hw_decoder_load,
                           threads=max(1, data.workers), unreadable=unreadable)
    if data.decode == "dali":
        return DaliImages(device, data.image_size, hw_decoder_load=data.hw_decoder_load,
                          threads=max(1, data.workers), unreadable=unreadable, regions=data.dali_regions)
    return DeviceImages(device)
