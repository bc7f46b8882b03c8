"""trainer.vision's CPU input path: images/s per loader worker, in two cases, each measured in one run.

    python bench/vision_loader.py [--case dtype|reduced|both|reencoded|encoded|transfer|epoch-start|dali-regions]
        [--images 256] [--rounds 3] [--workers 1] [--short-side N]  (reencoded: the copy's bound; default the tool's)
        [--batch 64]  (epoch-start, dali-regions: the micro-batch)

`dtype`: JPEGs of one size (500x375, quality 90), fp32 (before) against uint8:
- fp32: PIL decode, RandomResizedCrop(224), flip, ToTensor and Normalize in the worker (the old path);
- uint8: PIL decode, RandomResizedCrop(224), flip, PILToTensor in the worker (trainer/vision_data.py,
  full decode); the conversion and normalisation then run where the batch lands (here on the CPU,
  timed in).
`reduced`: JPEGs whose sizes follow ImageNet's (IMAGENET_SIZES), uint8 with full decode against
uint8 with the reduced-size decode trainer.vision now makes where the crop allows
(trainer/vision_jpeg.py); also each size group on its own, since the gain comes from the large images.
`reencoded` (not in `both`): the same ImageNet-like JPEGs, then a copy of them made by
`trainer.data imagenet --reencode` at its default settings (trainer/imagenet_reencode.py), both read
by trainer.vision's training loader (uint8, reduced-size decode where the crop allows): images/s per
worker on the originals against the copy, and bytes per image before and after.
Both sides of a case run in this one process, alternating within each round; a ratio is the median
over rounds of that round's ratio, so a slow round on a shared machine slows both sides.
Nothing is downloaded: the JPEGs are generated into a temporary folder.
`encoded` (not in `both`): the loader's side of a GPU decoder (`--decode nvimgcodec` or `nvjpeg`):
the worker reads the file's bytes, opens its header and draws the crop box, no pixel decoded;
against the CPU path (uint8-reduced) on the ImageNet-like JPEGs, each size group and the mix by
the groups' shares. What it measures is the CPU each GPU still needs; the decode's own rate on the
GPU is bench/gpu_vision.py's.
`transfer` (not in `both`): the same loader side at the trainer's micro-batch of 256, each file's
bytes a tensor of its own against one tensor for the micro-batch's files (encoded_images.EncodedFiles):
what crossing from the loader processes costs the training process.
`epoch-start` (not in `both`): trainer.vision's own loaders (build_datasets, ElasticSampler,
train_loader, val_loader; CPU decode at 224, `--workers` processes each, micro-batches of `--batch`)
at an epoch's boundary, in the two orders trainer.vision has had: the next epoch's loader started
after the evaluation (before) and before it (now). Each round times the evaluation (a pass over the
validation images) and the wait for the next epoch's first micro-batch in both orders, alternating
which goes first; "to first batch" is the evaluation's start to that micro-batch, and "to all read"
to the last of the micro-batches the loader processes read ahead (the train set is exactly those):
the same CPU work in both orders. On this CPU the evaluation's and the early loader's processes
share the cores, so the early reads lengthen the evaluation; on a GPU node the evaluation is
mostly the GPU's work, and what the wait costs there is GPU time idle.
`dali-regions` (not in `both`): `--decode dali`'s three training graphs (--dali-regions per-file,
all, none) run on this CPU by trainer.vision_dali.DaliImages, `--workers` DALI threads, over the
ImageNet-like JPEGs (q96 4:4:4) and a 4:2:0 copy (q90), alternating within each round: images/s
of each, and what DALI's conditional costs, per-file against the graph it picks for every file of
the set (all on 4:4:4, none on 4:2:0). Which graph is faster here says nothing of a GPU, where
nvJPEG refuses the 4:2:0 regions that libjpeg-turbo here decodes: bench/gpu_vision.py's decode-only
rows measure the same graphs there.
`loader_rate` and `write_jpegs` serve bench/gpu_vision.py as well.
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from config.options import positive_int  # noqa: E402
from trainer.cli import Parser, UsageError  # noqa: E402
from trainer.torchvision_compat import import_torchvision  # noqa: E402
from trainer.vision_data import MEAN, STD, DeviceImages, transforms  # noqa: E402
from trainer.vision_jpeg import open_image  # noqa: E402

WIDTH, HEIGHT = 500, 375  # the most common ImageNet training image size

# ImageNet's training JPEGs, as the `reduced` case draws them: (group, share, long sides, short/long
# ratios). Source for the shape of it: M. Ehrlich, "Compression in the ImageNet Dataset" (read
# through its copy at terryalanunlimited.com/compression-in-the-imagenet-dataset/): the most common
# size is around 500 on a side, with outliers far larger (2592x3888 among them), and most images are
# quality 96 without chroma subsampling. The shares and the ranges below are an ASSUMPTION (no
# histogram with numbers was found): most images 500 on the long side at the usual aspect ratios,
# some smaller, 3 in 100 a camera-sized photograph. One in three is portrait.
IMAGENET_SIZES = (
    ("500", 0.80, (500, 500), (0.75, 0.666, 1.0, 0.5625)),
    ("small", 0.17, (200, 499), (0.75, 0.666, 1.0)),
    ("large", 0.03, (800, 2600), (0.75, 0.666)),
)
# Decode time follows the bits to entropy-decode, so the generated images' noise is chosen for
# ImageNet's bytes per image: its training tar is 147.8 GB (3 x 41.9 + 22.1 GB, the split listing
# at huggingface.co/datasets/presencesw/ILSVRC2012) for 1,281,167 images, 115 KB an image. Noise
# sigma 3 at quality 96, 4:4:4 gives about 0.58 bytes per pixel, so the mix above averages close
# to that (the bench prints its own mean).
IMAGENET_BYTES_PER_IMAGE = 147.8e9 / 1_281_167
IMAGENET_ENCODING = (96, 0, 3)  # quality, subsampling 0 (4:4:4, none: Ehrlich, above), noise sigma


def _write_one(args: tuple) -> None:
    """One JPEG, made with NumPy and PIL only: no torch in a forked pool (its thread pools may
    not survive the fork)."""
    import numpy as np
    from PIL import Image
    path, seed, width, height, *encoding = args
    quality, subsampling, noise = encoding or (90, -1, 12)  # -1: PIL's default (4:2:0)
    rng = np.random.default_rng(seed)
    # Smooth colour fields plus noise: compresses like a photograph, not like white noise.
    low = Image.fromarray((rng.random((6, 8, 3)) * 200 + 25).astype(np.uint8)).resize((width, height), Image.BILINEAR)
    pixels = np.asarray(low, dtype=np.float32) + noise * rng.standard_normal((height, width, 3), dtype=np.float32)
    Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(path, quality=quality, subsampling=subsampling)


def write_jpegs(root: Path, count: int, *, width: int = WIDTH, height: int = HEIGHT, classes: int = 4,
                processes: int = 1, sizes: list[tuple[int, int]] | None = None, encoding: tuple = (90, -1, 12),
                split: str = "train") -> Path:
    """An ImageFolder under root/`split` with `count` JPEGs over `classes` folders, each
    width x height or the i-th of `sizes`; `encoding`: (quality, PIL subsampling, noise sigma)."""
    jobs = []
    for i in range(count):
        folder = root / split / f"c{i % classes}"
        folder.mkdir(parents=True, exist_ok=True)
        w, h = sizes[i] if sizes else (width, height)
        jobs.append((folder / f"{i}.jpg", i, w, h, *encoding))
    if processes > 1:
        with ProcessPoolExecutor(processes) as pool:
            list(pool.map(_write_one, jobs, chunksize=16))
    else:
        for job in jobs:
            _write_one(job)
    return root / split


def imagenet_sizes(count: int, seed: int = 0, group: str | None = None) -> list[tuple[int, int]]:
    """`count` (width, height) drawn from IMAGENET_SIZES (only `group`'s where given)."""
    rng = random.Random(seed)
    rows = [row for row in IMAGENET_SIZES if group in (None, row[0])]
    out = []
    for _ in range(count):
        _, _, (lo, hi), ratios = rng.choices(rows, weights=[row[1] for row in rows])[0]
        long = rng.randint(lo, hi)
        short = round(long * rng.choice(ratios))
        out.append((short, long) if rng.random() < 1 / 3 else (long, short))
    return out


class Repeated(Dataset):
    """`length` samples cycling over the folder's images (the page cache holds them: decode bound)."""

    def __init__(self, folder, length: int):
        self.folder, self.length = folder, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        return self.folder[index % len(self.folder)]


def fp32_transform(image_size: int):
    T = import_torchvision().transforms
    return T.Compose([T.RandomResizedCrop(image_size), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(MEAN, STD)])


def loader_rate(train_dir: Path, *, path: str, workers: int, images: int, image_size: int = 224,
                batch_size: int = 32, device: torch.device = torch.device("cpu")) -> float:
    """Images/s through a DataLoader of `workers` processes, the first batch (worker start-up)
    left out; for uint8, the device-side conversion is included (DeviceImages). `path`: fp32,
    uint8 (full decode) or uint8-reduced (trainer.vision's loader: JPEGs opened lazily and decoded
    at reduced size where the crop allows)."""
    tv = import_torchvision()
    collate = None
    if path == "fp32":
        folder = tv.datasets.ImageFolder(train_dir, fp32_transform(image_size))
    elif path in ("encoded", "encoded-per-file"):  # a GPU decoder's loader: bytes and the crop box, decoded elsewhere
        from trainer.encoded_images import EncodedImages
        found = tv.datasets.ImageFolder(train_dir, loader=open_image)
        folder, collate = EncodedImages(found.samples, found.classes, train=True), EncodedImages.collate
        if path == "encoded-per-file":
            collate = per_file_collate
    else:
        folder = tv.datasets.ImageFolder(train_dir, transforms(image_size, reduce=path == "uint8-reduced")[0],
                                         loader=open_image)
    loader = DataLoader(Repeated(folder, images + batch_size), batch_size=batch_size, num_workers=workers,
                        pin_memory=device.type == "cuda", drop_last=True, prefetch_factor=4 if workers else None,
                        collate_fn=collate)
    to_input = DeviceImages(device)
    it = iter(loader)
    next(it)
    start, seen = time.perf_counter(), 0
    for batch in it:
        x = batch[0] if collate else to_input(*batch)[0]
        seen += len(x)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return seen / (time.perf_counter() - start)


def per_file_collate(batch):
    """EncodedImages.collate as it was before EncodedFiles: a tensor per file (`transfer`'s baseline)."""
    files, labels, crops, names = zip(*batch)
    return list(files), torch.tensor(labels), torch.tensor(crops, dtype=torch.int64), list(names)


def _rounds(train: Path, a: str, b: str, args, *, paths: tuple[str, str] | None = None,
            b_train: Path | None = None) -> dict:
    """Median images/s per worker of a and b over args.rounds alternating rounds, and of b / a.
    a and b name loader paths (fp32, uint8, uint8-reduced), or with `paths` two data sets: a reads
    `train`, b reads `b_train`, through paths[0] and paths[1]."""
    path_a, path_b = paths or (a, b)
    rounds = []
    for _ in range(args.rounds):
        ra = loader_rate(train, path=path_a, workers=args.workers, images=args.images)
        rb = loader_rate(b_train or train, path=path_b, workers=args.workers, images=args.images)
        rounds.append((ra, rb, rb / ra))
        print(f"round ({train.name}): {a} {ra:.0f} img/s, {b} {rb:.0f} img/s, {b}/{a} {rb / ra:.3f}", flush=True)
    return {f"{a}_images_per_s_per_worker": round(statistics.median(r[0] for r in rounds) / args.workers, 1),
            f"{b}_images_per_s_per_worker": round(statistics.median(r[1] for r in rounds) / args.workers, 1),
            f"{b}_over_{a}": round(statistics.median(r[2] for r in rounds), 3)}


def dtype_case(root: Path, args) -> dict:
    train = write_jpegs(root, 64, processes=min(2, os.cpu_count() or 1))
    return {"jpeg": f"{WIDTH}x{HEIGHT} q90", **_rounds(train, "fp32", "uint8", args),
            "bytes_per_image_fp32_over_uint8": 4}


def reduced_case(root: Path, args) -> dict:
    """The ImageNet-like mix, then each size group alone (same images per measurement)."""
    out = {"jpeg": "IMAGENET_SIZES, q96 4:4:4"}
    for group in (None, *(row[0] for row in IMAGENET_SIZES)):
        name = group or "mix"
        train = write_jpegs(root, 64, sizes=imagenet_sizes(64, group=group), processes=min(2, os.cpu_count() or 1),
                            encoding=IMAGENET_ENCODING, split=name)
        files = list(train.rglob("*.jpg"))
        out[name] = {"mean_kb": round(sum(f.stat().st_size for f in files) / len(files) / 1e3, 1),
                     **_rounds(train, "uint8", "uint8-reduced", args)}
    out["imagenet_mean_kb"] = round(IMAGENET_BYTES_PER_IMAGE / 1e3, 1)
    # The mix again from the groups' rates weighted by their shares (64 images hold only about two
    # of the 3% large ones, so the drawn mix depends on which two).
    return _by_shares(out, "uint8", "uint8-reduced")


def _by_shares(out: dict, a: str, b: str) -> dict:
    """`out` (a case's per-group results) with each side's images/s per worker over the groups
    weighted by their IMAGENET_SIZES shares, and b over a."""
    for side in (a, b):
        seconds = sum(share / out[group][f"{side}_images_per_s_per_worker"] for group, share, *_ in IMAGENET_SIZES)
        out[f"by_shares_{side}_images_per_s_per_worker"] = round(1 / seconds, 1)
    out[f"by_shares_{b}_over_{a}"] = round(out[f"by_shares_{b}_images_per_s_per_worker"]
                                           / out[f"by_shares_{a}_images_per_s_per_worker"], 3)
    return out


def encoded_case(root: Path, args) -> dict:
    """The loader's side of --decode nvimgcodec (and nvjpeg): read the file, open its header, draw
    the crop box; against trainer.vision's CPU path on the same ImageNet-like files, each size
    group alone and the mix by the groups' shares."""
    out: dict = {"jpeg": "IMAGENET_SIZES, q96 4:4:4"}
    for group in (row[0] for row in IMAGENET_SIZES):
        train = write_jpegs(root, 64, sizes=imagenet_sizes(64, group=group), processes=min(2, os.cpu_count() or 1),
                            encoding=IMAGENET_ENCODING, split=group)
        out[group] = _rounds(train, "uint8-reduced", "encoded", args)
    return _by_shares(out, "uint8-reduced", "encoded")


def transfer_case(root: Path, args) -> dict:
    """A GPU decoder's micro-batches of 256 files (the trainer's batch) crossing from the loader
    processes: each file a tensor of its own (a descriptor each) against trainer.vision's
    EncodedFiles (one tensor a micro-batch), on the ImageNet-like files."""
    train = write_jpegs(root, 256, sizes=imagenet_sizes(256), processes=min(2, os.cpu_count() or 1),
                        encoding=IMAGENET_ENCODING, split="transfer")
    rounds = []
    images = max(args.images, 2048)
    for _ in range(args.rounds):
        per_file = loader_rate(train, path="encoded-per-file", workers=args.workers, images=images, batch_size=256)
        packed = loader_rate(train, path="encoded", workers=args.workers, images=images, batch_size=256)
        rounds.append((per_file, packed, packed / per_file))
        print(f"round: a tensor per file {per_file:.0f} img/s, one per micro-batch {packed:.0f} img/s, "
              f"ratio {packed / per_file:.3f}", flush=True)
    return {"batch": 256, "images": images,
            "per_file_images_per_s": round(statistics.median(r[0] for r in rounds), 1),
            "packed_images_per_s": round(statistics.median(r[1] for r in rounds), 1),
            "packed_over_per_file": round(statistics.median(r[2] for r in rounds), 3)}


def _reencoded_copy(train: Path, root: Path, short_side: int | None = None):
    """`train` (an ImageFolder split) re-encoded under root/train by trainer.imagenet_reencode at
    the settings of `trainer.data imagenet --reencode [--short-side N]` for resnet50-imagenet;
    (its train folder, the settings)."""
    from trainer.imagenet import Report
    from trainer.imagenet_reencode import reencode, settings_for
    settings = settings_for(short_side, None, "resnet50-imagenet")
    pairs = [(f, root / "train" / f.parent.name / f.name) for f in sorted(train.rglob("*.jpg"))]
    root.mkdir(parents=True)
    reencode(pairs, root, settings, min(2, os.cpu_count() or 1), Report())
    return root / "train", settings


def _mean_kb(folder: Path) -> float:
    files = list(folder.rglob("*.jpg"))
    return round(sum(f.stat().st_size for f in files) / len(files) / 1e3, 1)


def reencoded_case(root: Path, args) -> dict:
    """Originals against the re-encoded copy, the mix then each size group alone, and the mix again
    from the groups' rates weighted by their shares."""
    out: dict = {"jpeg": "IMAGENET_SIZES, q96 4:4:4", "loader": "uint8-reduced (trainer.vision's)"}
    for group in (None, *(row[0] for row in IMAGENET_SIZES)):
        name = group or "mix"
        train = write_jpegs(root, 64, sizes=imagenet_sizes(64, group=group), processes=min(2, os.cpu_count() or 1),
                            encoding=IMAGENET_ENCODING, split=name)
        copy, settings = _reencoded_copy(train, root / f"reencoded-{name}", args.short_side)
        out["settings"] = settings.describe()
        out[name] = {"original_mean_kb": _mean_kb(train), "reencoded_mean_kb": _mean_kb(copy),
                     **_rounds(train, "original", "reencoded", args, paths=("uint8-reduced", "uint8-reduced"),
                               b_train=copy)}
    for side in ("original", "reencoded"):
        out[f"by_shares_{side}_mean_kb"] = round(sum(share * out[group][f"{side}_mean_kb"]
                                                     for group, share, *_ in IMAGENET_SIZES), 1)
    return _by_shares(out, "original", "reencoded")


def epoch_start_case(root: Path, args) -> dict:
    """The wait for an epoch's first micro-batch with its loader started after the evaluation
    against before it (module docstring)."""
    from config.workloads.vision import ImageDataConfig, SyntheticImagesConfig
    from trainer.vision_data import ElasticSampler, UnreadableImages, build_datasets, train_loader, val_loader

    batch, workers = args.batch, args.workers
    # The train set is the micro-batches the loader processes hold ahead (2 each): one epoch is
    # what the early start reads, and nothing is left in flight when a round ends.
    train_images, val_images = 2 * workers * batch, max(args.images, batch)
    for split, count in (("train", train_images), ("val", val_images)):
        write_jpegs(root / "data", count, sizes=imagenet_sizes(count), encoding=IMAGENET_ENCODING,
                    processes=min(2, os.cpu_count() or 1), split=split)
    data = ImageDataConfig(source=str(root / "data"), image_size=224, workers=workers)
    train, val, _ = build_datasets(data, SyntheticImagesConfig(), seed=0)
    unreadable = UnreadableImages(limit=0)
    sampler = ElasticSampler(train, num_replicas=1, rank=0, global_batch=batch, seed=0)
    loader = train_loader(train, sampler, data, batch_size=batch, seed=0, rank=0, pin=False, unreadable=unreadable)
    evaluation = val_loader(val, data, batch_size=batch, rank=0, world_size=1, pin=False, unreadable=unreadable)
    epochs = iter(range(10**6))

    def evaluate() -> float:
        start = time.perf_counter()
        assert sum(len(labels) for _, labels in evaluation) == val_images
        return time.perf_counter() - start

    def start_reading():
        epoch = next(epochs)
        sampler.set_position(epoch, 0)
        unreadable.reading(epoch)
        return iter(loader)

    def first_and_rest(batches) -> tuple[float, float, float]:
        """(seconds to the first micro-batch, when it came, when the last came)."""
        start = time.perf_counter()
        next(batches)
        came = time.perf_counter()
        assert sum(1 for _ in batches) == 2 * workers - 1
        return came - start, came, time.perf_counter()

    def boundary(early: bool) -> dict:
        """One epoch boundary: the next epoch's loader started before the evaluation (now) or after it."""
        start = time.perf_counter()
        batches = start_reading() if early else None
        evaluated = evaluate()
        # iter() is part of the wait where it comes after: it hands the loader processes their indices
        waited, came, done = first_and_rest(batches if early else start_reading())
        return {"evaluation_s": evaluated, "wait_s": waited, "to_first_batch_s": came - start,
                "to_all_read_s": done - start}

    # "after": the order before (evaluate, then start the next epoch's loader); "before": the order now
    orders = (("after", False), ("before", True))
    for _, early in orders:
        boundary(early)  # the loader processes start (persistent), unmeasured
    rounds = []
    for r in range(args.rounds):
        got = {name: boundary(early) for name, early in (orders if r % 2 == 0 else orders[::-1])}
        rounds.append(got)
        sides_said = (f"loader started {name} the evaluation: evaluation {v['evaluation_s']:.3f} s, wait "
                      f"{v['wait_s']:.3f} s, all read {v['to_all_read_s']:.3f} s" for name, v in got.items())
        print(f"round {r + 1}: " + "; ".join(sides_said), flush=True)
    out: dict = {"batch": batch, "workers": workers, "train_images": train_images, "val_images": val_images,
                 "jpeg": "IMAGENET_SIZES, q96 4:4:4"}
    for name in ("after", "before"):
        for key in ("evaluation_s", "wait_s", "to_first_batch_s", "to_all_read_s"):
            out[f"{name}_{key}"] = round(statistics.median(r[name][key] for r in rounds), 4)
    for key in ("wait", "to_first_batch", "to_all_read"):
        out[f"{key}_after_over_before"] = round(statistics.median(r["after"][f"{key}_s"] / r["before"][f"{key}_s"]
                                                                  for r in rounds), 3)
    return out


def dali_regions_case(root: Path, args) -> dict:
    """DALI's three training graphs on each of the two sets (module docstring)."""
    from trainer.vision_dali import DaliImages, import_dali
    from trainer.encoded_images import EncodedImages

    if import_dali() is None:
        raise SystemExit("error: --case dali-regions: nvidia.dali is not installed (make install installs it)")
    sets = {"4:4:4": IMAGENET_ENCODING, "4:2:0": (90, 2, IMAGENET_ENCODING[2])}
    picks = {"4:4:4": "all", "4:2:0": "none"}  # the graph per-file picks for every file of the set
    modes = ("per-file", "all", "none")
    batches, decoders = {}, {}
    for name, encoding in sets.items():
        folder = write_jpegs(root, args.images, sizes=imagenet_sizes(args.images), encoding=encoding,
                             processes=min(2, os.cpu_count() or 1), split=name.replace(":", ""))
        dataset = EncodedImages([(str(f), 0) for f in sorted(folder.rglob("*.jpg"))], [], train=True)
        items = [dataset[i] for i in range(len(dataset))]
        batches[name] = [EncodedImages.collate(items[i:i + args.batch]) for i in range(0, len(items), args.batch)]
    for mode in modes:
        decoders[mode] = DaliImages(torch.device("cpu"), 224, hw_decoder_load=0.9, threads=args.workers,
                                    regions=mode)
        decoders[mode].images = lambda images, labels: images  # the uint8 micro-batch: no normalising
        for name in sets:
            decoders[mode](*batches[name][0])  # the pipeline is built, unmeasured

    def rate(mode: str, name: str) -> float:
        start = time.perf_counter()
        for batch in batches[name]:
            decoders[mode](*batch)
        return args.images / (time.perf_counter() - start)

    rounds = []
    for r in range(args.rounds):
        order = modes if r % 2 == 0 else modes[::-1]
        rounds.append({name: {mode: rate(mode, name) for mode in order} for name in sets})
        print(f"round {r + 1}: " + "; ".join(f"{name} " + ", ".join(f"{mode} {v:,.0f}" for mode, v in got.items())
                                             for name, got in rounds[-1].items()) + " images/s", flush=True)
    out: dict = {"batch": args.batch, "dali_threads": args.workers, "images": args.images}
    for name in sets:
        out[name] = {f"{mode}_images_per_s": round(statistics.median(r[name][mode] for r in rounds), 1)
                     for mode in modes}
        out[name][f"per_file_over_{picks[name]}"] = round(
            statistics.median(r[name]["per-file"] / r[name][picks[name]] for r in rounds), 3)
    return out


def main(argv=None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--case", choices=("dtype", "reduced", "both", "reencoded", "encoded", "transfer", "epoch-start",
                                      "dali-regions"), default="both")
    p.add_argument("--images", type=positive_int, default=256, help="images read per measurement")
    p.add_argument("--rounds", type=positive_int, default=3)
    p.add_argument("--workers", type=positive_int, default=1, help="loader processes (1: images/s per worker core)")
    p.add_argument("--short-side", type=positive_int, default=None,
                   help="reencoded: the copy's --short-side (default: trainer.data imagenet --reencode's)")
    p.add_argument("--batch", type=positive_int, default=64,
                   help="epoch-start, dali-regions: the micro-batch (trainer.vision --batch-size)")
    args = p.parse_args(argv)
    if args.short_side is not None:
        from trainer.imagenet_reencode import settings_for
        try:  # before the JPEGs are written and read, not after
            settings_for(args.short_side, None, "resnet50-imagenet")
        except UsageError as problem:
            p.error(str(problem))
    torch.set_num_threads(1)
    result = {"workers": args.workers, "images": args.images, "crop": 224, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="vision-loader-") as tmp:
        if args.case in ("dtype", "both"):
            result["dtype"] = dtype_case(Path(tmp), args)
        if args.case in ("reduced", "both"):
            result["reduced"] = reduced_case(Path(tmp), args)
        if args.case == "reencoded":
            result["reencoded"] = reencoded_case(Path(tmp), args)
        if args.case == "encoded":
            result["encoded"] = encoded_case(Path(tmp), args)
        if args.case == "transfer":
            result["transfer"] = transfer_case(Path(tmp), args)
        if args.case == "epoch-start":
            result["epoch_start"] = epoch_start_case(Path(tmp), args)
        if args.case == "dali-regions":
            result["dali_regions"] = dali_regions_case(Path(tmp), args)
    print(json.dumps(result))
    ratios = [v for case in result.values() if isinstance(case, dict)
              for v in [*case.values(), *(x for sub in case.values() if isinstance(sub, dict) for x in sub.values())]
              if isinstance(v, float)]
    return 0 if ratios and all(math.isfinite(r) and r > 0 for r in ratios) else 1


if __name__ == "__main__":
    raise SystemExit(main())
