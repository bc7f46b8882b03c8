"""A micro-batch of decoded images cropped, resized and flipped in a few device operations for the
whole micro-batch, not a few per image (`--decode nvjpeg` and `--decode nvimgcodec`).

Per image, torchvision's `resized_crop` costs the host a crop, a cast, an antialiased interpolate,
a round, a cast back and a flip: on an H100 the host's work per image, not the GPU, bounded the GPU
decoders (bench/RESULTS.md, 2026-11-26). Here the micro-batch's crop boxes (views of their images)
are copied into one padded tensor and resized by two batched matrix products: bilinear
interpolation with antialias is separable, each output pixel a weighted sum of input rows and then
of input columns, and the weights are torch's own (`_upsample_bilinear2d_aa`: the triangle filter
stretched by the scale when it shrinks, cut at the input's edges, normalised). The flip is in the
weights too (a flipped image's output columns in reverse order), and so is evaluation's centre
crop. The weights for the whole micro-batch are made on the device from the boxes by a fixed number
of operations; the host's work per image is one copy.

Results are within 1 level of torchvision's float path (the one it takes for uint8 on a GPU),
tested against it (tests/trainer/test_vision_resize.py): in float32 all but a few pixels in
10,000 equal; in float16, the GPU's default so that the products run on tensor cores, about 1 in
20 differ by one level, without bias.

A micro-batch goes in groups whose padded copy fits GROUP_BYTES, so that one large image (a whole
photograph decoded for evaluation) does not pad every other image to its size.
"""

from __future__ import annotations

import math

import torch

# The most a group's padded copy may take: 32 ImageNet images of 500 x 500 need 48 MB in float16.
GROUP_BYTES = 256 * 2**20


def resized_crops(images: list[torch.Tensor], boxes: list[list[int]], size: int,
                  dtype: torch.dtype | None = None) -> torch.Tensor:
    """(N, 3, size, size) uint8 on the images' device from N (3, H, W) uint8 images, each with its
    box (top, left, height, width, flip) as encoded_images.EncodedImages draws it: a training crop
    resized to size x size, flipped when flip is 1; or for evaluation (height < 0, NO_CROP) the
    image resized so that its shorter side is ceil(size / 0.875), then its centre size x size, as
    vision_data.transforms does. The products run in `dtype`: by default float16 on a GPU (its
    tensor cores; pixels are exact in it, and the weights' rounding stays within the last level),
    float32 elsewhere."""
    if dtype is None:
        dtype = torch.float16 if images[0].is_cuda else torch.float32
    images, boxes = boxes_cut_out(images, boxes)
    runs = groups([tuple(image.shape[-2:]) for image in images], GROUP_BYTES, dtype.itemsize)
    if len(runs) == 1:
        return _resize_group(images, boxes, size, dtype)
    out = images[0].new_empty((len(images), 3, size, size))
    for run in runs:
        out[run] = _resize_group(images[run], boxes[run], size, dtype)
    return out


def boxes_cut_out(images: list[torch.Tensor], boxes: list[list[int]]) -> tuple[list[torch.Tensor], list[list[int]]]:
    """Each training box as a view of its image, and the box relative to it: the batch then pads
    and multiplies crops, not whole images (a box is 8-100% of its image)."""
    cut, relative = [], []
    for image, box in zip(images, boxes):
        top, left, height, width, flip = box
        if height > 0 and (height, width) != tuple(image.shape[-2:]):
            image, box = image[:, top:top + height, left:left + width], [0, 0, height, width, flip]
        cut.append(image)
        relative.append(box)
    return cut, relative


def groups(shapes: list[tuple[int, int]], budget: int, itemsize: int = 4) -> list[slice]:
    """Consecutive runs of images whose padded copy (count x 3 x tallest x widest x itemsize bytes)
    stays within budget; an image that alone exceeds it is a group of its own."""
    runs, start, tallest, widest = [], 0, 0, 0
    for i, (height, width) in enumerate(shapes):
        t, w = max(tallest, height), max(widest, width)
        if i > start and (i - start + 1) * 3 * t * w * itemsize > budget:
            runs.append(slice(start, i))
            start, t, w = i, height, width
        tallest, widest = t, w
    runs.append(slice(start, len(shapes)))
    return runs


