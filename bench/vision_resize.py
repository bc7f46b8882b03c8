"""The GPU decoders' crop-resize-flip: torchvision one image at a time against a micro-batch at once
(trainer/vision_resize.py), the host's time per image.

    python bench/vision_resize.py [--images 64] [--rounds 7]

On a GPU the host only queues kernels, so what the H100 runs showed as the GPU decoders' limit is
the host's time per image (bench/RESULTS.md, 2026-11-26). Without one, small images make the CPU's
kernels cheap enough that the time is the same thing: the host's dispatch work per image. Both
paths run in this one process, alternating within each round; the ratio is the median of the
rounds' ratios. With CUDA it also times ImageNet-sized images there: the host's time to queue a
micro-batch and the GPU's time to run it, both paths.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from config.options import positive_int  # noqa: E402
from trainer.cli import Parser  # noqa: E402
from trainer.torchvision_compat import prepare  # noqa: E402
from trainer.encoded_images import NO_CROP  # noqa: E402
from trainer.vision_decode import augment  # noqa: E402
from trainer.vision_resize import resized_crops  # noqa: E402


def micro_batch(n: int, low: int, high: int, device: torch.device, seed: int = 0):
    """n uint8 images of sizes in [low, high), each with a training box (a quarter NO_CROP)."""
    generator = torch.Generator().manual_seed(seed)

    def draw(lo, hi):
        return int(torch.randint(lo, hi, (1,), generator=generator))
    images, boxes = [], []
    for i in range(n):
        h, w = draw(low, high), draw(low, high)
        images.append(torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=generator).to(device))
        height, width = draw(h // 3, h + 1), draw(w // 3, w + 1)
        boxes.append(list(NO_CROP) if i % 4 == 3 else [draw(0, h - height + 1), draw(0, w - width + 1), height, width,
                                                         i % 2])
    return images, boxes


def per_image(images, boxes, size):
    """torchvision's resized_crop and flip, image by image. On the CPU it resizes uint8 natively, in
    one kernel; on a GPU it casts to float, resizes, rounds and casts back: the CPU runs that
    sequence here too, so that the host's work is what it is on a GPU."""
    if images[0].is_cuda:
        return torch.stack([augment(image, box, size) for image, box in zip(images, boxes)])
    return torch.stack([augment(image.float(), box, size).round_().to(torch.uint8) for image, box in zip(images, boxes)])


def batched(images, boxes, size):
    return resized_crops(images, boxes, size)


def host_us_per_image(path, images, boxes, size) -> float:
    """The host's time to run (on a GPU: to queue) one micro-batch, per image."""
    start = time.perf_counter()
    path(images, boxes, size)
    return (time.perf_counter() - start) / len(images) * 1e6


def compare(images, boxes, size, rounds: int, cuda: bool) -> dict[str, float]:
    paths = {"torchvision per image": per_image, "batched": batched}
    for path in paths.values():  # warm-up: allocations, first-use set-up
        path(images, boxes, size)
    host = {name: [] for name in paths}
    device = {name: [] for name in paths}
    for _ in range(rounds):
        for name, path in paths.items():
            if cuda:
                torch.cuda.synchronize()
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
            host[name].append(host_us_per_image(path, images, boxes, size))
            if cuda:
                end.record()
                end.synchronize()
                device[name].append(begin.elapsed_time(end) * 1e3 / len(images))
    out = {f"host us/image, {name}": statistics.median(times) for name, times in host.items()}
    out["host ratio, torchvision / batched"] = statistics.median(
        a / b for a, b in zip(host["torchvision per image"], host["batched"]))
    if cuda:
        out.update({f"GPU us/image, {name}": statistics.median(times) for name, times in device.items()})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=positive_int, default=64, help="images per micro-batch")
    parser.add_argument("--rounds", type=positive_int, default=7, help="rounds, each path once a round")
    args = parser.parse_args(argv)
    prepare()
    torch.set_num_threads(1)  # the host's own work, not how well a CPU kernel spreads over cores
    cpu = torch.device("cpu")
    print(f"CPU, {args.images} images of 8-24 px to 8 x 8 (dispatch-bound: the host's work per image)")
    images, boxes = micro_batch(args.images, 8, 24, cpu)
    for name, value in compare(images, boxes, 8, args.rounds, cuda=False).items():
        print(f"  {name}: {value:.2f}")
    if torch.cuda.is_available():
        gpu = torch.device("cuda")
        print(f"{torch.cuda.get_device_name()}, {args.images} images of 300-500 px to 224 x 224")
        images, boxes = micro_batch(args.images, 300, 500, gpu)
        for name, value in compare(images, boxes, 224, args.rounds, cuda=True).items():
            print(f"  {name}: {value:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
