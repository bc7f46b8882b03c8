"""`--decode nvjpeg`: JPEGs decoded on the GPU, in batches, by nvJPEG through torchvision.io.

The loader processes do what needs no pixels: they read each file's bytes and its header (PIL
opens a JPEG lazily: the size, no decode) and draw the random-resized crop and the flip from the
image's seeded generator (trainer.vision_data.SeededAugmentation), the same draws as the CPU path
makes, so an image gets the same crop box whichever decoder runs. The training process then
decodes the micro-batch on its GPU with one `decode_jpeg` call, crops, resizes (bilinear with
antialias on the tensor: PIL's filter differs from it in the last bits), flips, and normalises
(vision_data.DeviceImages). A file that is not a JPEG (a PNG in the folder) is decoded by
torchvision on the CPU of the training process instead: slower, never wrong.

Refused where it cannot run: synthetic data (no files), no GPU, or a torchvision without its C++
operators (trainer/torchvision_compat.py), each one line before any process group.
"""

from __future__ import annotations

import math

import torch
from torch.utils.data import Dataset

from trainer.cli import UsageError
from trainer.torchvision_compat import import_torchvision, prepare
from trainer.vision_data import DeviceImages

JPEG_MAGIC = b"\xff\xd8\xff"
# RandomResizedCrop's defaults, which the CPU path uses as well.
SCALE, RATIO = (0.08, 1.0), (3.0 / 4.0, 4.0 / 3.0)
NO_CROP = (-1, -1, -1, -1, 0)  # evaluation: resize and centre-crop on the device


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


def check_decode(decode: str, source: str) -> None:
    """trainer.vision's check of --decode, before any process group."""
    if decode == "nvjpeg":
        check_nvjpeg(source, cuda=torch.cuda.is_available(), native_torchvision=prepare())


class EncodedImages(Dataset):
    """An ImageFolder's (path, label) samples as (file bytes, label, crop): for training the crop
    box (top, left, height, width) and the flip drawn as RandomResizedCrop and RandomHorizontalFlip
    draw them; for evaluation NO_CROP."""

    def __init__(self, samples: list[tuple[str, int]], classes: list[str], *, train: bool):
        self.samples, self.classes, self.train = samples, classes, train

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, tuple[int, ...]]:
        from PIL import Image

        path, label = self.samples[index]
        with open(path, "rb") as f:
            data = f.read()
        crop = NO_CROP
        if self.train:
            T = import_torchvision().transforms
            with Image.open(path) as header:  # the size only: PIL decodes lazily
                top, left, height, width = T.RandomResizedCrop.get_params(header, SCALE, RATIO)
            crop = (top, left, height, width, int(torch.rand(1) < 0.5))
        return torch.frombuffer(bytearray(data), dtype=torch.uint8), label, crop

    @staticmethod
    def collate(batch) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """Files differ in length: a list of byte tensors, the labels and the crops as tensors."""
        return ([item[0] for item in batch], torch.tensor([item[1] for item in batch]),
                torch.tensor([item[2] for item in batch], dtype=torch.int64))


class NvjpegImages:
    """A micro-batch of EncodedImages, decoded and augmented on the GPU: the model's input."""

    def __init__(self, device: torch.device, image_size: int):
        self.device, self.size = device, image_size
        self.images = DeviceImages(device)
        self.io = import_torchvision().io

    def __call__(self, encoded: list[torch.Tensor], labels: torch.Tensor, crops: torch.Tensor):
        decoded = self.decode(encoded)
        out = torch.stack([augment(image, crop, self.size) for image, crop in zip(decoded, crops.tolist())])
        return self.images(out, labels)

    def decode(self, encoded: list[torch.Tensor]) -> list[torch.Tensor]:
        rgb = self.io.ImageReadMode.RGB
        jpegs = [i for i, data in enumerate(encoded) if bytes(data[:3].tolist()) == JPEG_MAGIC]
        decoded: list[torch.Tensor | None] = [None] * len(encoded)
        if jpegs:
            for i, image in zip(jpegs, self.io.decode_jpeg([encoded[i] for i in jpegs], mode=rgb, device=self.device)):
                decoded[i] = image
        for i, image in enumerate(decoded):
            if image is None:
                decoded[i] = self.io.decode_image(encoded[i], mode=rgb).to(self.device, non_blocking=True)
        return decoded


def augment(image: torch.Tensor, crop: list[int], size: int) -> torch.Tensor:
    """One (3, H, W) uint8 image, on any device, to (3, size, size): the training crop box and flip
    EncodedImages drew, or for evaluation (NO_CROP) the resize to size/0.875 and the centre crop,
    as vision_data.transforms does on the CPU."""
    import_torchvision()
    from torchvision.transforms.v2 import functional as F

    top, left, height, width, flip = crop
    if height < 0:
        resized = F.resize(image, [math.ceil(size / 0.875)], antialias=True)
        return F.center_crop(resized, [size, size])
    out = F.resized_crop(image, top, left, height, width, [size, size], antialias=True)
    return out.flip(-1) if flip else out
