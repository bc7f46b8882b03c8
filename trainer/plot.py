"""Loss and throughput curves from a metrics file: `python -m trainer.plot METRICS.jsonl -o curves.png`."""

from __future__ import annotations

import json
from pathlib import Path

from trainer.cli import Parser, UsageError, run_main


def read_metrics(path: Path) -> list[dict]:
    if not path.is_file():
        raise UsageError("METRICS", f"{path} does not exist")
    records = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            int(record["step"]), float(record["loss"])
        except (ValueError, KeyError, TypeError) as exc:
            raise UsageError("METRICS", f"{path}:{number} is not a metrics line ({exc})") from None
        records.append(record)
    if not records:
        raise UsageError("METRICS", f"{path} holds no metrics lines")
    # A resumed run appends to the same file: keep the latest record of each step.
    return sorted({r["step"]: r for r in records}.values(), key=lambda r: r["step"])


def plot(records: list[dict], output: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")  # no display in pods or CI
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in records]
    fig, (ax_loss, ax_tps) = plt.subplots(1, 2, figsize=(11, 4))
    ax_loss.plot(steps, [r["loss"] for r in records], marker=".")
    ax_loss.set(xlabel="step", ylabel="loss", title="training loss")
    ax_tps.plot(steps, [r.get("tokens_per_sec") or 0 for r in records], marker=".", color="tab:green")
    ax_tps.set(xlabel="step", ylabel="tokens/s (all devices)", title="throughput")
    mfu = [r.get("mfu") for r in records]
    if any(m is not None for m in mfu):
        twin = ax_tps.twinx()
        twin.plot(steps, [100 * m if m is not None else float("nan") for m in mfu], color="tab:orange", ls="--")
        twin.set_ylabel("MFU %", color="tab:orange")
    for ax in (ax_loss, ax_tps):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    p = Parser(prog="python -m trainer.plot", description=__doc__.split(":")[0])
    p.add_argument("metrics", metavar="METRICS", nargs="?", default="metrics.jsonl", help="JSON-lines metrics file")
    p.add_argument("-o", "--output", default="curves.png", help="image to write")
    args = p.parse_args(argv)
    records = read_metrics(Path(args.metrics))
    plot(records, Path(args.output))
    print(f"wrote {args.output} ({len(records)} points)")
    return 0


if __name__ == "__main__":
    run_main(main)
