"""`--decode dali`: NVIDIA DALI decodes, crops, resizes and flips each training micro-batch in its own
C++ threads and CUDA streams, with no Python per image in the training process.

The other GPU decoders (trainer/vision_decode.py) spend the host's time per image: on an H100,
nvImageCodec's decode ran at 3,821 images/s with 262 µs of host work an image, 118 µs of it this
trainer's Python (bench/RESULTS.md). DALI's graph takes the micro-batch's bytes and boxes as whole
batches (fn.external_source) and does the rest without returning to Python: the decode of each
image (fn.decoders.image, with --hw-decoder-load of the batch offered to the GPU's hardware JPEG
decoder), the crop of its box, the antialiased resize to the training size and the flip. It is
what NVIDIA's ResNet-50 training examples feed the GPU with.

Each training box is decoded alone (fn.decoders.image_slice, a region of interest) where its JPEG
has no subsampled chroma (4:4:4, greyscale: raw ImageNet's usual files), and each other image is
decoded whole and then cropped: a choice per file, made from the frame header's sampling factors
(trainer.image_files.region_stays_on_gpu) with DALI's conditional execution (an `if` on a per-sample
predicate in a @pipeline_def with enable_conditionals). DALI 2.4.0 decodes through nvImageCodec
0.9.0, whose nvJPEG decoders, the hardware one and the CUDA one, refuse a region of a
chroma-subsampled JPEG (4:2:0, 4:2:2: what `trainer.data imagenet --reencode` writes) when the
chroma is upsampled as libjpeg-turbo does it (below) and nvJPEG is older than 13.2 (the CUDA 12
wheels' is 12.x): nvImageCodec at commit b8eeb98 ("v0.9.0 release") of
fork-the-planet/NVIDIA___nvImageCodec, extensions/nvjpeg/hw_decoder.cpp lines 1112-1119 and
cuda_decoder.cpp lines 519-525, with the version rule in nvjpeg_utils.h. Such a box then went to the
next backend, the CPU's libjpeg-turbo, silently: a whole micro-batch of re-encoded ImageNet decoded
on the host. A whole image meets no such rule. (vision_decode.CodecImages's probes find the same
rule, and nvImageCodec there decodes such files whole too.) On an H100 the whole-image decode of
4:2:0 files made 2.0-2.3x the images of their region decode, and on 4:4:4 files the region decode
was faster in two runs of three (bench/RESULTS.md): the choice per file is to keep both gains (not
yet measured on a GPU: bench/gpu_vision.py's decode-only rows and its trainer runs dali against
dali:0.9:none measure it). Before training, the graph runs on 4:2:0 and 4:4:4 test JPEGs, together
and each kind alone; where it does not run (a DALI without conditional execution on this device),
one line says so and every image is decoded whole. `--dali-regions all` (each box alone) and
`none` (each image whole) are for a benchmark, or for a GPU where the choice does not pay.

The loader processes still read the files and draw every box and flip (encoded_images.EncodedImages):
an image gets the same box whichever decoder runs, and a resumed run the same micro-batches.
Evaluation micro-batches are decoded whole by DALI and resized and centre-cropped by
vision_decode.crops_of, as with the other GPU decoders: DALI's centre crop rounds differently from
torchvision's, and evaluation is a fiftieth of ImageNet's images.

DALI's pixels are not PIL's: its GPU decoder's IDCT and its resize filter are its own, so a pixel
may differ from the CPU path by a few levels (the tests bound the mean). Its chroma is upsampled as
libjpeg-turbo's "fancy" filter does it (jpeg_fancy_upsampling), which its GPU decoder does not do
by default. A micro-batch with a file DALI's decoder fails on (one that passed the loader's
checks and does not decode) is decoded again by nvImageCodec (vision_decode.CodecImages, which
DALI's package brings), which stands in for the bad file and counts it; the warning names the
file. Any other DALI error is raised, and so is DALI failing on RETRIES micro-batches in a row that
nvImageCodec decodes without a bad file. Without a GPU DALI runs the same graph on the CPU of the
training process: a slow way to try the path, said in the log.

DALI's threads exist in the training process when the evaluation loader forks its worker
processes (after the first training micro-batches), as nvImageCodec's do: the workers only read
files and never touch DALI or CUDA.
"""

from __future__ import annotations

import collections
import re
import sys
from collections.abc import Sequence

import numpy as np
import torch

from config.workloads.vision import DALI_REGIONS
from trainer.cli import UsageError
from trainer.vision_data import DecoderStopped, DeviceImages, UnreadableImages
from trainer.image_files import probe_jpeg, region_stays_on_gpu
from trainer.log import log
from trainer.vision_decode import DECODED, CodecImages, crops_of, indexed, release_finished


