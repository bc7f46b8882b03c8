"""`--decode nvjpeg` and `--decode nvimgcodec`: JPEGs decoded on the GPU, in batches.

`nvjpeg` is nvJPEG's decoder through torchvision.io: its CUDA decode runs on the SMs, so its time
is taken from training (on an H200, 0.11 ms of GPU per image against 0.21 ms
of ResNet-50 training; bench/RESULTS.md). `nvimgcodec` is NVIDIA's nvImageCodec, which hands
--hw-decoder-load of each batch to the GPU's hardware JPEG decoder where it has one (A100, H100:
an engine beside the SMs) and the rest to CUDA, decodes only the crop box (a region of interest)
where its GPU backends decode such a region and the whole image where they refuse one (with the
CUDA 12 nvJPEG, a region of a JPEG with subsampled chroma: CodecImages.region_kinds), and does all
of it on a side stream that the training stream waits on; a file none of them decodes goes to PIL
on the CPU, said once. Without a GPU it decodes on the CPU of the training process (a slow way to
try the path, said in the log).

The loader processes do what needs no pixels (trainer/encoded_images.py): they read each file's
bytes and its header and draw the random-resized crop and the flip from the image's seeded
generator (trainer.vision_data.SeededAugmentation), the same draws as the CPU path makes, so an
image gets the same crop box whichever decoder runs. The training process then
decodes the micro-batch on its GPU with one `decode_jpeg` call, crops, resizes (bilinear with
antialias on the tensor: PIL's filter differs from it in the last bits) and flips the whole
micro-batch in a few operations (trainer/vision_resize.py), and normalises it
(vision_data.DeviceImages). A file that is not a JPEG (a PNG in the folder) is decoded by
torchvision on the CPU of the training process instead: slower, never wrong.

Refused where it cannot run, each in one line before any process group (trainer/vision_input.py):
synthetic data (no files); for nvjpeg no GPU, or a torchvision without its C++ operators
(trainer/torchvision_compat.py); for nvimgcodec the package missing; and here, on a GPU, a decoder
that would not decode there (no nvJPEG library: it would fall back to the CPU unseen).
"""

from __future__ import annotations

import collections
import contextlib
import io
import math
import os
import queue
import sys
import threading
from collections.abc import Sequence

import torch

import numpy as np

from trainer.cli import UsageError
from trainer.encoded_images import NO_CROP
from trainer.image_files import JPEG_MAGIC, probe_jpeg, region_stays_on_gpu
from trainer.log import log, warn
from trainer.torchvision_compat import import_torchvision
from trainer.vision_data import DecoderStopped, DeviceImages, UnreadableImages, unreadable_errors
from trainer.vision_resize import resized_crops

# What a GPU decoder decodes of each training image, by its `regions` (the log line says it).
DECODED = {"all": "the box alone", "none": "the whole image",
           "per-file": "the box alone where the JPEG's chroma is not subsampled, else the whole image"}


def import_nvimgcodec():
    """nvImageCodec's Python module, or None where the package is not installed. Its errors still
    print; its warning for each file it cannot parse does not (that file is decoded by PIL instead)."""
    os.environ.setdefault("PYNVIMGCODEC_VERBOSITY", "1")
    try:
        from nvidia import nvimgcodec
    except ImportError:
        return None
    return nvimgcodec


def decoded_by_pil(data: torch.Tensor) -> torch.Tensor:
    """A file a GPU decoder could not read, decoded on this CPU as the CPU path would: (3, H, W)
    uint8. A file that is no image at all raises PIL's own error."""
    from PIL import Image

    with Image.open(io.BytesIO(data.numpy().tobytes())) as image:
        return torch.from_numpy(np.array(image.convert("RGB"))).permute(2, 0, 1).contiguous()


def by_pil_or_error(data: torch.Tensor, device: torch.device) -> torch.Tensor | BaseException:
    """decoded_by_pil on `device`, or the error that says the file is bad (unreadable_errors)."""
    try:
        return decoded_by_pil(data).to(device, non_blocking=True)
    except unreadable_errors() as error:
        return error


