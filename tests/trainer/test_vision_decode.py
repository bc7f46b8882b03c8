"""trainer.vision_decode (--decode nvjpeg) on CPU, up to the GPU: the refusals, the crops the
loader draws (the CPU path's own), and the crop, resize and flip the GPU applies, run here on a
CPU tensor against the CPU path's result. The nvJPEG decode itself needs a GPU."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("torchvision", reason="torchvision is a pinned dependency")

from config.workloads.vision import ImageDataConfig, SyntheticImagesConfig  # noqa: E402
from trainer import vision_data  # noqa: E402
from trainer.cli import UsageError  # noqa: E402
from trainer.vision_decode import NO_CROP, EncodedImages, augment, check_nvjpeg  # noqa: E402


@pytest.mark.parametrize("source, cuda, native, says", [
    ("synthetic", True, True, "--data synthetic has none"),
    ("/data", False, True, "this machine has none"),
    ("/data", True, False, "C++ operators"),
])
def test_nvjpeg_is_refused_in_one_line_where_it_cannot_run(source, cuda, native, says):
    with pytest.raises(UsageError, match="^--decode: nvjpeg") as e:
        check_nvjpeg(source, cuda=cuda, native_torchvision=native)
    assert says in str(e.value) and "--decode cpu" in str(e.value) and "\n" not in str(e.value)
    check_nvjpeg("/data", cuda=True, native_torchvision=True)  # a GPU with torchvision's operators: allowed


def _decoded(path) -> torch.Tensor:
    from PIL import Image
    from torchvision.transforms.functional import pil_to_tensor
    with Image.open(path) as f:
        return pil_to_tensor(f.convert("RGB"))


def test_the_loader_reads_bytes_and_draws_the_cpu_paths_crop_and_the_gpu_side_applies_it(image_folder):
    data = ImageDataConfig(source=str(image_folder), image_size=16, decode="nvjpeg")
    train, val, classes = vision_data.build_datasets(data, SyntheticImagesConfig(), seed=0)
    assert isinstance(train, EncodedImages) and isinstance(val, EncodedImages) and classes == 2
    cpu_train, _ = vision_data.transforms(16)
    for index in (0, 5, 30):
        path, label = train.samples[index]
        torch.manual_seed(index)
        encoded, got_label, crop = train[index]
        assert bytes(encoded.tolist()) == open(path, "rb").read() and got_label == label
        torch.manual_seed(index)
        expected = cpu_train(_image(path))  # the CPU path under the same seed: the same draws
        out = augment(_decoded(path), list(crop), 16)
        assert out.dtype == torch.uint8 and out.shape == expected.shape == (3, 16, 16)
        # The same box and flip; only the resampling filter differs (tensor vs PIL bilinear).
        assert (out.float() - expected.float()).abs().mean() < 4
        flipped = augment(_decoded(path), [*crop[:4], 1 - crop[4]], 16)
        assert (flipped.float() - expected.float()).abs().mean() > (out.float() - expected.float()).abs().mean()
    encoded, _, crop = val[0]
    assert crop == NO_CROP and augment(_decoded(val.samples[0][0]), list(crop), 16).shape == (3, 16, 16)
    images, labels, crops = EncodedImages.collate([train[0], train[1], train[2]])
    assert len(images) == 3 and labels.shape == (3,) and crops.shape == (3, 5)


def _image(path):
    from PIL import Image
    with Image.open(path) as f:
        return f.convert("RGB")
