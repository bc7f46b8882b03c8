"""Curves from a metrics file, and the scaling figure from several runs' metrics files.

    python -m trainer.plot METRICS.jsonl -o curves.png
    python -m trainer.plot scaling RUN... -o scaling.png

A RUN is a metrics file of trainer.vision (or the folder holding metrics.jsonl). The scaling
figure puts throughput and scaling efficiency against the number of devices, with the ideal line.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

from config.paths import PathProblem, file_status, is_dir, read_lines
from trainer.cli import Parser, UsageError, checked_path, create_folder, run_main, write_whole


# What the curves and the scaling figure read of a record; the rest of a line is not kept, so a
# long run's file costs memory by its number of points only.
PLOTTED = ("step", "kind", "loss", "tokens_per_sec", "mfu", "images_per_sec", "data_wait_ms", "epoch", "top1", "top5",
           "world_size", "epoch_time_s")


def read_metrics(path: Path, field: str = "METRICS") -> list[dict]:
    """The records of a metrics file, read line by line: a run of any length plots."""
    latest = {}
    try:
        for number, line in read_lines(path):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                # A loss of null: every step of that window was skipped as non-finite (trainer.metrics).
                int(record["step"]), record["loss"] is None or float(record["loss"])
                # A resumed run appends to the same file: keep the latest record of each (kind, step).
                latest[record.get("kind", "step"), record["step"]] = {k: record[k] for k in PLOTTED if k in record}
            except (ValueError, KeyError, TypeError) as exc:
                if not line.endswith("\n"):
                    continue  # the last line of a run still writing: the rest of it is on its way
                raise UsageError(field, f"{path}:{number} is not a metrics line ({exc})") from None
    except PathProblem as problem:
        raise UsageError(field, str(problem)) from None
    if not latest:
        raise UsageError(field, f"{path} holds no metrics lines")
    return sorted(latest.values(), key=lambda r: (r["step"], r.get("kind", "step")))


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")  # no display in pods or CI
    import matplotlib.pyplot as plt
    return plt


def check_output(output: Path) -> str:
    """The image format `output` names (png without a suffix), its folder created; before any
    plotting, so a bad -o is one line."""
    fmt = output.suffix[1:].lower() or "png"
    from matplotlib.backend_bases import FigureCanvasBase
    if fmt not in FigureCanvasBase.get_supported_filetypes():
        raise UsageError("--output", f"{output}: {fmt!r} is not an image format matplotlib writes (png, svg, pdf)")
    if checked_path("--output", is_dir, output):
        raise UsageError("--output", f"{output} is a folder, expected an image file name")
    checked_path("--output", file_status, output)  # the image is renamed onto it: a pipe or device would go
    create_folder(output.parent, "--output")
    return fmt


def _save(fig, output: Path) -> None:
    """Written under a temporary name and renamed: a reader never sees half an image."""
    fig.tight_layout()
    fmt = check_output(output)
    try:
        write_whole(output, lambda f: fig.savefig(f, dpi=100, format=fmt))
    except OSError as exc:
        raise UsageError("--output", f"cannot write {output}: {exc.strerror or exc}") from None


def plot(records: list[dict], output: Path) -> None:
    plt = _pyplot()
    steps_only = [r for r in records if r.get("kind", "step") == "step"] or records
    epochs = [r for r in records if r.get("kind") == "epoch"]
    vision = any("images_per_sec" in r for r in records)
    rate_key, rate_label = ("images_per_sec", "images/s (all ranks)") if vision else \
        ("tokens_per_sec", "tokens/s (all devices)")
    fig, axes = plt.subplots(1, 3 if epochs else 2, figsize=(16 if epochs else 11, 4))
    ax_loss, ax_rate = axes[0], axes[1]
    steps = [r["step"] for r in steps_only]
    ax_loss.plot(steps, [math.nan if r["loss"] is None else r["loss"] for r in steps_only], marker=".")
    ax_loss.set(xlabel="step", ylabel="loss", title="training loss")
    ax_rate.plot(steps, [r.get(rate_key) or 0 for r in steps_only], marker=".", color="tab:green")
    ax_rate.set(xlabel="step", ylabel=rate_label, title="throughput")
    twin_key, twin_label = ("data_wait_ms", "data-loader wait, ms/step") if vision else ("mfu", "MFU %")
    twin_values = [r.get(twin_key) for r in steps_only]
    if any(v is not None for v in twin_values):
        scale = 1 if vision else 100
        twin = ax_rate.twinx()
        twin.plot(steps, [scale * v if v is not None else float("nan") for v in twin_values], color="tab:orange",
                  ls="--")
        twin.set_ylabel(twin_label, color="tab:orange")
    if epochs:
        ax_acc = axes[2]
        numbers = [r["epoch"] for r in epochs]
        ax_acc.plot(numbers, [100 * r["top1"] for r in epochs], marker="o", label="top-1")
        ax_acc.plot(numbers, [100 * r["top5"] for r in epochs], marker="o", label="top-5")
        ax_acc.set(xlabel="epoch", ylabel="validation accuracy %", title="accuracy", ylim=(0, 100))
        ax_acc.xaxis.get_major_locator().set_params(integer=True)
        ax_acc.legend()
    for ax in axes:
        ax.grid(alpha=0.3)
    _save(fig, output)
    plt.close(fig)


# --- scaling ------------------------------------------------------------------------------------

def run_point(path: Path) -> dict:
    """One run's place on the scaling figure: its world size and median epoch throughput. The
    first epoch is left out when there are others (start-up, data-loader warm-up)."""
    metrics = path / "metrics.jsonl" if checked_path("RUN", is_dir, path) else path
    epochs = [r for r in read_metrics(metrics, "RUN") if r.get("kind") == "epoch" and r.get("images_per_sec")]
    if not epochs:
        raise UsageError("RUN", f"{metrics} holds no epoch lines of trainer.vision")
    for r in epochs:
        if not (isinstance(r.get("world_size"), int) and r["world_size"] > 0
                and all(isinstance(r.get(k), (int, float)) for k in ("images_per_sec", "epoch_time_s"))):
            raise UsageError("RUN", f"{metrics}: epoch {r.get('step')} lacks a numeric world_size, images_per_sec "
                                    "or epoch_time_s")
    sizes = {r["world_size"] for r in epochs}
    if len(sizes) != 1:
        raise UsageError("RUN", f"{metrics} mixes world sizes {sorted(sizes)}; give one run per size")
    steady = epochs[1:] or epochs
    return {"run": str(path), "devices": sizes.pop(),
            "images_per_sec": statistics.median(r["images_per_sec"] for r in steady),
            "epoch_time_s": statistics.median(r["epoch_time_s"] for r in steady)}


def scaling_table(points: list[dict]) -> list[dict]:
    """Each point with its ideal throughput (linear from the smallest run) and its efficiency."""
    points = sorted(points, key=lambda p: p["devices"])
    base = points[0]
    per_device = base["images_per_sec"] / base["devices"]
    return [dict(p, ideal_images_per_sec=per_device * p["devices"],
                 efficiency=p["images_per_sec"] / (per_device * p["devices"])) for p in points]


def plot_scaling(table: list[dict], output: Path) -> None:
    plt = _pyplot()
    devices = [p["devices"] for p in table]
    fig, (ax_rate, ax_eff) = plt.subplots(1, 2, figsize=(11, 4))
    ax_rate.plot(devices, [p["images_per_sec"] for p in table], marker="o", label="measured")
    ax_rate.plot(devices, [p["ideal_images_per_sec"] for p in table], ls="--", color="gray", label="ideal (linear)")
    ax_rate.set(xlabel="devices (GPUs or CPU processes)", ylabel="images/s", title="throughput")
    ax_eff.plot(devices, [100 * p["efficiency"] for p in table], marker="o", color="tab:green", label="measured")
    ax_eff.axhline(100, ls="--", color="gray", label="ideal")
    ax_eff.set(xlabel="devices (GPUs or CPU processes)", ylabel="scaling efficiency %", title="scaling efficiency",
               ylim=(0, 110))
    for ax in (ax_rate, ax_eff):
        ax.set_xticks(devices)
        ax.grid(alpha=0.3)
        ax.legend()
    _save(fig, output)
    plt.close(fig)


def scaling_main(argv) -> int:
    p = Parser(prog="python -m trainer.plot scaling", description="throughput and scaling efficiency of several runs")
    p.add_argument("runs", metavar="RUN", nargs="+", help="metrics file of a trainer.vision run (or its folder)")
    p.add_argument("-o", "--output", default="scaling.png", help="image to write")
    args = p.parse_args(argv)
    check_output(Path(args.output))
    table = scaling_table([run_point(Path(r)) for r in args.runs])
    if len({row["devices"] for row in table}) != len(table):
        raise UsageError("RUN", "two runs have the same number of devices; give one run per size")
    plot_scaling(table, Path(args.output))
    for row in table:
        print(f"{row['devices']:>3} devices | {row['images_per_sec']:>9,.1f} images/s | epoch {row['epoch_time_s']:.1f} s "
              f"| efficiency {100 * row['efficiency']:.0f}%")
    print(f"wrote {args.output} ({len(table)} runs)")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["scaling"]:
        return scaling_main(argv[1:])
    p = Parser(prog="python -m trainer.plot", description="loss and throughput curves from a metrics file "
                                                          "(`scaling RUN...`: the scaling figure)")
    p.add_argument("metrics", metavar="METRICS", nargs="?", default="metrics.jsonl", help="JSON-lines metrics file")
    p.add_argument("-o", "--output", default="curves.png", help="image to write")
    args = p.parse_args(argv)
    check_output(Path(args.output))
    records = read_metrics(Path(args.metrics))
    plot(records, Path(args.output))
    print(f"wrote {args.output} ({len(records)} points)")
    return 0


if __name__ == "__main__":
    run_main(main)
