"""trainer/vision_resize.py: a micro-batch cropped, resized and flipped by two batched matrix
products, against torchvision's own resized_crop (the float path it takes for uint8 on a GPU)."""

import itertools

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from trainer import vision_resize
from trainer.torchvision_compat import import_torchvision
from trainer.encoded_images import NO_CROP
from trainer.vision_decode import augment, crops_of
from trainer.vision_resize import groups, resized_crops


def torchvision_float(image: torch.Tensor, box: list[int], size: int) -> torch.Tensor:
    """torchvision's result as its float path gives it (uint8 on a GPU: cast, resize, round)."""
    return augment(image.float(), box, size).round_().clamp_(0, 255).to(torch.uint8)


def random_case(generator: torch.Generator, n: int, low: int, high: int):
    """n images of random sizes in [low, high), each with a random box (a third of them NO_CROP):
    crops from a few pixels (so resizing up) to the whole image, flipped or not."""
    def draw(lo, hi):
        return int(torch.randint(lo, hi, (1,), generator=generator))
    images, boxes = [], []
    for i in range(n):
        h, w = draw(low, high), draw(low, high)
        images.append(torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=generator))
        if i % 3 == 2:
            boxes.append(list(NO_CROP))
            continue
        height, width = draw(2, h + 1), draw(2, w + 1)
        boxes.append([draw(0, h - height + 1), draw(0, w - width + 1), height, width, i % 2])
    return images, boxes


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("size,low,high", [(32, 20, 120), (7, 3, 60), (224, 150, 400)])
def test_a_micro_batch_is_torchvisions_resized_crop_to_the_last_rounding(size, low, high, dtype):
    """Every image of a mixed micro-batch (sizes, shrinking and enlarging boxes, flips, evaluation's
    resize and centre crop, portrait and landscape) within 1 of torchvision. In float32 all but a
    few pixels in 10,000 are equal (the weights are torch's, only the order of the sums differs);
    in float16, the GPU's default, the weights' rounding moves about 1 pixel in 20 by one level,
    either way (no bias)."""
    images, boxes = random_case(torch.Generator().manual_seed(size), 24 if size < 224 else 6, low, high)
    got = resized_crops(images, boxes, size, dtype=dtype)
    assert got.shape == (len(images), 3, size, size) and got.dtype == torch.uint8
    expected = torch.stack([torchvision_float(image, box, size) for image, box in zip(images, boxes)])
    difference = got.int() - expected.int()
    assert difference.abs().max() <= 1
    assert (difference != 0).float().mean() < (1e-3 if dtype == torch.float32 else 0.08)
    assert difference.float().mean().abs() < 0.01
    # torchvision's uint8 path on the CPU (integer arithmetic) is as close.
    native = torch.stack([augment(image, box, size) for image, box in zip(images, boxes)])
    assert (got.int() - native.int()).abs().max() <= 1


def test_boxes_at_the_edges_of_a_padded_batch_read_nothing_of_the_padding():
    """A small image beside a large one is padded with zeros: a box on its bottom-right edge, and
    evaluation of the whole of it, must weigh none of them (they would darken the edge)."""
    large = torch.full((3, 300, 280), 7, dtype=torch.uint8)
    small = torch.full((3, 40, 50), 200, dtype=torch.uint8)
    for box, dtype in itertools.product(([20, 30, 20, 20, 0], [0, 0, 40, 50, 1], list(NO_CROP), [39, 49, 1, 1, 0]),
                                        (torch.float32, torch.float16)):
        got = resized_crops([large, small], [list(NO_CROP), box], 16, dtype=dtype)
        assert torch.equal(got[1], torch.full((3, 16, 16), 200, dtype=torch.uint8)), box
        assert torch.equal(got[0], torch.full((3, 16, 16), 7, dtype=torch.uint8))


