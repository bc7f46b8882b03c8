"""trainer.plot: a vision run's curves and the scaling table of runs at two sizes. Hostile input:
a metrics file that is binary, a folder or of the wrong shape, and an output that is a folder,
below a file or of an unknown format, are one line and exit 2; an image appears whole under the
name given or not at all."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trainer import plot as tplot
from trainer.cli import run_main
from trainer.plot import main
from trainer_procs import REPO, job_env


def run_plot(argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_:
        run_main(lambda: main(argv))
    return exit_.value.code, capsys.readouterr().err


@pytest.fixture
def metrics(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "loss": 5.0 / s, "tokens_per_sec": 100.0}) + "\n"
                            for s in range(1, 4)))
    return path


@pytest.mark.parametrize("kind, message", [
    ("binary", "is not UTF-8 text"),
    ("folder", "is a directory, expected a file"),
    ("list-lines", ":1 is not a metrics line"),
    ("unhashable-kind", ":1 is not a metrics line"),
])
def test_a_metrics_file_of_the_wrong_kind_is_one_line(tmp_path, capsys, kind, message):
    path = tmp_path / "m"
    if kind == "binary":
        path.write_bytes(bytes(range(128, 256)))
    elif kind == "folder":
        path.mkdir()
    elif kind == "unhashable-kind":
        path.write_text('{"step": 1, "loss": 1.0, "kind": ["epoch"]}\n')
    else:
        path.write_text("[1, 2]\n")
    code, err = run_plot([str(path), "-o", str(tmp_path / "c.png")], capsys)
    assert code == 2 and err.startswith(f"error: METRICS: {path}") and message in err and err.count("\n") == 1, err


def test_a_metrics_file_longer_than_a_whole_file_read_is_plotted_line_by_line(tmp_path, capsys):
    from config.paths import TEXT_LIMIT_BYTES
    line = json.dumps({"step": 7, "loss": 2.5, "lr": 3e-4, "grad_norm": 1.25, "tokens_per_sec": 1234.5,
                       "mfu": 0.41, "peak_mem_gib": 60.1}) + "\n"
    path = tmp_path / "long.jsonl"
    path.write_text(line * (TEXT_LIMIT_BYTES // len(line) + 1000))  # a 100k-step run is larger still
    code, err = run_plot([str(path), "-o", str(tmp_path / "c.png")], capsys)
    assert (code, err) == (0, "")
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_the_metrics_of_a_run_still_writing_plot_without_its_unfinished_last_line(metrics, tmp_path, capsys):
    """A user plots a run while it trains: the trainer may be half-way through its newest line.
    That line is left out; a broken line that ends in a line break is still refused."""
    whole = metrics.read_text()
    metrics.write_text(whole + '{"step": 4, "loss": 1.')
    code, err = run_plot([str(metrics), "-o", str(tmp_path / "c.png")], capsys)
    assert (code, err) == (0, "")
    assert len(tplot.read_metrics(metrics)) == 3
    metrics.write_text(whole + '{"step": 4, "loss": 1.\n' + whole)
    code, err = run_plot([str(metrics), "-o", str(tmp_path / "d.png")], capsys)
    assert code == 2 and ":4 is not a metrics line" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("content, message", [
    (b'{"step": 1, "loss": 1.0}\n{"step": 2, "loss": "' + b"9" * (2 << 20) + b'"}\n', ":2 is longer than"),
    (b'{"step": 1, "loss": 1.0}\n\x7fELF\x02\x01\x01\0\0\0\n', ":2 holds binary data"),
])
def test_a_giant_line_or_binary_garbage_in_a_metrics_file_is_one_line(tmp_path, capsys, content, message):
    path = tmp_path / "m.jsonl"
    path.write_bytes(content)
    code, err = run_plot([str(path), "-o", str(tmp_path / "c.png")], capsys)
    assert code == 2 and err.startswith(f"error: METRICS: {path}") and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "c.png").exists()


def test_a_huge_metrics_file_without_line_breaks_is_refused_without_reading_it_whole(tmp_path, capsys):
    path = tmp_path / "m.jsonl"
    with path.open("wb") as f:
        f.write(b'{"step": 1, "loss": "' + b"9" * 4096)
        f.truncate(64 << 30)  # sparse: 64 GiB that no reader of the whole file gets through
    code, err = run_plot([str(path), "-o", str(tmp_path / "c.png")], capsys)
    assert code == 2 and err.startswith(f"error: METRICS: {path}:1 ") and err.count("\n") == 1, err


@pytest.mark.parametrize("output, message", [
    ("folder", "is a folder, expected an image file name"),
    ("below-a-file", "is a file, not a folder"),
    ("c.xyz", "'xyz' is not an image format matplotlib writes"),
])
def test_an_output_that_cannot_be_written_is_one_line_before_any_plotting(metrics, tmp_path, capsys, output, message):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    target = {"folder": tmp_path, "below-a-file": blocker / "c.png"}.get(output, tmp_path / output)
    code, err = run_plot([str(metrics), "-o", str(target)], capsys)
    assert code == 2 and err.startswith("error: --output: ") and message in err and err.count("\n") == 1, err


def test_the_image_is_written_under_the_name_given_and_nothing_else(metrics, tmp_path, capsys):
    code, _ = run_plot([str(metrics), "-o", str(tmp_path / "curves")], capsys)
    assert code == 0
    assert (tmp_path / "curves").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # png by default, no suffix added
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curves", "metrics.jsonl"]


def test_a_scaling_run_whose_epoch_lines_lack_numbers_is_one_line(tmp_path, capsys):
    run = tmp_path / "run.jsonl"
    run.write_text(json.dumps({"kind": "epoch", "step": 1, "loss": 1.0, "images_per_sec": "fast", "world_size": 2,
                               "epoch_time_s": 3.0}) + "\n")
    code, err = run_plot(["scaling", str(run), "-o", str(tmp_path / "s.png")], capsys)
    assert code == 2 and err == (f"error: RUN: {run}: epoch 1 lacks a numeric world_size, images_per_sec or "
                                 "epoch_time_s\n")


# --- a vision run's curves and the scaling table ------------------------------------------------

def _metrics_file(path, world_size, rates):
    lines = [{"kind": "step", "step": 5, "epoch": 0, "loss": 2.0, "lr": 0.1, "images_per_sec": rates[0],
              "data_wait_ms": 3.0, "world_size": world_size}]
    for epoch, rate in enumerate(rates):
        lines.append({"kind": "epoch", "step": 10 * (epoch + 1), "epoch": epoch, "loss": 1.0, "epoch_time_s": 100 / rate,
                      "images_per_sec": rate, "world_size": world_size, "top1": 0.5, "top5": 0.9})
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def test_the_scaling_table_measures_efficiency_against_linear_from_the_smallest_run(tmp_path):
    one = _metrics_file(tmp_path / "one.jsonl", 1, [50.0, 100.0, 100.0])  # the first epoch is warm-up
    two = _metrics_file(tmp_path / "two.jsonl", 2, [90.0, 150.0, 150.0])
    table = tplot.scaling_table([tplot.run_point(two), tplot.run_point(one)])
    assert [(r["devices"], r["images_per_sec"]) for r in table] == [(1, 100.0), (2, 150.0)]
    assert table[1]["ideal_images_per_sec"] == 200.0 and table[1]["efficiency"] == pytest.approx(0.75)
    out = tmp_path / "scaling.png"
    p = subprocess.run([sys.executable, "-m", "trainer.plot", "scaling", str(one), str(two), "-o", str(out)],
                       cwd=REPO, env=job_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "  2 devices |     150.0 images/s" in p.stdout and "efficiency 75%" in p.stdout
    assert out.stat().st_size > 10_000


def test_scaling_refuses_runs_without_epoch_lines_in_one_line(tmp_path):
    bad = tmp_path / "llm.jsonl"
    bad.write_text(json.dumps({"step": 1, "loss": 2.0}) + "\n")
    p = subprocess.run([sys.executable, "-m", "trainer.plot", "scaling", str(bad)], cwd=REPO, env=job_env(),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "RUN" in p.stderr, p.stderr


def test_the_curves_of_a_vision_run_include_accuracy(tmp_path):
    records = tplot.read_metrics(_metrics_file(tmp_path / "m.jsonl", 2, [90.0, 150.0]))
    assert [r.get("kind") for r in records] == ["step", "epoch", "epoch"]
    tplot.plot(records, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 10_000
