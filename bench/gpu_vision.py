"""ResNet-50 training images/s on one GPU against the images/s the CPU loader gives on this machine.

    python bench/gpu_vision.py [--out result.json] [--workers N] [--dry-run]

One script, one run, under 3 minutes on a single H200 with 16 CPU cores:
1. GPU: ResNet-50 (torchvision, random weights, 1,000 classes) trains on synthetic uint8 batches
   already on the device, normalised there as trainer.vision does (DeviceImages), bf16 autocast,
   channels_last, cudnn.benchmark, fused SGD; batch 256 at 224x224, 5 warm-up steps, then
   `--steps` timed steps ending in a synchronize.
2. Loader: JPEGs of ImageNet's typical size (500x375, written to a temporary folder, nothing is
   downloaded) through trainer.vision's uint8 CPU path (PIL decode, reduced in the DCT domain where
   the crop allows, RandomResizedCrop, flip, PILToTensor; `--loader-path uint8` decodes in full)
   with `--workers` processes (default: the CPUs less one), pinned, copied to the GPU
   and normalised there.
Prints both, the loader's images/s per worker, and loader / GPU: below 1 the loader is the
bottleneck on this machine at this worker count. `--dry-run` runs everything at tiny sizes on the
CPU (checks the script, measures nothing meaningful).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from bench.vision_loader import loader_rate, write_jpegs  # noqa: E402
from config import paths  # noqa: E402
from config.workloads.vision import SgdConfig  # noqa: E402
from trainer.optim import build_sgd  # noqa: E402
from trainer.torchvision_compat import import_torchvision  # noqa: E402
from trainer.vision_data import DeviceImages  # noqa: E402


def gpu_rate(device: torch.device, *, batch: int, size: int, steps: int, warmup: int) -> float:
    """ResNet-50 training images/s on `device` with the batch already there."""
    torch.backends.cudnn.benchmark = True
    model = import_torchvision().models.resnet50(num_classes=1000).to(device)
    if device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)
    optimizer = build_sgd(model, SgdConfig())
    to_input = DeviceImages(device)
    g = torch.Generator(device=device).manual_seed(0)
    raw = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8, device=device, generator=g)
    labels = torch.randint(0, 1000, (batch,), device=device, generator=g)

    def step():
        images, y = to_input(raw, labels)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = F.cross_entropy(model(images), y, label_smoothing=0.1)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return steps * batch / (time.perf_counter() - start)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", help="also write the result here as JSON")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1), help="loader processes")
    p.add_argument("--steps", type=int, default=20, help="timed GPU steps")
    p.add_argument("--loader-images", type=int, default=6000, help="images the loader delivers in its timing")
    p.add_argument("--loader-path", choices=("uint8-reduced", "uint8"), default="uint8-reduced",
                   help="uint8-reduced: trainer.vision's loader (reduced-size JPEG decode where the crop allows); "
                        "uint8: full decode, as the 2026-11-26 H200 figures were measured")
    p.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU: checks the script only")
    args = p.parse_args(argv)
    if args.out:
        try:
            paths.output_file(args.out)
        except paths.PathProblem as problem:
            print(f"error: --out: {problem}", file=sys.stderr)
            return 2
    cuda = torch.cuda.is_available() and not args.dry_run
    if not cuda and not args.dry_run:
        print("error: no CUDA device here; pass --dry-run to check the script on the CPU", file=sys.stderr)
        return 2
    device = torch.device("cuda" if cuda else "cpu")
    batch, size, steps, warmup = (256, 224, args.steps, 5) if cuda else (2, 64, 2, 1)
    workers = args.workers if cuda else 1
    loader_images = args.loader_images if cuda else 32

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu-vision-") as tmp:
        # The JPEGs first: the pool forks before torch has started any threads.
        train = write_jpegs(Path(tmp), 512 if cuda else 16, processes=min(16, os.cpu_count() or 1))
        gpu = gpu_rate(device, batch=batch, size=size, steps=steps, warmup=warmup)
        print(f"GPU: ResNet-50 trains at {gpu:,.0f} images/s (batch {batch}, {size}x{size}, bf16, channels_last)",
              flush=True)
        loader = loader_rate(train, path=args.loader_path, workers=workers, images=loader_images, image_size=size,
                             batch_size=64 if cuda else 4, device=device)
    print(f"Loader: {loader:,.0f} images/s with {workers} workers ({loader / workers:,.0f} per worker), "
          f"{args.loader_path} path, 500x375 JPEGs", flush=True)
    result = {"device": torch.cuda.get_device_name(device) if cuda else "cpu (dry run)",
              "torch": torch.__version__, "torchvision": import_torchvision().__version__,
              "cpus": os.cpu_count(), "dry_run": args.dry_run,
              "gpu_images_per_s": round(gpu, 1), "batch": batch, "image_size": size, "steps": steps,
              "loader_images_per_s": round(loader, 1), "loader_path": args.loader_path, "loader_workers": workers,
              "loader_images_per_s_per_worker": round(loader / workers, 1),
              "loader_over_gpu": round(loader / gpu, 3), "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