def relabelled(labels: torch.Tensor, order: list[int] | None) -> torch.Tensor:
    """The labels in stand_ins' order, pinned where they were (the loader pins them on a GPU), so
    that their copy to the device stays asynchronous."""
    if order is None:
        return labels
    out = labels[order]
    return out.pin_memory() if labels.is_pinned() else out


def stand_ins(decoded: list, names: list[str] | None, unreadable: UnreadableImages | None) -> list[int] | None:
    """Where a GPU decoder's micro-batch holds errors (files that passed the loader's checks and
    still did not decode): for each position, the image that fills it, itself or for a bad one the
    next decoded image of the micro-batch, with its label and crop. A stand-in repeats an image of
    the same micro-batch, so a run resumed on as many ranks sees the same (on another number, the
    micro-batches differ, and so may the stand-in). Each bad file is named on stderr and
    counted against --max-bad-images (vision_data.UnreadableImages, checked every step). None where
    all decoded. Without an `unreadable` to count in (a benchmark), the first error is raised; where
    none of the micro-batch decoded (not a few bad files, but data this decoder cannot read),
    DecoderStopped, on which every rank stops at an agreed step (trainer.vision)."""
    bad = [i for i, image in enumerate(decoded) if isinstance(image, BaseException)]
    if not bad:
        return None
    if unreadable is None:
        raise decoded[bad[0]]
    if len(bad) == len(decoded):
        first = names[bad[0]] if names else "the first"
        cause = decoded[bad[0]]
        error = " ".join(str(cause).split())[:200]
        raise DecoderStopped("--data", f"none of the {len(decoded)} images of a micro-batch decoded (the first, "
                                       f"{first}: {type(cause).__name__}: {error}): not a few bad files but data the "
                                       "decoder cannot read (--decode cpu decodes with PIL)") from cause
    order = []
    for i in range(len(decoded)):
        j = i
        while isinstance(decoded[j], BaseException):
            j = (j + 1) % len(decoded)
        order.append(j)
    for i in bad:
        unreadable.met(names[i] if names else f"image {i} of a micro-batch", decoded[i],
                       "another image of its micro-batch")
    return order


class NvjpegImages:
    """A micro-batch of EncodedImages, decoded and augmented on the GPU: the model's input."""

    decodes = True  # in the training process: model_inputs makes its inputs ahead, in a thread

    def __init__(self, device: torch.device, image_size: int, *, unreadable: UnreadableImages | None = None):
        self.device, self.size, self.unreadable = device, image_size, unreadable
        self.images = DeviceImages(device)
        self.io = import_torchvision().io
        # Where decode_jpeg's outputs are allocated: a stream that runs no kernel. torchvision
        # (0.26 to 0.28 at least) allocates them on the caller's current stream and writes them from
        # a stream of its own that does not wait for the caller's, so on the training stream it is
        # handed blocks that queued kernels still read, and overwrites them (pytorch/vision#9606:
        # NaN losses, as an H100 run here showed). A block of this stream's pool is freed only by
        # an output the training stream read (recorded below), so it is idle when handed out again.
        self.outputs = torch.cuda.Stream(device) if device.type == "cuda" else None

    def __call__(self, encoded: Sequence[torch.Tensor], labels: torch.Tensor, crops: torch.Tensor,
                 names: list[str] | None = None):
        decoded = self.decode(encoded)
        order = stand_ins(decoded, names, self.unreadable)
        boxes = crops.tolist()
        if order is not None:
            decoded, boxes, labels = [decoded[j] for j in order], [boxes[j] for j in order], relabelled(labels, order)
        return self.images(crops_of(decoded, boxes, self.size), labels)

    def decode(self, encoded: Sequence[torch.Tensor]) -> list[torch.Tensor | BaseException]:
        """Each image decoded on the GPU, or by PIL where it is not a JPEG or nvJPEG cannot decode it,
        or the error PIL raised where neither can."""
        rgb = self.io.ImageReadMode.RGB
        jpegs = [i for i, data in enumerate(encoded) if bytes(data[:3].tolist()) == JPEG_MAGIC]
        decoded: list = [None] * len(encoded)
        if jpegs:
            main = torch.cuda.current_stream(self.device) if self.outputs is not None else None
            with torch.cuda.stream(self.outputs):  # None (no GPU: a test's decode_jpeg) does nothing
                try:
                    images = self.io.decode_jpeg([encoded[i] for i in jpegs], mode=rgb, device=self.device)
                except RuntimeError:  # one file fails the batch: each alone, and PIL for those that fail
                    images = [self.decode_one(encoded[i], rgb) for i in jpegs]
            if main is not None:
                main.wait_stream(self.outputs)
            for i, image in zip(jpegs, images):
                if image is not None and main is not None:
                    image.record_stream(main)
                decoded[i] = image
        for i, image in enumerate(decoded):
            if image is None:
                decoded[i] = by_pil_or_error(encoded[i], self.device)
        return decoded

    def decode_one(self, data: torch.Tensor, mode) -> torch.Tensor | None:
        try:
            return self.io.decode_jpeg(data, mode=mode, device=self.device)
        except torch.OutOfMemoryError:  # a RuntimeError too: no bad file, and never PIL's to mend
            raise
        except RuntimeError:
            return None


