"""bench/gpu_vision.py's end-to-end part: `python -m trainer.vision` runs, one per decoder, on a
generated ImageFolder, each read back from its own --metrics-file, under one time budget.

The folder: a few hundred ImageNet-like JPEGs (bench/vision_loader.py's IMAGENET_SIZES and
IMAGENET_ENCODING) hard-linked under as many names as an epoch needs. Decode cost is per file read,
so a name that links to a file already read costs what a new file would (the page cache holds them
all either way); writing thousands of camera-sized JPEGs would cost the budget minutes instead.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from config.workloads.vision import DALI_REGIONS, DECODERS  # noqa: E402
from ops import proc  # noqa: E402

# Most telling first, so that a tight budget drops the least: DALI (no Python per image), the
# nvImageCodec decoder measured before it, the CPU loader they would replace, nvImageCodec without
# its hardware engine, nvJPEG on the SMs.
DEFAULT_RUNS = "dali,nvimgcodec,cpu,nvimgcodec:0,nvjpeg"
WITH_LOAD = ("nvimgcodec", "dali")  # the decoders that take --hw-decoder-load


@dataclass(frozen=True)
class Run:
    """One trainer run's decoder: trainer.vision --decode, for nvimgcodec and dali --hw-decoder-load,
    and for dali --dali-regions where it is not the trainer's default (per-file)."""
    decode: str
    hw_decoder_load: float | None = None
    dali_regions: str | None = None

    @property
    def name(self) -> str:
        if self.hw_decoder_load is None:
            return self.decode
        regions = f":{self.dali_regions}" if self.dali_regions else ""
        return f"{self.decode}:{self.hw_decoder_load:g}{regions}"

    @property
    def file_name(self) -> str:
        """The name in a file's name (no ':')."""
        return self.name.replace(":", "-")

    def argv(self) -> list[str]:
        load = [] if self.hw_decoder_load is None else ["--hw-decoder-load", str(self.hw_decoder_load)]
        regions = ["--dali-regions", self.dali_regions] if self.dali_regions else []
        return ["--decode", self.decode, *load, *regions]


def parse_runs(text: str) -> list[Run]:
    """`--decoders`: comma-separated trainer.vision --decode values; nvimgcodec:LOAD and dali:LOAD set
    their --hw-decoder-load (the name alone: 0.9, the trainer's default), dali:LOAD:REGIONS its
    --dali-regions as well. ValueError says what is allowed."""
    runs = []
    for item in (part.strip() for part in text.split(",")):
        decode, _, load = item.partition(":")
        load, _, regions = load.partition(":")
        if decode not in DECODERS:
            raise ValueError(f"{item!r} is not one of {', '.join(DECODERS)} (nvimgcodec:LOAD or dali:LOAD for a "
                             "--hw-decoder-load between 0 and 1)")
        if decode not in WITH_LOAD and load:
            raise ValueError(f"{item!r}: only nvimgcodec and dali take a :LOAD (their --hw-decoder-load)")
        if regions and (decode != "dali" or regions not in DALI_REGIONS):
            raise ValueError(f"{item!r}: only dali takes a third part, its --dali-regions: one of "
                             f"{', '.join(DALI_REGIONS)}")
        try:
            value = float(load) if load else (0.9 if decode in WITH_LOAD else None)
        except ValueError:
            value = -1.0
        if value is not None and not 0 <= value <= 1:
            raise ValueError(f"{item!r}: the load after ':' is a fraction between 0 and 1")
        run = Run(decode, value, None if regions in ("", DALI_REGIONS[0]) else regions)
        if run in runs:
            raise ValueError(f"{item!r} is named twice")
        runs.append(run)
    return runs


def linked_folder(sources: list[Path], root: Path, *, train: int, val: int, classes: int) -> Path:
    """An ImageFolder under root (train/ and val/, `classes` folders each) whose `train` and `val`
    images are hard links to `sources`, cycled; each class folder gets at least one image."""
    if val < classes or train < classes:
        raise ValueError(f"{classes} classes need at least as many train and val images")
    for split, count in (("train", train), ("val", val)):
        for c in range(classes):
            (root / split / f"c{c:03d}").mkdir(parents=True, exist_ok=True)
        for i in range(count):
            os.link(sources[i % len(sources)], root / split / f"c{i % classes:03d}" / f"{i}.jpg")
    return root


class Budget:
    """The wall-clock bound of the whole script: a trainer run starts only where the time left
    holds one run of the longest seen so far (`first_estimate_s` before any), and it may run for
    the time left, never longer."""

    def __init__(self, seconds: float, first_estimate_s: float, start: float | None = None):
        self.seconds, self.estimate_s = seconds, first_estimate_s
        self.start = time.monotonic() if start is None else start

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.start)

    def why_not(self) -> str | None:
        """None where a run fits; else the reason it is skipped, in one line."""
        left = self.left()
        if left >= self.estimate_s:
            return None
        return (f"{max(left, 0):.0f} s of the --budget-s {self.seconds:.0f} left, and a trainer run takes about "
                f"{self.estimate_s:.0f} s")

    def took(self, seconds: float) -> None:
        self.estimate_s = max(self.estimate_s, seconds)


