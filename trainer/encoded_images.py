"""The loader's half of a GPU decoder (--decode nvjpeg, nvimgcodec, dali): each image file's bytes
and its crop box, no pixels. The loader processes read each file, check that it is not cut short
(trainer.image_files), open its header (PIL opens a JPEG lazily: the size, no decode) and draw the
random-resized crop and the flip as the CPU path draws them; the micro-batch's bytes cross to the
training process as one tensor (EncodedFiles). The training process decodes them:
trainer/vision_decode.py, trainer/vision_dali.py."""

from __future__ import annotations

import io
import itertools
import operator
from collections.abc import Sequence

import torch
from torch.utils.data import Dataset, get_worker_info

from config.paths import read_bytes
from trainer.image_files import check_complete
from trainer.torchvision_compat import import_torchvision

# RandomResizedCrop's defaults, which the CPU path uses as well.
SCALE, RATIO = (0.08, 1.0), (3.0 / 4.0, 4.0 / 3.0)
NO_CROP = (-1, -1, -1, -1, 0)  # evaluation: resize and centre-crop on the device
# The largest image file a loader reads into memory: a JPEG of 100 megapixels is tens of MB, and
# ImageNet's largest under 20 MB.
MAX_FILE_BYTES = 256 << 20


class EncodedImages(Dataset):
    """An ImageFolder's (path, label) samples as (file bytes, label, crop, path): for training the
    crop box (top, left, height, width) and the flip drawn as RandomResizedCrop and
    RandomHorizontalFlip draw them; for evaluation NO_CROP. The path names a file the decoder
    cannot decode."""

    def __init__(self, samples: list[tuple[str, int]], classes: list[str], *, train: bool):
        self.samples, self.classes, self.train = samples, classes, train

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, tuple[int, ...], str]:
        from PIL import Image

        path, label = self.samples[index]
        # A regular file of bounded size (a PathProblem, unreadable, otherwise): the folder is on
        # shared storage, where a named pipe would hold this process in open() for ever and a link
        # to /dev/zero or a huge file would be read into memory whole.
        data = read_bytes(path, MAX_FILE_BYTES)
        check_complete(data)
        crop = NO_CROP
        # The header only (PIL decodes lazily), for evaluation too: PIL refuses a decompression bomb
        # here (DecompressionBombError, an unreadable image), as on the CPU path; a GPU decoder would
        # decode the whole of it, run out of memory and meet it again at every restart. Read from the
        # bytes already in hand: one open per file (a metadata round trip on FSx for Lustre), and the
        # box is drawn on the very bytes the decoder gets, even if the file is replaced meanwhile.
        with Image.open(io.BytesIO(data)) as header:
            if self.train:
                top, left, height, width = import_torchvision().transforms.RandomResizedCrop.get_params(
                    header, SCALE, RATIO)
                crop = (top, left, height, width, int(torch.rand(1) < 0.5))
        return torch.frombuffer(bytearray(data), dtype=torch.uint8), label, crop, str(path)

    @staticmethod
    def collate(batch) -> tuple[EncodedFiles, torch.Tensor, torch.Tensor, list[str]]:
        """The files' bytes in one tensor (EncodedFiles), the labels and the crops as tensors, the
        paths."""
        return (EncodedFiles.of([item[0] for item in batch]), torch.tensor([item[1] for item in batch]),
                torch.tensor([item[2] for item in batch], dtype=torch.int64), [item[3] for item in batch])


class EncodedFiles(Sequence):
    """A micro-batch's files, one after another in one uint8 tensor, as a sequence of 1-D byte
    tensors (views into it).

    A loader process hands its micro-batch to the training process through shared memory, one file
    descriptor per tensor storage, each received over a socket of its own by the loader's pin thread,
    which on a GPU then pins each. One tensor per file made that 256 descriptors (and 256 pinned
    copies) per micro-batch, in a thread that holds the interpreter's lock while it works: profiled
    on an H100 (bench/gpu_vision.py --profile), that thread spent 40% of a --decode dali run
    receiving files, while the decode thread waited for input 58% of its time. Here the bytes are one
    storage, one descriptor and one pinned copy; the files' ends are Python ints, pickled with it
    (bench/vision_loader.py --case transfer measures the receiving on a CPU)."""

    def __init__(self, flat: torch.Tensor, ends: tuple[int, ...]):
        self.flat, self.ends = flat, tuple(ends)  # ends[i]: where file i ends in flat
        self.starts = (0, *self.ends[:-1])

    @classmethod
    def of(cls, files: Sequence[torch.Tensor]) -> EncodedFiles:
        """The files' bytes (1-D uint8 tensors) copied one after another; in a loader process straight
        into shared memory, as torch's default_collate does, which the pickling then shares as is."""
        for i, f in enumerate(files):
            if f.dim() != 1 or f.dtype != torch.uint8:
                raise ValueError(f"file {i} is a {f.dtype} tensor of shape {tuple(f.shape)}, not 1-D uint8 bytes")
        ends = tuple(itertools.accumulate(len(f) for f in files))
        flat = torch.empty(ends[-1] if ends else 0, dtype=torch.uint8)
        if get_worker_info() is not None:
            flat.share_memory_()
        if files:
            torch.cat(list(files), out=flat)
        return cls(flat, ends)

    def __len__(self) -> int:
        return len(self.ends)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = operator.index(i)
        if not -len(self) <= i < len(self):
            raise IndexError(f"file {i} of {len(self)}")
        i %= len(self)
        return self.flat[self.starts[i]:self.ends[i]]

    def __iter__(self):
        return (self.flat[a:b] for a, b in zip(self.starts, self.ends))

    def pin_memory(self) -> EncodedFiles:
        """For the DataLoader's pin thread: the bytes in one pinned copy."""
        return EncodedFiles(self.flat.pin_memory(), self.ends)
