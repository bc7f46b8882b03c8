"""ResNet-50 training images/s on one GPU against what feeds it: the CPU loader, the GPU JPEG
decoders alone, and trainer.vision itself with each --decode.

    python bench/gpu_vision.py [--out result.json] [--workers N] [--decoders dali,nvimgcodec,cpu,nvimgcodec:0,nvjpeg]
        [--decode-rounds 2] [--budget-s 200] [--dry-run]

One script, one run (--budget-s bounds it): on one H100 with 16 CPU cores 103-114 s with two trainer
runs of 28-36 s each (bench/RESULTS.md, 2026-11-26, late night), so about 210 s with the default five:
1. GPU: ResNet-50 (torchvision, random weights, 1,000 classes) trains on synthetic uint8 batches
   already on the device, normalised there as trainer.vision does (DeviceImages), bf16 autocast,
   channels_last, cudnn.benchmark, fused SGD; batch 256 at 224x224, 5 warm-up steps, then
   `--steps` timed steps ending in a synchronize: the rate with no input cost at all (`gpu_rate`).
2. Loader: JPEGs of ImageNet's typical size (500x375, written to a temporary folder, nothing is
   downloaded) through trainer.vision's uint8 CPU path (PIL decode, reduced in the DCT domain where
   the crop allows, RandomResizedCrop, flip, PILToTensor; `--loader-path uint8` decodes in full)
   with `--workers` processes (default: the CPUs less one), pinned, copied to the GPU
   and normalised there.
3. Decode only: trainer.vision's GPU decoders' input (the crop box decoded, resized, flipped,
   normalised; no model) over ImageNet-like JPEGs (bench/vision_loader.py IMAGENET_SIZES, q96
   4:4:4) in micro-batches of 256: nvImageCodec (trainer/vision_decode.py CodecImages) at
   --hw-decoder-load 0.9 (the GPU's hardware JPEG decoder takes most) and 0 (CUDA only), and DALI
   (trainer/vision_dali.py) at 0.9: the decoders' own rates, to be scaled to another GPU on paper.
   DALI three ways (--dali-regions, named as --decoders names them): the trainer's choice per file
   ("dali:0.9": the box alone where the JPEG's chroma is not subsampled, else the whole image then
   cropped), every box alone ("dali:0.9:all", fn.decoders.image_slice) and every image whole
   ("dali:0.9:none"); and the three again over a 4:2:0 copy of the JPEGs (q90, what `trainer.data
   imagenet --reencode` writes): nvImageCodec 0.9.0 refuses a region of a 4:2:0 JPEG on its nvJPEG
   decoders and the CPU decodes it (trainer/vision_dali.py's docstring), which the "dali:0.9:all
   4:2:0" row shows as a rate. On the 4:4:4 files the per-file row is the :all row's graph, on the
   4:2:0 copy the :none row's, both behind DALI's conditional; and the three over both kinds
   alternating ("mixed", as raw ImageNet mixes them), where per-file sends each kind its way. The list is measured
   `--decode-rounds` times (default 2), round after round: a row gives its rounds' median and their
   spread, and its slowest micro-batch against its median one (a pipeline's one-time start shows there).
4. Trainer: `python -m trainer.vision --model resnet50` (a process per run, batch 256 at 224, bf16,
   `--workers` loader processes) on an ImageFolder of those JPEGs (`--trainer-files`: the 4:4:4
   files by default, the 4:2:0 copy, or both alternating) hard-linked to `--epoch-images`
   names (bench/vision_runs.py), once per entry of `--decoders`; images/s and the data-wait
   fraction over the epochs after the first, read from its --metrics-file, and "steady", the median
   metrics window of those epochs less each epoch's first (the loader's refill after an
   evaluation, which a real epoch of thousands of steps amortises). The data wait is the time a
   step waited for the loader processes; a GPU decoder's own time, in the training process, shows
   in images/s instead. The runs use 8 class folders (the 1,000-way output layer is a rounding
   error of ResNet-50's FLOPs) and 256 validation images.
Prints each rate and its ratio to the GPU's rate of step 1: near 1, that input is not the
bottleneck on this GPU; the loader's images/s per worker and loader / GPU as before. A run that no
longer fits in --budget-s is skipped, with the reason, before it starts, never killed mid-way
(one that outruns the time left is killed and reported as failed). `--dry-run` runs every part
tiny on the CPU (nvImageCodec's CPU backend; nvjpeg skipped with trainer.vision's own reason):
checks the script, measures nothing meaningful.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from bench.gpu_llm import write_json  # noqa: E402
from bench.vision_loader import IMAGENET_ENCODING, imagenet_sizes, loader_rate, write_jpegs  # noqa: E402
from bench.vision_runs import (DEFAULT_RUNS, REPO, Budget, Run, RunResult, describe, linked_folder,  # noqa: E402
                               parse_runs, trainer_run)
from config import paths  # noqa: E402
from config.options import positive_int, timeout_seconds  # noqa: E402
from config.workloads.vision import ImageDataConfig, SgdConfig  # noqa: E402
from trainer.cli import Parser  # noqa: E402
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




def decode_rate(samples: list[tuple[str, int]], device: torch.device, run: Run, *, size: int, batch: int,
                images: int, threads: int) -> dict:
    """Images/s of trainer.vision's input for `run` alone, CodecImages (nvimgcodec) or DaliImages
    (dali): the crop box decoded, resized, flipped, normalised on `device`, over `samples` cycled,
    in micro-batches of `batch`. The loader's part (file bytes, crop boxes) is done before the
    clock starts, and one warm-up batch is left out. `decode_call_share`: the part of the host's
    time inside the decoder's own call (nvImageCodec's decode, DALI's run); the rest is ours. For
    DALI, `run`'s --dali-regions (the trainer's per-file where it names none)."""
    from trainer.encoded_images import EncodedImages
    from trainer.vision_input import device_input

    dataset = EncodedImages(samples, [], train=True)
    items = [dataset[i] for i in range(len(samples))]
    batches = [EncodedImages.collate([items[(b * batch + j) % len(items)] for j in range(batch)])
               for b in range(1 + max(1, images // batch))]
    data = ImageDataConfig(source="files", image_size=size, workers=threads, decode=run.decode,
                           hw_decoder_load=run.hw_decoder_load, dali_regions=run.dali_regions or "per-file")
    to_input = device_input(data, device)
    to_input(*batches[0])
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    if run.decode == "dali":  # the pipeline the warm-up built
        pipe = to_input.pipes[True]
        pipe.run = timed = Timed(pipe.run)
    else:
        timed = Timed(to_input.decoder.decode)
        to_input.decoder = SimpleNamespace(decode=timed)
    start = time.perf_counter()
    calls = []  # the host's time per micro-batch: a one-time stall (a pipeline's first real work) shows as its slowest
    for micro_batch in batches[1:]:
        began = time.perf_counter()
        to_input(*micro_batch)
        calls.append(time.perf_counter() - began)
    host = time.perf_counter() - start
    sync()
    count = batch * (len(batches) - 1)
    return {"hw_decoder_load": run.hw_decoder_load, "images_per_s": round(count / (time.perf_counter() - start), 1),
            "host_images_per_s": round(count / host, 1), "decode_call_share": round(timed.seconds / host, 3),
            "median_batch_ms": round(statistics.median(calls) * 1e3, 2), "slowest_batch_ms": round(max(calls) * 1e3, 2),
            "decoder_line": to_input.describe()}


class Timed:
    """A call whose time is added up in `seconds`: a decoder's own call, so that the host's time per
    batch splits into the decoder's part (nvImageCodec's parsing and submission, DALI's run) and
    the trainer's (the code streams, the crop, resize and flip of each image for nvImageCodec)."""

    def __init__(self, call):
        self.call, self.seconds = call, 0.0

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.call(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start


def run_unavailable(run: Run, data: str, cuda: bool) -> str | None:
    """trainer.vision's own refusal of this --decode here (it would exit 2 after its start-up)."""
    from trainer.cli import UsageError
    from trainer.torchvision_compat import prepare
    from trainer.vision_input import PACKAGES, check_installed, check_nvjpeg, installed

    try:
        if run.decode == "nvjpeg":
            check_nvjpeg(data, cuda=cuda, native_torchvision=prepare())
        elif run.decode in PACKAGES:
            check_installed(run.decode, data, installed=installed(run.decode))
    except UsageError as refusal:
        return str(refusal)
    return None


def decoders(text: str) -> list[Run]:
    """--decoders for argparse, which shows an ArgumentTypeError's own words."""
    try:
        return parse_runs(text)
    except ValueError as problem:
        raise argparse.ArgumentTypeError(str(problem)) from None


def parse_args(argv=None) -> argparse.Namespace:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("--out", help="also write the result here as JSON")
    p.add_argument("--workers", type=positive_int, default=max(1, (os.cpu_count() or 2) - 1), help="loader processes")
    p.add_argument("--steps", type=positive_int, default=20, help="timed GPU steps")
    p.add_argument("--loader-images", type=positive_int, default=6000, help="images the loader delivers in its timing")
    p.add_argument("--loader-path", choices=("uint8-reduced", "uint8"), default="uint8-reduced",
                   help="uint8-reduced: trainer.vision's loader (reduced-size JPEG decode where the crop allows); "
                        "uint8: full decode, as the 2026-11-26 H200 figures were measured")
    p.add_argument("--decoders", type=decoders, default=parse_runs(DEFAULT_RUNS), metavar="LIST",
                   help=f"trainer runs, in this order: trainer.vision --decode values, nvimgcodec:LOAD or "
                        f"dali:LOAD for their --hw-decoder-load (default {DEFAULT_RUNS})")
    p.add_argument("--epochs", type=positive_int, default=2, help="epochs per trainer run; the first is warm-up")
    p.add_argument("--trainer-files", choices=tuple(FILE_KINDS), default="4:4:4",
                   help="the JPEGs the trainer runs read: the ImageNet-like q96 4:4:4 files, their q90 4:2:0 copy, "
                        "or both alternating (raw ImageNet mixes them)")
    p.add_argument("--epoch-images", type=positive_int, default=16384,
                   help="training images per epoch of a trainer run (down to whole metrics windows: 2,048 on a GPU)")
    p.add_argument("--decode-images", type=positive_int, default=4096, help="images per decode-only measurement")
    p.add_argument("--decode-rounds", type=positive_int, default=2,
                   help="times the decode-only list is measured, round after round: a row that moves between "
                        "rounds (the hardware decoder's rows moved 1.9x between two H100 runs) shows its spread")
    p.add_argument("--budget-s", type=timeout_seconds, default=200.0, help="wall-clock bound of the whole script")
    p.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU: checks the script only")
    p.add_argument("--profile", metavar="DIR",
                   help="run each trainer under py-spy (on PATH): every process's and thread's Python stacks, "
                        "waits included, sampled 50 times a second, to DIR/profile-RUN.txt (py-spy's raw "
                        "folded stacks); the rates then carry py-spy's cost, and a run's exit status is py-spy's, so a "
                        "trainer that fails shows as its missing or short metrics")
    args = p.parse_args(argv)
    if args.epochs < 2:
        p.error(f"--epochs must be at least 2 (the first is warm-up), got {args.epochs}")
    if args.out:
        try:  # before minutes of GPU time, not after them
            paths.output_file(args.out)
        except paths.PathProblem as problem:
            p.error(f"--out: {problem}")
    if args.profile:
        if not shutil.which("py-spy"):
            p.error("--profile: py-spy is not on PATH (pip install py-spy)")
        try:
            paths.output_file(str(Path(args.profile) / "profile-check.txt"))
        except paths.PathProblem as problem:
            p.error(f"--profile: {problem}")
    return args


def profiler(directory: str | None, run: Run) -> tuple[str, ...]:
    """The command that runs a trainer under py-spy for --profile (none without it)."""
    if not directory:
        return ()
    Path(directory).mkdir(parents=True, exist_ok=True)
    return ("py-spy", "record", "--subprocesses", "--threads", "--idle", "--rate", "50", "--format", "raw",
            "--output", str(Path(directory) / f"profile-{run.file_name}.txt"), "--")


def main(argv=None) -> int:
    args = parse_args(argv)
    budget_start = time.monotonic()
    cuda = torch.cuda.is_available() and not args.dry_run
    if not cuda and not args.dry_run:
        print("error: no CUDA device here; pass --dry-run to check the script on the CPU", file=sys.stderr)
        return 2
    # With its index: nvImageCodec is told the device by number (trainer.vision passes cuda:LOCAL_RANK).
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    batch, size, steps, warmup = (256, 224, args.steps, 5) if cuda else (2, 64, 2, 1)
    workers = args.workers if cuda else 1
    loader_images = args.loader_images if cuda else 32
    # The trainer runs' shape; on the CPU ResNet-18 at 32 pixels, which checks the same code in seconds.
    model, run_batch, run_size, log_every = ("resnet50", 256, 224, 8) if cuda else ("resnet18", 4, 32, 1)
    epoch_images, val_images, classes = (args.epoch_images, 256, 8) if cuda else (8, 2, 2)
    decode_batch, decode_images, unique = (256, args.decode_images, 512) if cuda else (4, 8, 8)
    epoch_images -= epoch_images % (run_batch * log_every)  # whole metrics windows per epoch
    if epoch_images == 0:
        print(f"error: --epoch-images must be at least {run_batch * log_every} (batch {run_batch} x "
              f"{log_every} steps per metrics window)", file=sys.stderr)
        return 2

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu-vision-") as tmp:
        root = Path(tmp)
        # The JPEGs first: the pool forks before torch has started any threads.
        processes = min(16, os.cpu_count() or 1)
        train = write_jpegs(root, 512 if cuda else 16, processes=processes)
        like = write_jpegs(root, unique, sizes=imagenet_sizes(unique), encoding=IMAGENET_ENCODING, processes=processes,
                           split="imagenet-like")
        sources = sorted(like.rglob("*.jpg"))
        subsampled = write_jpegs(root, unique, sizes=imagenet_sizes(unique), encoding=(90, 2, IMAGENET_ENCODING[2]),
                                 processes=processes, split="imagenet-like-420")
        kinds = file_kinds(sources, sorted(subsampled.rglob("*.jpg")))
        data = linked_folder(kinds[args.trainer_files], root / "linked", train=epoch_images, val=val_images,
                             classes=classes)
        mean_kb = sum(f.stat().st_size for f in sources) / len(sources) / 1e3

        # Four digits, the same in every ratio and in the JSON (a dry run's rate is a few images/s).
        gpu = float(f"{gpu_rate(device, batch=batch, size=size, steps=steps, warmup=warmup):.4g}")
        print(f"GPU: ResNet-50 trains at {gpu:,.0f} images/s (batch {batch}, {size}x{size}, bf16, channels_last)",
              flush=True)
        loader = loader_rate(train, path=args.loader_path, workers=workers, images=loader_images, image_size=size,
                             batch_size=64 if cuda else 4, device=device)
        print(f"Loader: {loader:,.0f} images/s with {workers} workers ({loader / workers:,.0f} per worker), "
              f"{args.loader_path} path, 500x375 JPEGs", flush=True)

        decode_only = decode_only_rates(kinds, device, gpu,
                                        size=size, batch=decode_batch, images=decode_images, threads=workers,
                                        mean_kb=mean_kb, rounds=args.decode_rounds)
        if cuda:  # the trainer processes get the GPU's memory; this process keeps only its context
            gc.collect()  # the decoders' device buffers go with their objects
            torch.cuda.empty_cache()

        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
                   PYTHONUNBUFFERED="1")
        if not cuda:
            env["CUDA_VISIBLE_DEVICES"] = ""  # a dry run stays on the CPU even on a GPU machine
        budget = Budget(args.budget_s, first_estimate_s=45.0 if cuda else 5.0, start=budget_start)
        print(f"Trainer: python -m trainer.vision --model {model}, batch {run_batch} at {run_size}, {workers} "
              f"workers, {args.epochs} epochs of {epoch_images:,} images (hard links to {len(kinds[args.trainer_files])} "
              f"ImageNet-like JPEGs, {FILE_KINDS[args.trainer_files]}), rates over the epochs after the first:", flush=True)
        runs = []
        for run in args.decoders:
            why = run_unavailable(run, str(data), cuda) or budget.why_not()
            if why:
                result = RunResult(run.name, run.decode, run.hw_decoder_load, why=why)
            else:
                result = trainer_run(run, data, root, model=model, batch=run_batch, size=run_size, workers=workers,
                                     epochs=args.epochs, log_every=log_every, gpu_rate=gpu, budget=budget, env=env,
                                     prefix=profiler(args.profile, run))
            print(describe(result), flush=True)
            if result.decoder_line:
                print(f"  {'':<14} {result.decoder_line}", flush=True)
            runs.append(result)

    result = {"device": torch.cuda.get_device_name(device) if cuda else "cpu (dry run)",
              "torch": torch.__version__, "torchvision": import_torchvision().__version__,
              "cpus": os.cpu_count(), "dry_run": args.dry_run,
              "gpu_images_per_s": gpu, "batch": batch, "image_size": size, "steps": steps,
              "loader_images_per_s": round(loader, 1), "loader_path": args.loader_path, "loader_workers": workers,
              "loader_images_per_s_per_worker": round(loader / workers, 1),
              "loader_over_gpu": round(loader / gpu, 3),
              "jpegs": {"unique": unique, "mean_kb": round(mean_kb, 1), "sizes": "IMAGENET_SIZES",
                        "encoding": "q96 4:4:4 (IMAGENET_ENCODING)"},
              "decode_only": decode_only,
              "decoders": [run.name for run in args.decoders],
              "trainer": {"model": model, "batch": run_batch, "image_size": run_size, "workers": workers,
                          "epochs": args.epochs, "epoch_images": epoch_images, "val_images": val_images,
                          "classes": classes, "log_every": log_every, "files": args.trainer_files,
                          "runs": [asdict(r) for r in runs]},
              "budget_s": args.budget_s, "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(result))
    if args.out:
        write_json(Path(args.out), result)
    failed = [r.run for r in runs if r.status == "failed"] + [d["run"] for d in decode_only["runs"] if d.get("failed")]
    return 1 if failed else 0


# The JPEGs a measurement reads, by name: the ImageNet-like files (q96 4:4:4, IMAGENET_ENCODING),
# their 4:2:0 copy (q90, what `trainer.data imagenet --reencode` writes), or the two alternating, as
# raw ImageNet mixes both kinds. On a GPU DALI's per-file graph sends the mix down both of its
# branches, the hardware decoder taking whole images and CUDA the boxes (diagnostic H in
# bench/RESULTS.md, 2026-11-27: the fastest graph alone there). Only a trainer run shows what each
# graph costs the training kernels beside it: on the mixed set the whole-image graph's loader kept
# up and its steps still ran slowest (run L and diagnostic M, 2026-11-27, evening).
FILE_KINDS = {"4:4:4": "q96 4:4:4", "4:2:0": "q90 4:2:0", "mixed": "q96 4:4:4 and q90 4:2:0 alternating"}


def file_kinds(full: list[Path], subsampled: list[Path]) -> dict[str, list[Path]]:
    """The JPEGs of each of FILE_KINDS."""
    return {"4:4:4": full, "4:2:0": subsampled,
            "mixed": [f for pair in zip(full, subsampled) for f in pair]}


@dataclass(frozen=True)
class DecodeCase:
    """One decode-only measurement: `run`'s decoder (for DALI with its --dali-regions) over the
    `files` of FILE_KINDS."""
    run: Run
    files: str = "4:4:4"

    @property
    def name(self) -> str:
        return self.run.name + ("" if self.files == "4:4:4" else f" {self.files}")


DECODE_ONLY = (DecodeCase(Run("nvimgcodec", 0.9)), DecodeCase(Run("nvimgcodec", 0.0)),
               *(DecodeCase(Run("dali", 0.9, regions), files)
                 for files in FILE_KINDS for regions in (None, "none", "all")))
OWN_CALL = {"nvimgcodec": "nvImageCodec's decode call", "dali": "DALI's run"}


def decode_only_rates(sources: dict[str, list[Path]], device: torch.device, gpu: float, *, size: int, batch: int,
                      images: int, threads: int, mean_kb: float, rounds: int = 1) -> dict:
    """decode_rate for each of DECODE_ONLY, `rounds` times (the whole list, then again), printed;
    `sources`: the JPEGs of each of FILE_KINDS. A row's rates are the medians of its
    rounds, `spread` its fastest round over its slowest. A decoder that cannot run here is reported
    with the reason (a missing package or library), the rest of the script goes on."""
    from trainer.cli import UsageError

    samples = {kind: [(str(f), 0) for f in files] for kind, files in sources.items()}
    out = {"batch": batch, "images": images, "image_size": size, "rounds": rounds, "runs": []}
    print(f"Decode only: trainer.vision's GPU decoders (the crop box decoded, resized to {size}, flipped, "
          f"normalised; no model), {batch}-image batches of ImageNet-like JPEGs ({mean_kb:.0f} KB mean), "
          f"{rounds} round(s) of the list:", flush=True)
    measured: dict[DecodeCase, list[dict]] = {case: [] for case in DECODE_ONLY}
    why: dict[DecodeCase, dict] = {}
    for _ in range(rounds):
        for case in DECODE_ONLY:
            if case in why:
                continue
            decoder = case.run
            unavailable = run_unavailable(decoder, "files", device.type == "cuda")
            if unavailable:
                why[case] = {"why": f"{unavailable} (bench/gpu_checks.sh names the wheels)"}
                continue
            try:
                measured[case].append(decode_rate(samples[case.files], device, decoder, size=size, batch=batch,
                                                  images=images, threads=threads))
            except UsageError as refusal:  # the probe: no nvJPEG library for the GPU
                why[case] = {"why": str(refusal), "failed": True}
            except Exception as err:  # noqa: BLE001 (the trainer runs still tell what they can)
                why[case] = {"why": f"{type(err).__name__}: {err}"[:300], "failed": True}
    for case in DECODE_ONLY:
        run = {"run": case.name, "hw_decoder_load": case.run.hw_decoder_load}
        if case in why:
            run.update(why[case])
            print(f"  {case.name}: not measured: {run['why']}", flush=True)
        else:
            run.update(row_of(measured[case], gpu))
            print(f"  {case.name}: {run['images_per_s']:,.0f} images/s, x{run['over_gpu']:.3f} of the GPU's "
                  f"training rate{spread_words(run)} ({run['decoder_line']}); the host alone "
                  f"{run['host_images_per_s']:,.0f} images/s, {run['decode_call_share']:.0%} of it in "
                  f"{OWN_CALL[case.run.decode]}; the slowest micro-batch {run['slowest_batch_ms']:,.0f} ms against "
                  f"a median of {run['median_batch_ms']:,.0f} ms", flush=True)
        out["runs"].append(run)
    return out


def row_of(rounds: list[dict], gpu: float) -> dict:
    """One decode-only row from its rounds' decode_rate results: each figure the median of the
    rounds (the slowest micro-batch the slowest of any), each round's rate, the spread."""
    rates = [r["images_per_s"] for r in rounds]
    # The batch times keep decode_rate's two decimals: at one, a median of 39.99 ms read 40.0, above
    # the slowest micro-batch's 39.99.
    places = {"decode_call_share": 3, "median_batch_ms": 2}
    row = {key: round(statistics.median(r[key] for r in rounds), places.get(key, 1))
           for key in ("images_per_s", "host_images_per_s", "decode_call_share", "median_batch_ms")}
    row.update(slowest_batch_ms=max(r["slowest_batch_ms"] for r in rounds), decoder_line=rounds[-1]["decoder_line"],
               rounds_images_per_s=rates, spread=round(max(rates) / min(rates), 3),
               over_gpu=round(statistics.median(rates) / gpu, 3))
    return row


def spread_words(row: dict) -> str:
    """The rounds' rates where there are several: ' (rounds 5,024 and 9,772: 1.95x apart)'."""
    rates = row["rounds_images_per_s"]
    if len(rates) < 2:
        return ""
    listed = ", ".join(f"{rate:,.0f}" for rate in rates[:-1]) + f" and {rates[-1]:,.0f}"
    return f" (rounds {listed}: {row['spread']:.2f}x apart)"


if __name__ == "__main__":
    raise SystemExit(main())