def test_a_box_shrunk_many_times_reads_all_its_taps():
    """1,000 pixels to 8: each output reads about 250 inputs (the triangle's width grows with the
    scale); tap_count must cover them all, or the sums would drop inputs."""
    generator = torch.Generator().manual_seed(1)
    image = torch.randint(0, 256, (3, 20, 1000), dtype=torch.uint8, generator=generator)
    box = [2, 0, 16, 1000, 1]
    for dtype in (torch.float32, torch.float16):
        got = resized_crops([image], [box], 8, dtype=dtype)
        assert (got[0].int() - torchvision_float(image, box, 8).int()).abs().max() <= 1


def test_groups_keep_each_padded_copy_within_the_budget_and_results_do_not_depend_on_them(monkeypatch):
    shapes = [(100, 100)] * 5 + [(1000, 1000)] + [(100, 100)] * 3
    budget = 3 * 100 * 100 * 4 * 3  # three small images
    runs = groups(shapes, budget)
    assert runs == [slice(0, 3), slice(3, 5), slice(5, 6), slice(6, 9)]
    for run in runs:
        tallest = max(h for h, _ in shapes[run])
        widest = max(w for _, w in shapes[run])
        assert len(shapes[run]) == 1 or (run.stop - run.start) * 3 * tallest * widest * 4 <= budget
    assert groups([(10, 10)], 1) == [slice(0, 1)]

    images, boxes = random_case(torch.Generator().manual_seed(2), 9, 10, 80)
    whole = resized_crops(images, boxes, 12)
    assert torch.equal(whole, resized_crops(images, boxes, 12, dtype=torch.float32))  # the CPU's default
    monkeypatch.setattr(vision_resize, "GROUP_BYTES", 1)  # every image alone
    assert torch.equal(resized_crops(images, boxes, 12), whole)


class KernelCount(TorchDispatchMode):
    """Operations that make a tensor's data (views, which make none, are not counted)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view:
            self.count += 1
        return func(*args, **(kwargs or {}))


def test_the_host_works_once_per_micro_batch_and_once_per_image_for_its_copy():
    """What bounded the GPU decoders was the host's work per image (bench/RESULTS.md): here each more
    image costs one operation, its copy into the padded batch, whatever its box; the rest is a fixed
    number per micro-batch. (bench/vision_resize.py times both paths.)"""
    counts = {}
    for n in (4, 36):
        images, boxes = random_case(torch.Generator().manual_seed(3), n, 20, 40)
        with KernelCount() as ours:
            resized_crops(images, boxes, 16)
        counts[n] = ours.count
    assert counts[36] - counts[4] == 32, counts
    assert counts[4] < 60, counts


def test_crops_of_goes_image_by_image_on_the_cpu():
    """On the CPU the matrix products would be the cost: there each image goes through torchvision."""
    import_torchvision()
    images, boxes = random_case(torch.Generator().manual_seed(4), 5, 20, 60)
    expected = torch.stack([augment(image, box, 16) for image, box in zip(images, boxes)])
    assert torch.equal(crops_of(images, boxes, 16), expected)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the batched path on a GPU: needs a GPU")
def test_on_a_gpu_it_is_torchvisions_result_there_and_makes_no_synchronisation():
    """On the GPU, where crops_of takes it: within 1 of torchvision's own uint8 path there, and of
    the CPU's result (the GPU's products run in float16), with no synchronisation torch sees."""
    from cuda_syncs import synchronising_calls

    images, boxes = random_case(torch.Generator().manual_seed(5), 24, 40, 300)
    gpu = [image.cuda() for image in images]
    got = crops_of(gpu, boxes, 64)  # also the warm-up
    torch.cuda.synchronize()
    expected = torch.stack([augment(image, box, 64) for image, box in zip(gpu, boxes)])
    assert got.is_cuda and (got.int() - expected.int()).abs().max() <= 1
    assert (got.cpu().int() - resized_crops(images, boxes, 64).int()).abs().max() <= 1
    assert synchronising_calls(lambda: crops_of(gpu, boxes, 64)) == []