def crops_of(images: list[torch.Tensor], boxes: list[list[int]], size: int) -> torch.Tensor:
    """(N, 3, size, size) uint8: each image augmented by its box. On a GPU in a few operations for
    the whole micro-batch (trainer/vision_resize.py): there the host's work per image is the limit,
    and the batched resize's matrix products cost the GPU little. On the CPU, where those products
    would be the cost (25 times torchvision's per image at ImageNet's sizes), one image at a time."""
    if images[0].is_cuda:
        return resized_crops(images, boxes, size)
    return torch.stack([augment(image, box, size) for image, box in zip(images, boxes)])


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


class CodecImages:
    """A micro-batch of EncodedImages decoded by nvImageCodec (--decode nvimgcodec), cropped,
    resized, flipped and normalised: the model's input.

    Only the crop box is decoded (the same box and flip as every other path draws) where the GPU's
    backends decode such a region, else the whole image and then its box (`regions`: "all" boxes,
    those of JPEGs without subsampled chroma, "per-file", or "none"; the probes decide); evaluation
    decodes the whole image. On a GPU the decode and the resize run on a side stream, and the
    training stream waits for them with an event: the host does not, so a decode overlaps the
    kernels of the step already queued, and the hardware decoder is not an SM at all."""

    decodes = True  # in the training process: model_inputs makes its inputs ahead, in a thread

    def __init__(self, device: torch.device, image_size: int, *, hw_decoder_load: float, threads: int,
                 unreadable: UnreadableImages | None = None):
        n = import_nvimgcodec()
        device = indexed(device)  # nvImageCodec takes a device number
        self.n, self.device, self.size, self.unreadable = n, device, image_size, unreadable
        self.images = DeviceImages(device)
        # Pixels as PIL reads them: no EXIF rotation, sRGB, planar (3, H, W) like a torch image.
        self.params = n.DecodeParams(apply_exif_orientation=False, color_spec=n.SRGB, sample_format=n.P_RGB)
        self.cuda = device.type == "cuda"
        self.in_use: collections.deque = collections.deque()
        # Decode the crop box alone (a region of interest) where every GPU backend that takes part
        # decodes such a region of the probe: of the 4:2:0 one, every box; of the 4:4:4 one only,
        # the boxes of JPEGs without subsampled chroma (region_stays_on_gpu); else whole images, on
        # the GPU (probe's docstring). On the CPU libjpeg-turbo decodes every region.
        self.regions = "all"
        self.said_pil = False  # PIL decoded a file nvImageCodec did not: said once
        if self.cuda:
            self.stream = torch.cuda.Stream(device)
            backends = [n.Backend(n.HW_GPU_ONLY, load_hint=hw_decoder_load), n.Backend(n.GPU_ONLY),
                        n.Backend(n.HYBRID_CPU_GPU)]
            self.decoder = n.Decoder(device_id=device.index, max_num_cpu_threads=threads, backends=backends)
            self.hardware = self.probe(hw_decoder_load)
            self.regions = self.region_kinds()
        else:
            self.stream, self.hardware = None, ""
            self.decoder = n.Decoder(device_id=n.NVIMGCODEC_DEVICE_CPU_ONLY, max_num_cpu_threads=threads,
                                     backends=[n.Backend(n.CPU_ONLY)])

    def describe(self) -> str:
        """One line for the log: where this process decodes."""
        boxes = DECODED[self.regions]
        if not self.cuda:
            return "nvImageCodec decodes on this CPU (no GPU here): a way to try the path, not a fast one"
        if self.hardware:
            return (f"nvImageCodec decodes ({boxes}) on the GPU: its hardware JPEG decoder ({self.hardware} of "
                    "4:2:0 JPEGs), and CUDA for the rest")
        return (f"nvImageCodec decodes ({boxes}) on the GPU with CUDA: the hardware JPEG decoder did not decode a "
                "test image (none on this GPU, a container without the `video` driver capability in "
                "NVIDIA_DRIVER_CAPABILITIES, or --hw-decoder-load 0)")

    def probe(self, hw_decoder_load: float) -> str:
        """Decode a small JPEG here before training: an error in one line where the decoder would
        not decode on this GPU (nvImageCodec without its nvJPEG library falls back to nothing, or
        to the CPU, unseen). Then what the hardware decoder alone decodes: "crop boxes", "whole
        images" (it refuses a region), or "" (nothing: no such engine, or load 0). The probe is
        4:2:0, and with chroma upsampled as libjpeg-turbo does it nvImageCodec 0.9.0 refuses a region
        of such a JPEG with nvJPEG older than 13.2, on its CUDA decoder too (trainer/vision_dali.py's module
        docstring has the source): the CUDA 12 wheels' nvJPEG gives "whole images"."""
        n = self.n
        data = probe_jpeg()
        image = self.decoder.decode(n.CodeStream(data), params=self.params)
        if image is None or image.buffer_kind != n.ImageBufferKind.STRIDED_DEVICE:
            raise UsageError("--decode", f"nvimgcodec did not decode a test JPEG on GPU {self.device.index} (is the "
                                         "nvidia-nvjpeg-cu12 package installed?); use --decode nvjpeg or cpu")
        if hw_decoder_load == 0:
            return ""
        hardware = n.Decoder(device_id=self.device.index, backends=[n.Backend(n.HW_GPU_ONLY)])
        if hardware.decode(self.probe_region(), params=self.params) is not None:
            return "crop boxes"
        return "whole images" if hardware.decode(n.CodeStream(data), params=self.params) is not None else ""

    def region_kinds(self) -> str:
        """Which training boxes are decoded alone on this GPU: "all" where every backend that takes
        part (the hardware decoder where it is used, and CUDA) decodes a region of the 4:2:0 probe;
        "per-file" where they decode a region of the 4:4:4 one only; else "none". A backend that
        refuses a region hands it to nothing on the GPU, and PIL then decodes it on this CPU, one
        file at a time: where the hardware decoder is not used (--hw-decoder-load 0, or a GPU
        without one) and nvJPEG is older than 13.2 (probe's docstring)."""
        n = self.n
        deciders = [self.cuda_decoder()]
        if self.hardware:
            deciders.append(n.Decoder(device_id=self.device.index, backends=[n.Backend(n.HW_GPU_ONLY)]))
        for kinds, subsampling in (("all", 2), ("per-file", 0)):
            region = self.probe_region(subsampling)
            if all(decoder.decode(region, params=self.params) is not None for decoder in deciders):
                return kinds
        return "none"

    def cuda_decoder(self):
        """A decoder of the training decoder's backends less the hardware one. GPU_ONLY alone is no
        decoder: nvImageCodec 0.9.0 then refuses to make one ("Could not create decoder. Code: 7",
        on an H100)."""
        n = self.n
        return n.Decoder(device_id=self.device.index, backends=[n.Backend(n.GPU_ONLY), n.Backend(n.HYBRID_CPU_GPU)])

    def cuda_decodes_regions(self) -> bool:
        """Whether CUDA decodes a region of the 4:2:0 probe (region_kinds)."""
        return self.cuda_decoder().decode(self.probe_region(), params=self.params) is not None

    def probe_region(self, subsampling: int = 2):
        """A region of a probe JPEG (4:2:0 by default), as a training box is handed to nvImageCodec."""
        n = self.n
        return n.CodeStream(probe_jpeg(subsampling)).get_sub_code_stream(region=n.Region(8, 16, 40, 48))

    def region_of(self, data: torch.Tensor) -> bool:
        """Whether this file's training box is decoded alone (`regions`)."""
        if self.regions == "per-file":
            return region_stays_on_gpu(memoryview(data.numpy()))
        return self.regions == "all"

    def __call__(self, encoded: Sequence[torch.Tensor], labels: torch.Tensor, crops: torch.Tensor,
                 names: list[str] | None = None):
        boxes = crops.tolist()
        if not self.cuda:
            out, _, order = self.augmented(encoded, boxes, names)
            return self.images(out, relabelled(labels, order))
        main = torch.cuda.current_stream(self.device)
        # The side stream does not wait for the training stream: nothing it reads comes from there
        # (the bytes are on the host; torch gives its allocations blocks of its own pool), and
        # nvImageCodec blocks the host on its previous batch's decode, which would then wait for
        # the whole training step queued before it (on an H100, 1,751 images/s where the GPU alone
        # trains 3,955 and the decode alone gives 3,380).
        with torch.cuda.stream(self.stream):
            out, sources, order = self.augmented(encoded, boxes, names)
            done = torch.cuda.Event()
            done.record(self.stream)
        # nvImageCodec owns the decoded images' memory, outside torch's stream-aware allocator, and may
        # still read the files' bytes: both stay referenced until the side stream is past them (asked
        # with an event query, never waited for).
        self.in_use.append((done, sources))
        release_finished(self.in_use)
        main.wait_stream(self.stream)
        out.record_stream(main)
        return self.images(out, relabelled(labels, order))

    def augmented(self, encoded: Sequence[torch.Tensor], boxes: list[list[int]],
                  names: list[str] | None = None) -> tuple[torch.Tensor, tuple, list[int] | None]:
        """(the micro-batch at the output size, uint8; what it was made from: the bytes, the code
        streams and the decoded images, which the caller keeps while the device may still read them;
        stand_ins' order for the labels where a file could not be decoded, else None)."""
        n = self.n
        streams = []
        cut = [box[2] > 0 and self.region_of(data) for data, box in zip(encoded, boxes)]  # evaluation: never
        for data, (top, left, height, width, _), alone in zip(encoded, boxes, cut):
            stream = n.CodeStream(data.numpy())
            if alone:  # the training box only
                stream = stream.get_sub_code_stream(region=n.Region(top, left, top + height, left + width))
            streams.append(stream)
        handle = self.stream.cuda_stream if self.cuda else 0
        decoded = self.decoder.decode(streams, params=self.params, cuda_stream=handle)
        images, relative = [], []
        for i, (data, box, image, alone) in enumerate(zip(encoded, boxes, decoded, cut)):
            if image is None:  # not a format it reads, or not decodable: PIL decodes the whole file, or says why not
                images.append(by_pil_or_error(data, self.device))
                relative.append(box)
                if not self.said_pil and not isinstance(images[-1], BaseException):
                    self.said_pil = True
                    name = names[i] if names else f"image {i} of a micro-batch"
                    log(f"note: nvImageCodec did not decode {name}; PIL decodes each such file whole on the CPU "
                        "(said once)", sys.stderr)
                continue
            images.append(torch.from_dlpack(image) if self.cuda else torch.from_numpy(np.array(image)))
            relative.append([0, 0, *box[2:]] if alone else box)  # the box is all that was decoded
        order = stand_ins(images, names, self.unreadable)
        self.stood_in = order is not None  # for DaliImages, which decodes again here
        if order is not None:
            images, relative = [images[j] for j in order], [relative[j] for j in order]
        return crops_of(images, relative, self.size), (encoded, streams, decoded), order