# What DALI's decoders raise for a file they cannot decode ("Failed to decode sample #1 : reason"),
# and the operator that raised it, named at the head of every DALI error.
FAILED_SAMPLE = re.compile(r"Failed to decode sample #(\d+) ?:(.*)")
OPERATOR = re.compile(r"operator `nvidia\.dali\.fn\.([\w.]+)`")
# Micro-batches in a row that DALI fails on and nvImageCodec decodes without a bad file, before the
# run stops: DALI failing on good files is not a few bad files.
RETRIES = 3


def import_dali():
    """DALI's Python package, or None where it is not installed."""
    try:
        import nvidia.dali
        import nvidia.dali.fn  # noqa: F401 (the operators, imported once here)
    except ImportError:
        return None
    return nvidia.dali


def what_dali_said(error: BaseException) -> str:
    """One line of a DALI error: the line after its "encountered:" (the operator's own words); for an
    error raised while DALI's AutoGraph ran the graph's function ("in user code:" and a traceback),
    its last line, the error itself; else its first line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if "encountered:" in lines[:-1]:
        return lines[lines.index("encountered:") + 1]
    if lines[:1] == ["in user code:"]:
        return lines[-1]
    return lines[0] if lines else type(error).__name__


def training_graph(dali, decoder: dict, size: int, regions: str):
    """DALI's graph for a training micro-batch (a @pipeline_def's function): each file's bytes, box
    and flip in; the box decoded (alone, or the whole image then cropped; per file where `regions`
    is "per-file", by the "whole" predicate), resized to size x size with antialiasing and flipped
    where mirror is 1; uint8, planar (3, size, size) like a torch image, no mean or std."""
    fn, types = dali.fn, dali.types
    encoded = fn.external_source(name="encoded", dtype=types.UINT8)
    anchor = fn.external_source(name="anchor", dtype=types.INT32)  # (left, top)
    shape = fn.external_source(name="shape", dtype=types.INT32)  # (width, height)
    mirror = fn.external_source(name="mirror", dtype=types.INT32)
    box = dict(normalized_anchor=False, normalized_shape=False)
    if regions == "per-file":
        whole = fn.external_source(name="whole", dtype=types.BOOL)
        if whole:  # DALI's conditional: each sample goes one way, and the branches merge after
            image = fn.slice(fn.decoders.image(encoded, **decoder), anchor, shape, **box)
        else:
            image = fn.decoders.image_slice(encoded, anchor, shape, **box, **decoder)
    elif regions == "all":
        image = fn.decoders.image_slice(encoded, anchor, shape, **box, **decoder)
    else:
        image = fn.slice(fn.decoders.image(encoded, **decoder), anchor, shape, **box)
    image = fn.resize(image, resize_x=size, resize_y=size, antialias=True)
    return fn.crop_mirror_normalize(image, mirror=mirror, dtype=types.UINT8, output_layout="CHW")


def evaluation_graph(dali, decoder: dict):
    """DALI's graph for an evaluation micro-batch: each file decoded whole (crops_of resizes and
    crops it)."""
    return dali.fn.decoders.image(dali.fn.external_source(name="encoded", dtype=dali.types.UINT8), **decoder)


class DaliImages:
    """A micro-batch of EncodedImages decoded and augmented by DALI, then normalised: the model's
    input. One DALI pipeline for training micro-batches (decode, crop the box, resize, flip) and one for
    evaluation's (decode), each built when first needed and again for a larger micro-batch."""

    decodes = True  # in the training process: model_inputs makes its inputs ahead, in a thread

    def __init__(self, device: torch.device, image_size: int, *, hw_decoder_load: float, threads: int,
                 unreadable: UnreadableImages | None = None, regions: str = "per-file"):
        if regions not in DALI_REGIONS:
            raise ValueError(f"regions {regions!r}: one of {', '.join(DALI_REGIONS)}")
        self.dali, self.regions = import_dali(), regions
        device = indexed(device)  # DALI takes a device number
        self.device, self.size, self.load, self.threads = device, image_size, hw_decoder_load, threads
        self.unreadable, self.cuda = unreadable, device.type == "cuda"
        self.images = DeviceImages(device)
        self.pipes: dict[bool, object] = {}
        # What decodes a micro-batch DALI fails on. Made here: on a GPU its probe refuses, in one
        # line before training, a GPU it would not decode on.
        self.fallback = CodecImages(device, image_size, hw_decoder_load=hw_decoder_load, threads=threads,
                                    unreadable=unreadable)
        self.refused_in_a_row = 0
        self.feed = None
        if self.cuda:
            from nvidia.dali.plugin.pytorch import feed_ndarray  # seconds to import: once, before training

            self.feed = feed_ndarray
        # DALI's outputs stay referenced until the copy out of them has run (an event query, never
        # waited for): DALI frees and reuses their memory once Python drops them.
        self.in_use: collections.deque = collections.deque()
        if regions == "per-file":
            self.check_per_file()

    def check_per_file(self) -> None:
        """Run the per-file training graph before training on test JPEGs: a 4:2:0 and a 4:4:4 one
        (one box each way), then two of each kind alone (the other branch empty). Where it does not
        run here, one line says why and every training image is decoded whole, the graph without
        conditional execution."""
        subsampled, full = probe_jpeg(), probe_jpeg(subsampling=0)
        boxes = np.array([[8, 16, 32, 24, 0], [0, 0, 48, 64, 1]], dtype=np.int32)  # top, left, height, width, flip
        try:
            for files in ([subsampled, full], [subsampled] * 2, [full] * 2):
                self.run_graph(True, files, boxes)
            if self.cuda:  # before training, a wait is free: its outputs are done with before the pipeline goes
                torch.cuda.synchronize(self.device)
        except Exception as error:  # noqa: BLE001 (any failure to build or run it: said, and the other graph used)
            reason = what_dali_said(error)
            log(f"note: DALI's per-file training graph did not run here ({reason}); each training image is "
                "decoded whole", sys.stderr)
            self.regions = "none"
        self.pipes.pop(True, None)  # built for two images: the first micro-batch builds its own

    def describe(self) -> str:
        """One line for the log: where this process decodes, and what of each training image."""
        boxes = DECODED[self.regions]
        if not self.cuda:
            return f"DALI decodes ({boxes}) on this CPU (no GPU here): a way to try the path, not a fast one"
        return (f"DALI decodes ({boxes}), crops and resizes on the GPU: {self.load:g} of each batch is offered "
                "to the hardware JPEG decoder where the GPU has one, CUDA decodes the rest")

    def pipeline(self, train: bool, batch: int):
        """The built pipeline for training or evaluation micro-batches of up to `batch` images."""
        pipe = self.pipes.get(train)
        if pipe is None or pipe.max_batch_size < batch:
            pipe = self.pipes[train] = self.build(train, batch)
        return pipe

    def build(self, train: bool, batch: int):
        dali, types = self.dali, self.dali.types
        decoder = dict(device="mixed" if self.cuda else "cpu", output_type=types.RGB,
                       adjust_orientation=False)  # as PIL reads them: the boxes were drawn on that size
        if self.cuda:
            # jpeg_fancy_upsampling: chroma upsampled as libjpeg-turbo (PIL) and nvImageCodec do it. Without
            # it an H100's mixed decoder gave 4:2:0 JPEGs a mean difference of 6.2-6.9 levels from PIL's
            # pixels, against under 3 for nvImageCodec (tests/trainer/test_vision_dali_gpu.py).
            decoder.update(hw_decoder_load=self.load, jpeg_fancy_upsampling=True)
        # prefetch_queue_depth=1: each run() is given its micro-batch's inputs (DALI's rule for that).
        settings = dict(batch_size=batch, num_threads=self.threads, prefetch_queue_depth=1,
                        device_id=self.device.index if self.cuda else None)
        if not train:
            return dali.pipeline_def(evaluation_graph)(dali, decoder, **settings)
        per_file = self.regions == "per-file"
        return dali.pipeline_def(training_graph, enable_conditionals=per_file)(dali, decoder, self.size, self.regions,
                                                                               **settings)

    def run_graph(self, train: bool, encoded: Sequence, boxes: np.ndarray | None):
        """The pipeline's output for a micro-batch: `encoded`, the files' bytes (numpy arrays, bytes);
        `boxes`, a training micro-batch's rows of (top, left, height, width, flip), int32."""
        inputs = {"encoded": [np.frombuffer(data, dtype=np.uint8) for data in encoded]}
        if train:
            inputs.update({name: np.ascontiguousarray(boxes[:, columns]) for name, columns in
                           (("anchor", [1, 0]), ("shape", [3, 2]), ("mirror", 4))})
            if self.regions == "per-file":
                inputs["whole"] = self.whole(inputs["encoded"])
        stream = (torch.cuda.current_stream(self.device),) if self.cuda else ()  # DALI orders its outputs on it
        (out,) = self.pipeline(train, len(encoded)).run(*stream, **inputs)
        return out

    @staticmethod
    def whole(encoded: list[np.ndarray]) -> np.ndarray:
        """The per-file graph's predicate: True for each file decoded whole, then cropped."""
        return np.array([not region_stays_on_gpu(memoryview(data)) for data in encoded], dtype=bool)

    def __call__(self, encoded: Sequence[torch.Tensor], labels: torch.Tensor, crops: torch.Tensor,
                 names: list[str] | None = None):
        train = bool(crops[0, 2] > 0)  # evaluation's crops are all NO_CROP
        files = [data.numpy() for data in encoded]
        boxes = crops.numpy().astype(np.int32) if train else None  # top, left, height, width, flip; a row a sample
        try:
            out = self.run_graph(train, files, boxes)
        except RuntimeError as error:
            failed = FAILED_SAMPLE.search(str(error))
            if failed is None:  # not a file its decoder failed on (a wrong box, out of memory): raised
                raise
            sample = self.failed_file(str(error), int(failed.group(1)), files if train else None)
            return self.decode_again(error, sample, failed.group(2), train, encoded, labels, crops, names)
        self.refused_in_a_row = 0
        images = self.dense(out) if train else crops_of(self.samples(out), crops.tolist(), self.size)
        if self.cuda:
            done = torch.cuda.Event()
            done.record(torch.cuda.current_stream(self.device))
            self.in_use.append((done, out))
            release_finished(self.in_use)
        return self.images(images, labels)

    def failed_file(self, error: str, sample: int, train_files: list[np.ndarray] | None) -> int | None:
        """Which file of the micro-batch DALI's "Failed to decode sample #`sample`" is. In the
        per-file graph each branch numbers its own samples: the operator named in the error says
        which branch (decoders.image: the files decoded whole; decoders.image_slice: the boxes).
        None where that cannot be told."""
        if train_files is None or self.regions != "per-file":
            return sample
        operator = OPERATOR.search(error)
        if operator is None or operator.group(1) not in ("decoders.image", "decoders.image_slice"):
            return None
        whole = operator.group(1) == "decoders.image"
        branch = [i for i, flag in enumerate(self.whole(train_files)) if flag == whole]
        return branch[sample] if sample < len(branch) else None

    def dense(self, out) -> torch.Tensor:
        """A training pipeline's output, (N, 3, size, size) uint8, as a torch tensor on the device."""
        batch = out.as_tensor()
        if not self.cuda:
            return torch.from_numpy(np.array(batch))
        return self.copied(batch)

    def samples(self, out) -> list[torch.Tensor]:
        """An evaluation pipeline's output: each whole image, (3, H, W) uint8, on the device."""
        if not self.cuda:
            return [torch.from_numpy(np.array(out[i])).permute(2, 0, 1) for i in range(len(out))]
        return [self.copied(out[i]).permute(2, 0, 1) for i in range(len(out))]

    def copied(self, tensor) -> torch.Tensor:
        """A DALI GPU tensor copied into torch's memory on the current stream, which DALI's outputs
        are ordered on (run(stream)): torch's allocator then knows when its memory is free."""
        out = torch.empty(tensor.shape(), dtype=torch.uint8, device=self.device)
        return self.feed(tensor, out, cuda_stream=torch.cuda.current_stream(self.device))

    def decode_again(self, error: RuntimeError, sample: int | None, reason: str, train: bool, encoded, labels,
                     crops, names):
        """A micro-batch DALI's decoder failed on (its file `sample`, where known), decoded by
        nvImageCodec, which stands in for each file that does not decode and counts it
        (vision_decode.stand_ins). DALI's pipeline is built anew for the next micro-batch: one that
        raised is not valid again. Where nvImageCodec finds nothing wrong with RETRIES micro-batches
        in a row, DALI fails on what is not a bad file, and the run stops in one line naming
        --decode (exit 2) rather than decode everything twice; without a counter for bad files (a
        benchmark) the error is raised at once, as stand_ins raises."""
        self.pipes.pop(train, None)
        if self.unreadable is None:
            raise error
        if sample is None:
            name = "a file of the micro-batch"
        else:
            name = names[sample] if names and sample < len(names) else f"image {sample} of a micro-batch"
        reason = reason.strip() or "no reason given"
        log(f"warning: DALI could not decode {name} ({reason}); nvImageCodec decodes its micro-batch instead",
            sys.stderr)
        out = self.fallback(encoded, labels, crops, names)
        # Its own finding, not the epoch's count: loader processes add to that at any moment.
        if self.fallback.stood_in:
            self.refused_in_a_row = 0
        else:
            self.refused_in_a_row += 1
            if self.refused_in_a_row >= RETRIES:
                raise DecoderStopped("--decode", f"dali failed on {RETRIES} micro-batches in a row that nvImageCodec "
                                             f"decoded without a bad file (the last: {name}: {reason}); use --decode "
                                             "nvimgcodec") from error
        return out

