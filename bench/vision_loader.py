"""trainer.vision's CPU input path: images/s per loader worker, fp32 (before) against uint8 (now).

    python bench/vision_loader.py [--images 256] [--rounds 3] [--workers 1]

Writes JPEGs of ImageNet's typical size (500x375, quality 90) into a temporary folder (nothing is
downloaded), then reads them through an ImageFolder and a DataLoader with `--workers` processes:
- fp32: PIL decode, RandomResizedCrop(224), flip, ToTensor and Normalize in the worker (the old path);
- uint8: PIL decode, RandomResizedCrop(224), flip, PILToTensor in the worker (trainer/vision_data.py);
  the conversion and normalisation then run where the batch lands (here on the CPU, timed in).
Both run in this one process, alternating within each round; the ratio is the median over rounds
of that round's uint8/fp32 ratio, so a slow round on a shared machine slows both sides.
`loader_rate` and `write_jpegs` serve bench/gpu_vision.py as well.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from trainer.torchvision_compat import import_torchvision  # noqa: E402
from trainer.vision_data import MEAN, STD, DeviceImages, transforms  # noqa: E402

WIDTH, HEIGHT = 500, 375  # the most common ImageNet training image size


def _write_one(args: tuple[Path, int, int, int]) -> None:
    """One JPEG, made with NumPy and PIL only: no torch in a forked pool (its thread pools may
    not survive the fork)."""
    import numpy as np
    from PIL import Image
    path, seed, width, height = args
    rng = np.random.default_rng(seed)
    # Smooth colour fields plus noise: compresses like a photograph, not like white noise.
    low = Image.fromarray((rng.random((6, 8, 3)) * 200 + 25).astype(np.uint8)).resize((width, height), Image.BILINEAR)
    pixels = np.asarray(low, dtype=np.float32) + 12 * rng.standard_normal((height, width, 3), dtype=np.float32)
    Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(path, quality=90)


def write_jpegs(root: Path, count: int, *, width: int = WIDTH, height: int = HEIGHT, classes: int = 4,
                processes: int = 1) -> Path:
    """An ImageFolder under root/train with `count` JPEGs over `classes` folders."""
    jobs = []
    for i in range(count):
        folder = root / "train" / f"c{i % classes}"
        folder.mkdir(parents=True, exist_ok=True)
        jobs.append((folder / f"{i}.jpg", i, width, height))
    if processes > 1:
        with ProcessPoolExecutor(processes) as pool:
            list(pool.map(_write_one, jobs, chunksize=16))
    else:
        for job in jobs:
            _write_one(job)
    return root / "train"


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
    left out; for uint8, the device-side conversion is included (DeviceImages)."""
    tv = import_torchvision()
    transform = fp32_transform(image_size) if path == "fp32" else transforms(image_size)[0]
    folder = tv.datasets.ImageFolder(train_dir, transform)
    loader = DataLoader(Repeated(folder, images + batch_size), batch_size=batch_size, num_workers=workers,
                        pin_memory=device.type == "cuda", drop_last=True, prefetch_factor=4 if workers else None)
    to_input = DeviceImages(device)
    it = iter(loader)
    next(it)
    start, seen = time.perf_counter(), 0
    for batch in it:
        x, _ = to_input(*batch)
        seen += len(x)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return seen / (time.perf_counter() - start)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=256, help="images read per measurement")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, default=1, help="loader processes (1: images/s per worker core)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="vision-loader-") as tmp:
        train = write_jpegs(Path(tmp), 64, processes=min(2, os.cpu_count() or 1))
        rounds = []
        for _ in range(args.rounds):
            fp32 = loader_rate(train, path="fp32", workers=args.workers, images=args.images)
            uint8 = loader_rate(train, path="uint8", workers=args.workers, images=args.images)
            rounds.append({"fp32": fp32, "uint8": uint8, "ratio": uint8 / fp32})
            print(f"round: fp32 {fp32:.0f} img/s, uint8 {uint8:.0f} img/s, uint8/fp32 {uint8 / fp32:.3f}", flush=True)
    result = {"workers": args.workers, "images": args.images, "jpeg": f"{WIDTH}x{HEIGHT} q90", "crop": 224,
              "fp32_images_per_s_per_worker": round(statistics.median(r["fp32"] for r in rounds) / args.workers, 1),
              "uint8_images_per_s_per_worker": round(statistics.median(r["uint8"] for r in rounds) / args.workers, 1),
              "uint8_over_fp32": round(statistics.median(r["ratio"] for r in rounds), 3),
              "bytes_per_image_fp32_over_uint8": 4, "cpus": os.cpu_count()}
    print(json.dumps(result))
    return 0 if all(math.isfinite(r["ratio"]) for r in rounds) else 1


if __name__ == "__main__":
    raise SystemExit(main())
