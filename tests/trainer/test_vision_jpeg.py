"""trainer/vision_jpeg.py: a JPEG is decoded at 1/2, 1/4 or 1/8 of its size only where the crop
box (training) or the resized image (evaluation) keeps at least the output size on each side; the
boxes drawn for a seed and the output size do not change; the output stays close to the full
decode's; other images go through torchvision's transforms bit for bit."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("torchvision", reason="torchvision is a pinned dependency")

from trainer import vision_jpeg  # noqa: E402
from trainer.torchvision_compat import import_torchvision  # noqa: E402
from trainer.vision_data import transforms  # noqa: E402
from trainer.vision_jpeg import open_image, reduction, resized_size  # noqa: E402

SIZE = 96  # output side: a 600x450 image then allows no reduction, 1/2 or 1/4, by the box drawn
SEEDS = range(24)


def _photo(path, width: int, height: int, *, quality: int = 96, subsampling: int = 0, fmt: str = "JPEG"):
    """Smooth colour fields and noise (compresses like a photograph). ImageNet's JPEGs are mostly
    quality 96 without chroma subsampling (the bench's source, bench/vision_loader.py)."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(width * 7 + height)
    low = Image.fromarray((rng.random((6, 8, 3)) * 200 + 25).astype(np.uint8)).resize((width, height), Image.BILINEAR)
    pixels = np.asarray(low, dtype=np.float32) + 12 * rng.standard_normal((height, width, 3), dtype=np.float32)
    image = Image.fromarray(pixels.clip(0, 255).astype(np.uint8))
    if fmt == "JPEG":
        image.save(path, quality=quality, subsampling=subsampling)
    else:
        image.save(path)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("jpeg")
    return {"jpeg": _photo(root / "a.jpg", 600, 450), "subsampled": _photo(root / "b.jpg", 450, 600, quality=85,
                                                                           subsampling=2),
            "png": _photo(root / "c.png", 600, 450, fmt="PNG")}


class Spy:
    """Records each transform call's crop box and the factor the image was decoded at."""

    def __init__(self, monkeypatch):
        self.boxes, self.factors = [], []
        box, decoded = vision_jpeg.ReducedRandomResizedCrop.box, vision_jpeg.decoded_rgb

        def spy_box(crop, image):
            self.boxes.append(box(crop, image))
            return self.boxes[-1]

        def spy_decoded(image, s):
            rgb, factor = decoded(image, s)
            self.factors.append((factor, rgb.size))
            return rgb, factor

        monkeypatch.setattr(vision_jpeg.ReducedRandomResizedCrop, "box", spy_box)
        monkeypatch.setattr(vision_jpeg, "decoded_rgb", spy_decoded)


def _run(transform, path, seed: int):
    torch.manual_seed(seed)
    out = transform(open_image(path))
    return out, torch.rand(1).item()  # the draw after the transform: the same draws were consumed


def test_the_reduction_is_the_largest_that_keeps_the_region_at_least_the_output_size_each_side(files):
    from PIL import Image
    with Image.open(files["jpeg"]) as jpeg:
        assert reduction(jpeg, 8 * 64, 8 * 64, 64, 64) == 8
        assert reduction(jpeg, 8 * 64 - 1, 8 * 64, 64, 64) == 4
        assert reduction(jpeg, 300, 128, 64, 64) == 2 and reduction(jpeg, 300, 127, 64, 64) == 1
        assert reduction(jpeg, 600, 200, 64, 32) == 4  # each side against its own output side
    with Image.open(files["png"]) as png:
        assert reduction(png, 600, 450, 64, 64) == 1  # not a JPEG
    with Image.open(files["jpeg"]) as jpeg:
        jpeg.load()
        assert reduction(jpeg, 600, 450, 64, 64) == 1  # already decoded: nothing to save


def test_training_crops_draw_the_same_boxes_and_flips_for_a_seed_and_reduce_only_where_the_rule_allows(
        files, monkeypatch):
    spy = Spy(monkeypatch)
    reduced, full = transforms(SIZE)[0], transforms(SIZE, reduce=False)[0]
    T = import_torchvision().transforms
    reductions = set()
    for seed in SEEDS:
        for name in ("jpeg", "subsampled"):
            out, after = _run(reduced, files[name], seed)
            expected, expected_after = _run(full, files[name], seed)
            box, full_box = spy.boxes[-2:]
            (factor, decoded_size), (full_factor, _) = spy.factors[-2:]
            assert box == full_box and after == expected_after  # the same draws, the same box
            torch.manual_seed(seed)
            with open_image(files[name]) as header:  # torchvision's own draw on the full-size image
                assert box == T.RandomResizedCrop.get_params(header, (0.08, 1.0), (3 / 4, 4 / 3))
            assert out.shape == expected.shape == (3, SIZE, SIZE) and out.dtype == torch.uint8
            top, left, height, width = box
            assert full_factor == 1
            # The largest reduction that keeps the box at least SIZE on each side, and no other.
            allowed = max([s for s in (1, 2, 4, 8) if height >= s * SIZE and width >= s * SIZE])
            assert factor == allowed, (box, factor)
            with open_image(files[name]) as header:
                w, h = header.size
            assert decoded_size == (-(-w // factor), -(-h // factor))  # libjpeg really decoded it smaller
            reductions.add(factor)
            if factor == 1:
                assert torch.equal(out, expected)
    assert reductions == {1, 2, 4}  # the seeds exercise each case this image allows


def _difference(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """(mean absolute difference in uint8 levels, PSNR in dB)."""
    d = a.float() - b.float()
    return d.abs().mean().item(), 10 * torch.log10(255 ** 2 / d.pow(2).mean().clamp_min(1e-12)).item()


def test_a_reduced_decode_stays_within_two_levels_on_average_of_the_full_decode(files):
    # The tolerance: a mean absolute difference under 2.5 levels of 255 and a PSNR above 38 dB per
    # image. Why that much is expected: the two paths low-pass differently (libjpeg's scaled IDCT,
    # then PIL's bilinear over a region s times smaller, against PIL's bilinear over the full
    # pixels), which moves noise-like detail by a level or two and single pixels by up to about 11
    # on this noisy test image (measured: mean 0.3-1.7, PSNR 41-50 dB). For scale: GPU and PIL
    # decodes of one JPEG differ by up to 15 levels (bench/RESULTS.md), and the --decode nvjpeg
    # path's resampler is held to a mean under 4 (tests/trainer/test_vision_decode.py).
    for index, (reduced, full) in enumerate(zip(transforms(SIZE), transforms(SIZE, reduce=False))):
        for seed in SEEDS:
            for name in ("jpeg", "subsampled"):
                out, _ = _run(reduced, files[name], seed)
                expected, _ = _run(full, files[name], seed)
                mean, psnr = _difference(out, expected)
                assert mean < 2.5 and psnr > 38, (("train", "val")[index], name, seed, mean, psnr)


def test_evaluation_reduces_only_while_the_resized_image_is_still_a_reduction(files, monkeypatch):
    spy = Spy(monkeypatch)
    for size, allowed in ((SIZE, 4), (150, 2), (32, 8), (224, 1)):  # short side 450 to ceil(size / 0.875)
        reduced, full = transforms(size)[1], transforms(size, reduce=False)[1]
        out, _ = _run(reduced, files["jpeg"], 0)
        expected, _ = _run(full, files["jpeg"], 0)
        assert spy.factors[-2][0] == allowed and out.shape == expected.shape == (3, size, size)
        if allowed == 1:
            assert torch.equal(out, expected)


def test_the_resized_size_is_torchvisions(files):
    from PIL import Image
    T = import_torchvision().transforms
    for width, height in ((600, 450), (450, 600), (500, 333), (333, 500), (73, 997), (256, 256), (1001, 999)):
        for short in (37, 74, 256):
            assert resized_size(width, height, short) == T.Resize(short)(Image.new("RGB", (width, height))).size


def test_a_png_goes_through_torchvisions_transforms_bit_for_bit(files, monkeypatch):
    spy = Spy(monkeypatch)
    T = import_torchvision().transforms
    old_train = T.Compose([T.RandomResizedCrop(SIZE), T.RandomHorizontalFlip(), T.PILToTensor()])
    old_val = T.Compose([T.Resize(-(-SIZE * 8 // 7)), T.CenterCrop(SIZE), T.PILToTensor()])
    for seed in SEEDS:
        for new, old in zip(transforms(SIZE), (old_train, old_val)):
            out, after = _run(new, files["png"], seed)
            torch.manual_seed(seed)
            with open_image(files["png"]) as f:
                expected = old(f.convert("RGB"))
            assert torch.equal(out, expected) and after == torch.rand(1).item()
    assert {factor for factor, _ in spy.factors} == {1}


def test_open_image_reads_the_header_only_and_the_decode_releases_the_file(files):
    from trainer.vision_jpeg import decoded_rgb
    image = open_image(files["jpeg"])
    assert image.fp is not None and image.tile  # header read, pixels not yet
    rgb, factor = decoded_rgb(image, 2)
    assert factor == 2 and rgb.size == (300, 225) and rgb.mode == "RGB"
    assert image.fp is None  # the file handle is released
