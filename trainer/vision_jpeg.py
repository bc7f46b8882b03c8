"""JPEG decode at reduced size where the output loses nothing (PIL's `Image.draft`).

libjpeg can scale a JPEG by 1/2, 1/4 or 1/8 while decoding it, in the DCT domain: it computes
fewer output pixels per 8x8 block, so the decode costs a fraction of a full one, and each pixel
of the reduced image is the average of an s x s block of the full one. The training and
evaluation transforms take that shortcut only where it changes no output pixel's source:

- training (RandomResizedCrop): the crop box is drawn first, on the full-size dimensions from the
  file's header (PIL opens lazily), with the very draws torchvision's RandomResizedCrop makes, so
  the boxes, their distribution and the flip are the same for a seed whether or not the image is
  reduced. The image is reduced by the largest s in (8, 4, 2) that leaves the box at least the
  output size on each side; the box is mapped into the reduced image (divided by s) and resampled
  from there. The resize is then still a reduction, as before, never an enlargement from fewer
  pixels than before;
- evaluation (Resize of the short side to size / 0.875, CenterCrop): reduced by the largest s
  that leaves the image at least the resized size on each side; the resize of the reduced image
  then gives the same dimensions, and the same centre crop follows.

Otherwise (the box smaller than s x the output, a file that is not a baseline JPEG, an image
already decoded) the full decode runs and the output is bit-identical to torchvision's transforms.
A reduced decode differs from the full one by its low-pass filter (libjpeg's scaled IDCT and
PIL's bilinear filter over a region s times smaller, against PIL's bilinear filter alone):
tests/trainer/test_vision_jpeg.py bounds the difference.
"""

from __future__ import annotations

import math

from config.paths import file_status
from trainer.torchvision_compat import import_torchvision

REDUCTIONS = (8, 4, 2)  # the scales libjpeg decodes at besides 1, largest first


def open_image(path: str):
    """ImageFolder's loader: the file opened, its header read, nothing decoded yet (the transform
    decodes, at the size it needs). torchvision's default loader decodes at once. A named pipe (a
    PathProblem, an unreadable image) would hold the loader in open() for ever."""
    from PIL import Image
    file_status(path)
    return Image.open(path)


def reduction(image, width: int, height: int, out_width: int, out_height: int) -> int:
    """The largest s in REDUCTIONS with a width x height region of `image` still at least
    out_width x out_height after division by s; 1 where there is none, or where `image` is not a
    JPEG still undecoded."""
    if getattr(image, "format", None) != "JPEG" or getattr(image, "tile", None) is None or len(image.tile) != 1:
        return 1
    for s in REDUCTIONS:
        if width >= s * out_width and height >= s * out_height:
            return s
    return 1


def decoded_rgb(image, s: int):
    """(RGB image, factor): `image` decoded at 1/s of its size where libjpeg allows (factor s: a
    full-size coordinate x is x / factor in the result), else in full (factor 1). The file is
    closed after."""
    from PIL import ImageFile
    factor = 1.0
    if s > 1:
        width, height = image.size
        # draft picks the largest scale s' with size // request >= s'; asking for size // s gives
        # exactly s (size // (size // s) lies in [s, 2s)). It returns the full image's box in the
        # reduced image's coordinates, or None where it cannot scale (it then leaves the image as is).
        drafted = image.draft("RGB", (width // s, height // s))
        if drafted is not None:
            factor = width / drafted[1][2]
    rgb = image.convert("RGB")
    if isinstance(image, ImageFile.ImageFile):
        image.close()  # a multi-frame file (MPO) keeps its handle after the decode
    return rgb, factor


class ReducedRandomResizedCrop:
    """torchvision's RandomResizedCrop(size) with default scale and ratio and bilinear resampling,
    decoding a JPEG at reduced size where the drawn box allows (module docstring)."""

    def __init__(self, size: int, *, reduce: bool = True):
        T = import_torchvision().transforms
        self.full = T.RandomResizedCrop(size)
        self.size, self.reduce = (size, size), reduce

    def box(self, image) -> tuple[int, int, int, int]:
        """(top, left, height, width) drawn on the full-size dimensions, as RandomResizedCrop draws."""
        return self.full.get_params(image, self.full.scale, self.full.ratio)

    def __call__(self, image):
        from PIL import Image
        F = import_torchvision().transforms.functional
        top, left, height, width = self.box(image)
        out_h, out_w = self.size
        s = reduction(image, width, height, out_w, out_h) if self.reduce else 1
        image, factor = decoded_rgb(image, s)
        if factor == 1:
            return F.resized_crop(image, top, left, height, width, list(self.size), self.full.interpolation,
                                  antialias=True)
        region = (left / factor, top / factor, (left + width) / factor, (top + height) / factor)
        return image.resize((out_w, out_h), Image.BILINEAR, box=region)


def resized_size(width: int, height: int, short: int) -> tuple[int, int]:
    """(width, height) after torchvision's Resize(short): the short side to `short`, the long one
    scaled and truncated."""
    if width <= height:
        return short, int(short * height / width)
    return int(short * width / height), short


class ReducedResizeCenterCrop:
    """Resize(ceil(size / 0.875)) then CenterCrop(size), as torchvision's evaluation transforms,
    decoding a JPEG at reduced size where the resized image is still a reduction (module docstring)."""

    def __init__(self, size: int, *, reduce: bool = True):
        T = import_torchvision().transforms
        self.short, self.size, self.reduce = math.ceil(size / 0.875), size, reduce
        self.full = T.Compose([T.Resize(self.short), T.CenterCrop(size)])

    def __call__(self, image):
        from PIL import Image
        F = import_torchvision().transforms.functional
        width, height = image.size
        out_w, out_h = resized_size(width, height, self.short)
        s = reduction(image, width, height, out_w, out_h) if self.reduce else 1
        image, factor = decoded_rgb(image, s)
        if factor == 1:
            return self.full(image)
        resized = image.resize((out_w, out_h), Image.BILINEAR, box=(0, 0, width / factor, height / factor))
        return F.center_crop(resized, [self.size, self.size])
