"""`trainer.data imagenet --reencode`: an ImageFolder copy whose JPEGs are cheaper to decode.

ImageNet's training JPEGs are about 500 px on a side at quality 96 without chroma subsampling
(bench/vision_loader.py cites the source), and decoding them is what a CPU loader worker spends its
time on. Written once at preparation time, a copy whose images are bounded in size and encoded at
an ordinary quality makes every epoch's decode cheaper (FFCV and the fast.ai DAWNBench runs train
from such copies; README's vision data section states the accuracy trade-off). Opt-in: without
--reencode the images are linked or copied unchanged, as before.

What the copy holds, per image:
- the short side bounded by --short-side N: a larger image is scaled (Lanczos) so its short side
  is exactly N, the aspect ratio kept. The bound is on the short side because that is what the
  transforms need: evaluation resizes the short side to crop / 0.875 (256 for 224-px crops) and
  never enlarges only if N is at least that, and RandomResizedCrop's largest boxes span the short
  side. N below the preset's evaluation resize is refused. The default leaves a quarter more
  (320 for ResNet-50's 224 px) so that most training crops are still reductions;
- encoded as baseline JPEG, quality --jpeg-quality (75-95, default 90), chroma subsampled 4:2:0
  (libjpeg's default: the colour planes at half resolution each way, half the samples of 4:4:4);
- an image already within the bound is re-encoded only where that makes it cheaper to decode: its
  colour planes are finer than 4:2:0, or the re-encode has at most 3/4 of its bytes (decode time
  follows the bytes to entropy-decode at equal pixels). Otherwise the original is linked or copied:
  a second generation of JPEG loss for nothing;
- whatever is not an RGB JPEG (ImageNet has CMYK and grayscale JPEGs and one PNG under a .JPEG
  name) is decoded to RGB, as the training loader does (PIL's convert), and re-encoded at any size,
  so the copy is RGB JPEG throughout. EXIF orientation and colour profiles are not applied, as the
  loader does not apply them either. An image that does not decode (truncated, not an image) stops
  the run with one line naming it: the training loader would fail on it mid-epoch.

The settings are recorded in OUT/reencode.json before the first image is written; a run with other
settings, a plain run into a re-encoded copy, or a re-encode into a plain copy is refused, so a
copy never mixes two encodings. Each image is written to a temporary name and renamed, so a killed
run leaves only whole images, and the next run skips them. Images are processed by a bounded pool
of processes that die with their parent (Linux's parent-death signal; elsewhere each checks its
parent between images), and each image has a deadline.
"""

from __future__ import annotations

import errno
import io
import json
import math
import multiprocessing
import os
import shutil
import signal
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from config.paths import file_status, input_dir
from trainer.cli import UsageError, checked_path, write_whole

MANIFEST = "reencode.json"
# Ordinary photographic qualities around FFCV's 90 (README): below, the copy trades more of the
# image than this tool means to; above, it approaches the originals' 96 and saves little decode.
QUALITY_RANGE = (75, 95)
DEFAULT_QUALITY = 90
SUBSAMPLING = "4:2:0"
_PIL_SUBSAMPLING = {"4:4:4": 0, "4:2:2": 1, "4:2:0": 2}
MAX_SHORT_SIDE = 4096
EVAL_CROP_FRACTION = 0.875  # trainer/vision_jpeg.py's ReducedResizeCenterCrop: Resize(ceil(size / 0.875))
DEFAULT_MARGIN = 1.25  # the default short side over the evaluation resize
KEEP_ORIGINAL_ABOVE = 0.75  # a small image's re-encode must have at most this share of its bytes
IMAGE_TIMEOUT_S = 120  # one image; a 100-megapixel photograph decodes in seconds
MAX_WORKERS = 256
FORMAT = 1  # the encoder's own version: bump when the same settings would write other bytes


@dataclass(frozen=True)
class Settings:
    short_side: int
    jpeg_quality: int
    subsampling: str = SUBSAMPLING
    format: int = FORMAT

    def describe(self) -> str:
        return f"short side {self.short_side}, quality {self.jpeg_quality}, {self.subsampling}"


def min_short_side(image_size: int) -> int:
    """The evaluation transform's resize for `image_size` crops: a smaller short side would be enlarged."""
    return math.ceil(image_size / EVAL_CROP_FRACTION)


def default_short_side(image_size: int) -> int:
    return math.ceil(min_short_side(image_size) * DEFAULT_MARGIN)


def imagenet_presets() -> dict[str, int]:
    """The job presets that read ImageNet, and their training crops."""
    from config.presets import PRESETS
    return {name: p.workload.image_size for name, p in PRESETS.items() if str(getattr(p.workload, "data", "")).endswith("/imagenet")}