def indexed(device: torch.device) -> torch.device:
    """`device` with its number: a bare "cuda" is the current device (the decoders take a number)."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def release_finished(in_use: collections.deque) -> None:
    """Drop the oldest (event, what the device may still read) entries whose event has passed: asked
    with an event query, never waited for."""
    while in_use and in_use[0][0].query():
        in_use.popleft()


def model_inputs(batches, to_input, device: torch.device):
    """An epoch's model inputs from the loader's micro-batches `batches`, with close(): a GPU
    decoder's (nvjpeg, nvimgcodec, dali) made ahead in a thread (DecodeAhead), the CPU path's in turn."""
    if getattr(to_input, "decodes", False):
        return DecodeAhead(batches, to_input, device)
    return (to_input(*batch) for batch in batches)


class DecodeAhead:
    """The model's inputs from a loader's micro-batches, made by `to_input` one micro-batch ahead in
    a thread of this process: a GPU decoder's host work (nvImageCodec's parsing and submission, the
    crop and resize of each image) overlaps the host work of the training step instead of
    following it. On an H100 the host made 3,821 images/s of decoded ResNet-50 input alone and the
    GPU trained 3,955, yet in turn with the step the run trained 2,151.

    The thread's work runs on a stream of its own; each input comes with an event, and the
    consumer's stream waits for it (the host does not) and is recorded on the tensors, so their
    memory is not reused while the step reads them. The order is the loader's; at most `depth`
    inputs wait made. An error in the thread (a file nothing decodes) is raised by the next(); a
    thread that ends without a word is an error, not a silent end of the epoch. close() stops it
    and returns once it has ended: a step loop that stops early (preemption) leaves nothing running."""

    _END = object()

    def __init__(self, batches, to_input, device: torch.device, *, depth: int = 2):
        self.batches, self.to_input, self.device = batches, to_input, device
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if self.cuda else None
        self.made: queue.Queue = queue.Queue(maxsize=depth)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._make, name="decode-ahead", daemon=True)
        self.thread.start()

    def __iter__(self):
        return self

    def _make(self) -> None:
        try:
            if self.cuda:
                torch.cuda.set_device(self.device)
            with torch.cuda.stream(self.stream) if self.cuda else contextlib.nullcontext():
                for batch in self.batches:
                    images, labels = self.to_input(*batch)
                    ready = None
                    if self.cuda:
                        ready = torch.cuda.Event()
                        ready.record(self.stream)
                    if not self._put((images, labels, ready)):
                        return
            self._put(self._END)
        except BaseException as error:  # noqa: BLE001 (raised again by the consumer's next())
            self._put(error)

    def _put(self, item) -> bool:
        """Hand `item` over; False once close() asked the thread to stop."""
        while not self.stopping.is_set():
            try:
                self.made.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        while True:
            try:
                item = self.made.get(timeout=1.0)
                break
            except queue.Empty:
                if not self.thread.is_alive() and self.made.empty():
                    raise RuntimeError("the decode-ahead thread ended without a result or an error") from None
        if item is self._END:
            self.made.put_nowait(self._END)  # every later next() ends too (the thread has ended)
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        images, labels, ready = item
        if ready is not None:
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(ready)
            images.record_stream(stream)
            labels.record_stream(stream)
        return images, labels

    def close(self, timeout: float = 60.0) -> None:
        """Stop making inputs and wait for the thread (at most `timeout` s: a batch it is decoding).
        A thread that does not stop is an error, except where close() runs while an error is already
        on its way out (the step loop's `finally` after a dead peer, an NCCL error): there it is one
        warning line, and the loop's own error stays the crash's last line instead of this symptom."""
        failing = sys.exc_info()[1] is not None  # called from a `finally`: the exception propagating
        self.stopping.set()
        # A put() gives up within 0.1 s once stopping is set. Drained before the thread has ended,
        # the queue would take that put instead, and the thread would read one batch more.
        self.thread.join(timeout)
        if self.thread.is_alive():  # the loader's iterator it reads must not be reset under it (trainer.vision)
            if not failing:
                raise RuntimeError(f"the decode-ahead thread did not stop within {timeout:g} s")
            warn(f"the decode-ahead thread did not stop within {timeout:g} s; the step loop's own error follows")
            return
        while True:  # drop what was made
            try:
                self.made.get_nowait()
            except queue.Empty:
                break