def _resize_group(images: list[torch.Tensor], boxes: list[list[int]], size: int, dtype: torch.dtype) -> torch.Tensor:
    device, n = images[0].device, len(images)
    heights, widths = [int(i.shape[-2]) for i in images], [int(i.shape[-1]) for i in images]
    height, width = max(heights), max(widths)
    # One copy per image into the padded batch, converting as it copies. (torch's nested tensors
    # pad in one kernel on a GPU, but only from float, and send their sizes from pageable memory.)
    padded = images[0].new_zeros((n, 3, height, width), dtype=dtype)
    for target, image, h, w in zip(padded, images, heights, widths):
        target[:, :h, :w].copy_(image)
    rows, cols = axes(boxes, heights, widths, size)
    # From pinned memory: a copy from pageable memory may wait for the stream it is queued on.
    spec = torch.tensor([r + c for r, c in zip(rows, cols)], dtype=torch.float32, pin_memory=device.type == "cuda")
    weights = axis_weights(spec.to(device, non_blocking=True), size, max(height, width),  # rows, then columns
                           tap_count(rows, cols)).to(dtype)
    across = padded.view(n, 3 * height, width) @ weights[n:, :, :width].transpose(1, 2)   # (n, 3H, size)
    out = weights[:n, :, :height].unsqueeze(1) @ across.view(n, 3, height, size)           # (n, 3, size, size)
    return out.round_().clamp_(0, 255).to(torch.uint8)


def axes(boxes: list[list[int]], heights: list[int], widths: list[int], size: int):
    """(rows, columns), each five lists (start, length, resized, offset, flip) with one entry per
    image: the input span read, the length it is resized to, the first output index taken of it,
    and whether the axis runs backwards."""
    rows, cols = [], []
    resized_short = math.ceil(size / 0.875)
    for (top, left, height, width, flip), h, w in zip(boxes, heights, widths):
        if height < 0:  # evaluation: the shorter side to resized_short, the other in proportion
            short, long = (w, h) if w <= h else (h, w)
            new_long = int(resized_short * long / short)
            new_w, new_h = (resized_short, new_long) if w <= h else (new_long, resized_short)
            rows.append((0, h, new_h, int(round((new_h - size) / 2.0)), 0))
            cols.append((0, w, new_w, int(round((new_w - size) / 2.0)), 0))
        else:
            rows.append((top, height, size, 0, 0))
            cols.append((left, width, size, 0, flip))
    return [list(r) for r in zip(*rows)], [list(c) for c in zip(*cols)]


def axis_weights(spec: torch.Tensor, size: int, extent: int, taps: int) -> torch.Tensor:
    """(M, size, extent) float32: output index o of axis m is the weighted sum of its inputs, with
    torch's antialiased bilinear weights for resizing `length` inputs to `resized`, taken from
    output index `offset`, mirrored where flip is set. spec is (5, M): start, length, resized,
    offset, flip; `taps` bounds the inputs one output reads (see tap_count). The weights are made
    per tap, (M, size, taps), and scattered into the dense matrix: made dense, they cost a pass
    over (M, size, extent) per operation."""
    start, length, resized, offset, flip = (row.unsqueeze(1) for row in spec)        # (M, 1)
    o = torch.arange(size, device=spec.device, dtype=torch.float32)
    o = torch.where(flip > 0, size - 1 - o, o) + offset                              # (M, size)
    scale = length / resized
    support = torch.clamp(scale, min=1.0)      # the triangle's half-width: 1, or the scale if shrinking
    center = (scale * (o + 0.5)).unsqueeze(-1)                                        # (M, size, 1)
    first = torch.clamp(torch.trunc(center - support.unsqueeze(-1) + 0.5), min=0)
    last = torch.minimum(torch.trunc(center + support.unsqueeze(-1) + 0.5), length.unsqueeze(-1))
    j = first + torch.arange(taps, device=spec.device, dtype=torch.float32)           # (M, size, taps)
    weight = torch.clamp(1 - torch.abs((j - center + 0.5) / support.unsqueeze(-1)), min=0) * (j < last)
    weight = weight / weight.sum(-1, keepdim=True)
    index = (j + start.unsqueeze(-1)).clamp_(max=extent - 1).long()  # taps past `last` weigh 0
    return weight.new_zeros((len(weight), size, extent)).scatter_add_(-1, index, weight)


def tap_count(rows: list[list[int]], cols: list[list[int]]) -> int:
    """The most inputs an output index reads on any axis: 2 x the triangle's half-width, plus the
    one the rounding of its ends may add."""
    widest = max(max(length / resized, 1.0) for axis in (rows, cols) for length, resized in zip(axis[1], axis[2]))
    return math.ceil(2 * widest) + 2