def settings_for(short_side: int | None, quality: int | None, preset: str) -> Settings:
    """The settings a command line asks for, checked: one UsageError line naming the flag."""
    crop = imagenet_presets()[preset]
    floor = min_short_side(crop)
    short_side = default_short_side(crop) if short_side is None else short_side
    if short_side < floor:
        raise UsageError("--short-side", f"{short_side} is below {floor}, the evaluation resize of {preset} "
                                         f"({crop}-px crops / {EVAL_CROP_FRACTION}): its images would be enlarged; "
                                         f"use {floor} to {MAX_SHORT_SIDE}")
    if short_side > MAX_SHORT_SIDE:
        raise UsageError("--short-side", f"must be {floor} to {MAX_SHORT_SIDE} for {preset}, got {short_side}")
    quality = DEFAULT_QUALITY if quality is None else quality
    if not QUALITY_RANGE[0] <= quality <= QUALITY_RANGE[1]:
        raise UsageError("--jpeg-quality", f"must be {QUALITY_RANGE[0]} to {QUALITY_RANGE[1]} (JPEG quality), "
                                           f"got {quality}")
    return Settings(short_side=short_side, jpeg_quality=quality)


# --- the settings manifest ------------------------------------------------------------------------

def read_manifest(out: Path, field: str = "--out") -> Settings | None:
    path = out / MANIFEST
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text())
        return Settings(short_side=int(raw["short_side"]), jpeg_quality=int(raw["jpeg_quality"]),
                        subsampling=str(raw["subsampling"]), format=int(raw["format"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(field, f"{path} is not a re-encode manifest ({exc}); remove it only together "
                                  f"with the images it describes") from None


def check_serves(root: Path, image_size: int) -> None:
    """Refuse (--data) a re-encoded copy whose short side is below what `image_size` crops need: the
    presets share /fsx/data/imagenet, and EfficientNet-B7's 600-px crops from a copy made for
    ResNet-50 would be enlargements, silently."""
    settings = read_manifest(root, "--data")
    floor = min_short_side(image_size)
    if settings is not None and settings.short_side < floor:
        raise UsageError("--data", f"{root} is a re-encoded copy with short side {settings.short_side} ({MANIFEST}); "
                                   f"--image-size {image_size} needs at least {floor} (crop / {EVAL_CROP_FRACTION}): "
                                   f"re-encode with --short-side {floor} or more, or train on the originals")


def _holds_images(out: Path) -> bool:
    return any(any(checked_path("--out", input_dir, split).iterdir())
               for split in (out / "train", out / "val") if split.is_dir())


def claim(out: Path, settings: Settings | None) -> None:
    """Refuse to mix encodings in `out`; for a re-encode, record `settings` there (atomically)
    before any image is written. `settings` None: a plain (linked or copied) run."""
    have = read_manifest(out)
    if settings is None:
        if have is not None:
            raise UsageError("--out", f"{out} holds a re-encoded copy ({have.describe()}, {MANIFEST}); add "
                                      f"--reencode with those settings, or choose another --out")
        return
    if have is not None and have != settings:
        raise UsageError("--out", f"{out} was re-encoded with {have.describe()} (format {have.format}), not "
                                  f"{settings.describe()} (format {settings.format}); pass those settings or "
                                  f"choose another --out")
    if have is None:
        if _holds_images(out):
            raise UsageError("--out", f"{out} already holds images placed without --reencode; choose another --out")
        write_whole(out / MANIFEST, json.dumps(asdict(settings), indent=1) + "\n")


# --- one image ------------------------------------------------------------------------------------

def scaled_size(width: int, height: int, short_side: int) -> tuple[int, int]:
    """(width, height) with the short side at most `short_side`, the aspect ratio kept."""
    short = min(width, height)
    if short <= short_side:
        return width, height
    if width <= height:
        return short_side, max(short_side, round(height * short_side / width))
    return max(short_side, round(width * short_side / height)), short_side


def encoded(source: Path, settings: Settings) -> bytes | None:
    """The re-encoded image's bytes, or None where the original is as cheap to decode (module
    docstring). Raises OSError/ValueError for an image that does not decode."""
    from PIL import Image, JpegImagePlugin

    with Image.open(source) as image:
        width, height = image.size
        size = scaled_size(width, height, settings.short_side)
        # Within the bound, an RGB JPEG already 4:2:0 is cheaper to decode again only with fewer bytes.
        bytes_decide = (size == (width, height) and image.format == "JPEG" and image.mode == "RGB"
                        and JpegImagePlugin.get_sampling(image) == _PIL_SUBSAMPLING["4:2:0"])
        if size != (width, height) and image.format == "JPEG":
            image.draft("RGB", size)  # libjpeg's DCT scaling down to no less than the target: a faster decode
        rgb = image.convert("RGB")
    if rgb.size != size:
        rgb = rgb.resize(size, Image.LANCZOS)
    buffer = io.BytesIO()
    rgb.save(buffer, format="JPEG", quality=settings.jpeg_quality,
             subsampling=_PIL_SUBSAMPLING[settings.subsampling])
    data = buffer.getvalue()
    if bytes_decide and len(data) > KEEP_ORIGINAL_ABOVE * source.stat().st_size:
        return None
    return data


def current(source: Path, target: Path) -> bool:
    """`target` was made from this `source` (the same file, or written after the source last changed)."""
    if not target.exists():
        return False
    return os.path.samefile(source, target) or target.stat().st_mtime_ns >= source.stat().st_mtime_ns


def _write(target: Path, data: bytes) -> None:
    partial = target.with_name(f".{target.name}.partial")
    try:
        partial.write_bytes(data)
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def place(source: Path, target: Path) -> str:
    """Put `source` at `target` unless an equal file is there: a hard link, else a copy through
    a temporary name. Which it was: "present", "linked" or "copied" (trainer.imagenet.Report's
    counts). A source that is not a regular file is a PathProblem: copied, a link to /dev/zero
    filled the disk."""
    file_status(source)
    if target.exists():
        # A copy newer than its source is current; a source replaced since (a new download is a
        # new file) is placed again, even at the same size.
        have, want = target.stat(), source.stat()
        if os.path.samefile(source, target) or (have.st_size == want.st_size and have.st_mtime_ns >= want.st_mtime_ns):
            return "present"
        target.unlink()
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
        return "linked"
    except OSError as err:
        if err.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
    partial = target.with_name(f".{target.name}.partial")
    try:
        shutil.copyfile(source, partial)
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return "copied"


def reencode_one(job: tuple[Path, Path, Settings]) -> tuple[str, str]:
    """(outcome, detail) for one image: outcome reencoded, linked, copied or present; or error
    with the one-line reason (returned, not raised: it crosses a process boundary)."""
    source, target, settings = job
    _check_parent()
    try:
        if current(source, target):
            return "present", ""
        data = encoded(source, settings)
    except Exception as exc:  # PIL raises OSError, ValueError, SyntaxError... for what is not an image
        return "error", f"--src: cannot decode {source}: {exc}"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if data is None:
            return place(source, target), ""  # a stale target is replaced; an equal one counts as present
        _write(target, data)  # the rename replaces a stale target, link or not, without touching its source
        return "reencoded", ""
    except OSError as exc:
        return "error", f"--out: cannot write {target}: {exc.strerror or exc}"


# --- the pool -------------------------------------------------------------------------------------

_PARENT = 0


def _die_with_parent(parent: int) -> None:
    """Pool initializer: SIGKILL this worker when its parent dies (Linux), and remember the parent
    so that each image checks it is still there (everywhere)."""
    global _PARENT
    _PARENT = parent
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which ends the pool
    if sys.platform.startswith("linux"):
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    _check_parent()


def _check_parent() -> None:
    if _PARENT and os.getppid() != _PARENT:
        os._exit(1)


def default_workers() -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, 32))


def reencode(pairs: list[tuple[Path, Path]], out: Path, settings: Settings, workers: int, report) -> None:
    """Every (source, target) pair re-encoded into `out` (claimed for `settings` first), counted in `report`."""
    from tqdm import tqdm

    claim(out, settings)
    jobs = [(source, target, settings) for source, target in pairs]
    chunk = 16
    # spawn, not fork: a fork of a process with other threads (a host's logging or I/O threads, a
    # test runner's) can copy a lock one of them held, and the worker then waits on it forever
    # (seen under pytest-xdist: the pool's exit joined that worker for good).
    context = multiprocessing.get_context("spawn")
    with context.Pool(workers, initializer=_die_with_parent, initargs=(os.getpid(),)) as pool, \
            tqdm(total=len(jobs), desc="imagenet re-encode", unit="img", file=sys.stderr, mininterval=5) as bar:
        # Waited for in order: when chunk k is waited for, the chunks before it are done, so each
        # wait is bounded by one chunk's deadline (the pool's exit terminates the workers).
        pending = [pool.apply_async(_reencode_chunk, (jobs[i:i + chunk],)) for i in range(0, len(jobs), chunk)]
        for result in pending:
            try:
                outcomes = result.get(timeout=IMAGE_TIMEOUT_S * chunk)
            except multiprocessing.TimeoutError:
                raise UsageError("--src", f"an image took over {IMAGE_TIMEOUT_S} s to re-encode; the images "
                                          f"finished so far are kept") from None
            for outcome, detail in outcomes:
                if outcome == "error":
                    field, message = detail.split(": ", 1)
                    raise UsageError(field, message)
                setattr(report, outcome, getattr(report, outcome) + 1)
            bar.update(len(outcomes))


def _reencode_chunk(jobs: list) -> list[tuple[str, str]]:
    outcomes = []
    for job in jobs:
        outcomes.append(reencode_one(job))
        if outcomes[-1][0] == "error":
            break
    return outcomes