@dataclass
class RunResult:
    """A trainer run as measured, or why not: images_per_s and data_wait_fraction over the epochs
    after the first (their images over their summed epoch_time_s; the wait likewise), and
    steady_images_per_s, the median over those epochs' metrics windows less each epoch's first
    (what a long epoch approaches: the loader's refill after each evaluation left out)."""
    run: str
    decode: str
    hw_decoder_load: float | None
    status: str = "skipped"  # measured, skipped, failed
    why: str | None = None
    images_per_s: float | None = None
    over_gpu: float | None = None
    data_wait_fraction: float | None = None
    steady_images_per_s: float | None = None
    steady_over_gpu: float | None = None
    measured_epochs: int = 0
    decoder_line: str | None = None  # where trainer.vision says nvImageCodec or DALI decodes
    seconds: float | None = None
    epochs: list = field(default_factory=list)


def summarize(records: list[dict]) -> dict:
    """The figures of RunResult from a trainer.vision metrics file's records; {} without an epoch
    after the first."""
    epochs = [r for r in records if r["kind"] == "epoch" and r["epoch"] >= 1 and r.get("epoch_time_s")]
    if not epochs:
        return {}
    seconds = sum(r["epoch_time_s"] for r in epochs)
    images = sum(r["images_per_sec"] * r["epoch_time_s"] for r in epochs)
    wait = sum(r["data_wait_fraction"] * r["epoch_time_s"] for r in epochs)
    out = {"images_per_s": round(images / seconds, 1), "data_wait_fraction": round(wait / seconds, 4),
           "measured_epochs": len(epochs)}
    first_step = {}
    for r in records:
        if r["kind"] == "step":
            first_step.setdefault(r["epoch"], r["step"])
    windows = [r["images_per_sec"] for r in records if r["kind"] == "step" and r["epoch"] >= 1
               and r["step"] != first_step[r["epoch"]] and r["images_per_sec"] > 0]
    if windows:
        out["steady_images_per_s"] = round(statistics.median(windows), 1)
    return out


def trainer_run(run: Run, data: Path, workdir: Path, *, model: str, batch: int, size: int, workers: int,
                epochs: int, log_every: int, gpu_rate: float, budget: Budget, env: dict,
                prefix: tuple[str, ...] = ()) -> RunResult:
    """One `python -m trainer.vision` run in its own process group, killed at the budget's end.
    `prefix` goes before the interpreter: a profiler that runs it (bench/gpu_vision.py --profile)."""
    result = RunResult(run.name, run.decode, run.hw_decoder_load)
    metrics = workdir / f"metrics-{run.file_name}.jsonl"
    argv = [*prefix, sys.executable, "-m", "trainer.vision", "--model", model, "--data", str(data), "--image-size", str(size),
            "--batch-size", str(batch), "--workers", str(workers), "--epochs", str(epochs),
            "--log-every", str(log_every), "--metrics-file", str(metrics), *run.argv()]
    timeout = max(budget.left(), 1.0)
    t0 = time.monotonic()
    try:
        p = proc.run(argv, cwd=REPO, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        result.status, result.seconds = "failed", round(timeout, 1)
        result.why = f"did not finish within {timeout:.0f} s (the budget left)"
        return result
    result.seconds = round(time.monotonic() - t0, 1)
    budget.took(result.seconds)
    records = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    figures = summarize(records)
    result.decoder_line = next((line for line in p.stdout.splitlines()
                                if line.startswith(("nvImageCodec decodes", "DALI decodes"))), None)
    if p.returncode != 0 or not figures:
        tail = (p.stderr.strip() or p.stdout.strip()).splitlines()[-1:] or ["no output"]
        result.status, result.why = "failed", f"exit {p.returncode}: {tail[0][:300]}"
        print("\n".join(f"    | {line}" for line in p.stderr.strip().splitlines()[-12:]), flush=True)
        return result
    result.status = "measured"
    result.epochs = [{k: r[k] for k in ("epoch", "epoch_time_s", "images_per_sec", "data_wait_fraction", "steps")}
                     for r in records if r["kind"] == "epoch"]
    for key, value in figures.items():
        setattr(result, key, value)
    result.over_gpu = round(result.images_per_s / gpu_rate, 3)
    if result.steady_images_per_s:
        result.steady_over_gpu = round(result.steady_images_per_s / gpu_rate, 3)
    return result


def describe(r: RunResult) -> str:
    """One line of the run for the log."""
    if r.status != "measured":
        return f"  {r.run:<14} {r.status}: {r.why}"
    line = (f"  {r.run:<14} {r.images_per_s:>8,.0f} images/s  x{r.over_gpu:.3f} of the GPU's rate  "
            f"data wait {100 * r.data_wait_fraction:.1f}%")
    if r.steady_images_per_s:
        line += f"  (steady {r.steady_images_per_s:,.0f}, x{r.steady_over_gpu:.3f})"
    return line + f"  [{r.seconds:.0f} s]"
