"""trainer.plot with hostile input: a metrics file that is binary, a folder or of the wrong shape,
and an output that is a folder, below a file or of an unknown format, are one line and exit 2;
an image appears whole under the name given or not at all."""

from __future__ import annotations

import json

import pytest

from trainer.cli import run_main
from trainer.plot import main


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
])
def test_a_metrics_file_of_the_wrong_kind_is_one_line(tmp_path, capsys, kind, message):
    path = tmp_path / "m"
    if kind == "binary":
        path.write_bytes(bytes(range(128, 256)))
    elif kind == "folder":
        path.mkdir()
    else:
        path.write_text("[1, 2]\n")
    code, err = run_plot([str(path), "-o", str(tmp_path / "c.png")], capsys)
    assert code == 2 and err.startswith(f"error: METRICS: {path}") and message in err and err.count("\n") == 1, err


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
