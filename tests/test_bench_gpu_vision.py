"""bench/gpu_vision.py end to end as --dry-run (every part tiny on the CPU: nvImageCodec's CPU
backend, the trainer runs as real `python -m trainer.vision` processes), and the pieces of
bench/vision_runs.py it rests on: the --decoders list, the budget, the metrics summary."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torchvision", reason="torchvision is a pinned dependency")

from bench.vision_runs import Budget, Run, linked_folder, parse_runs, summarize  # noqa: E402
from ops import proc  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent

SCRIPT = REPO_ROOT / "bench" / "gpu_vision.py"


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """(the finished process, its JSON) of one dry run for the whole module."""
    out = tmp_path_factory.mktemp("gpu-vision") / "result.json"
    p = proc.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(out)], cwd=REPO_ROOT, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p, json.loads(out.read_text())


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and value > 0


@pytest.mark.slow
def test_a_dry_run_measures_the_gpu_the_loader_and_the_decoders_alone(dry_run):
    _, result = dry_run
    assert result["dry_run"] is True and result["device"] == "cpu (dry run)"
    for key in ("gpu_images_per_s", "loader_images_per_s", "loader_images_per_s_per_worker", "loader_over_gpu"):
        assert _positive(result[key]), key
    assert result["jpegs"]["unique"] > 0 and _positive(result["jpegs"]["mean_kb"])
    decode = result["decode_only"]
    assert [r["run"] for r in decode["runs"]] == ["nvimgcodec:0.9", "nvimgcodec:0", "dali:0.9", "dali:0.9:none",
                                                 "dali:0.9:all", "dali:0.9 4:2:0", "dali:0.9:none 4:2:0",
                                                 "dali:0.9:all 4:2:0", "dali:0.9 mixed", "dali:0.9:none mixed",
                                                 "dali:0.9:all mixed"]
    for r in decode["runs"]:
        assert _positive(r["images_per_s"]) and _positive(r["over_gpu"]), r
        assert r["over_gpu"] == pytest.approx(r["images_per_s"] / result["gpu_images_per_s"], rel=0.05)
        # The host's own rate bounds the whole (it waits for the device at the end only).
        assert r["host_images_per_s"] >= r["images_per_s"] and 0 < r["decode_call_share"] <= 1, r
        assert "on this CPU" in r["decoder_line"]  # no GPU here: nvImageCodec's CPU backend, DALI's CPU graph
        # Two rounds of the list (the default): the row is their median, its spread theirs.
        assert len(r["rounds_images_per_s"]) == 2 and r["images_per_s"] == pytest.approx(
            sum(r["rounds_images_per_s"]) / 2, abs=0.11), r
        assert r["spread"] == pytest.approx(max(r["rounds_images_per_s"]) / min(r["rounds_images_per_s"]), abs=1e-3)
        assert 0 < r["median_batch_ms"] <= r["slowest_batch_ms"], r


@pytest.mark.slow
def test_a_dry_run_trains_once_per_decoder_and_skips_nvjpeg_with_the_trainers_reason(dry_run):
    p, result = dry_run
    trainer = result["trainer"]
    assert result["decoders"] == ["dali:0.9", "nvimgcodec:0.9", "cpu", "nvimgcodec:0", "nvjpeg"]
    assert [r["run"] for r in trainer["runs"]] == result["decoders"]
    runs = {r["run"]: r for r in trainer["runs"]}
    for name in ("dali:0.9", "nvimgcodec:0.9", "cpu", "nvimgcodec:0"):
        r = runs[name]
        assert r["status"] == "measured" and r["why"] is None, r
        assert _positive(r["images_per_s"]) and _positive(r["over_gpu"]) and _positive(r["steady_images_per_s"])
        assert 0 <= r["data_wait_fraction"] < 1 and r["measured_epochs"] == trainer["epochs"] - 1
        assert [e["epoch"] for e in r["epochs"]] == list(range(trainer["epochs"]))
        assert all(e["steps"] == trainer["epoch_images"] // trainer["batch"] for e in r["epochs"])
        # Against the GPU's rate in the JSON (rel: a dry run's images/s, rounded to 0.1, are single digits).
        assert r["over_gpu"] == pytest.approx(r["images_per_s"] / result["gpu_images_per_s"], rel=0.05)
    assert runs["nvimgcodec:0.9"]["decoder_line"].startswith("nvImageCodec decodes on this CPU")
    assert runs["dali:0.9"]["decoder_line"].startswith("DALI decodes (the box alone where the JPEG's chroma is not "
                                                         "subsampled, else the whole image) on this CPU")
    assert runs["cpu"]["decoder_line"] is None and trainer["files"] == "4:4:4"  # --trainer-files' default
    assert runs["nvjpeg"]["status"] == "skipped" and runs["nvjpeg"]["images_per_s"] is None
    assert "--decode: nvjpeg" in runs["nvjpeg"]["why"]
    # The same figures in the log, one line per run, the skip with its reason.
    assert f"nvjpeg         skipped: {runs['nvjpeg']['why']}" in p.stdout
    assert all(f"  {name:<14} " in p.stdout for name in runs)


@pytest.mark.parametrize("text, says", [
    ("cpu,pil", "'pil' is not one of cpu, nvjpeg, nvimgcodec, dali"),
    ("nvjpeg:0.5", "only nvimgcodec and dali take a :LOAD"),
    ("dali:2", "between 0 and 1"),
    ("nvimgcodec:1.5", "between 0 and 1"),
    ("nvimgcodec:half", "between 0 and 1"),
    ("cpu,nvimgcodec,nvimgcodec:0.9", "named twice"),
    ("dali,dali:0.9:per-file", "named twice"),
    ("dali:0.9:some", "only dali takes a third part, its --dali-regions: one of per-file, all, none"),
    ("nvimgcodec:0.9:none", "only dali takes a third part"),
])
def test_a_bad_decoders_list_names_the_entry_and_what_is_allowed(text, says):
    with pytest.raises(ValueError, match=says):
        parse_runs(text)


def test_the_decoders_list_keeps_its_order_defaults_to_the_trainers_load_and_names_dalis_regions():
    assert parse_runs("nvjpeg, nvimgcodec:0,cpu,nvimgcodec,dali,dali:0.5") == [
        Run("nvjpeg"), Run("nvimgcodec", 0.0), Run("cpu"), Run("nvimgcodec", 0.9), Run("dali", 0.9), Run("dali", 0.5)]
    assert Run("nvimgcodec", 0.0).argv() == ["--decode", "nvimgcodec", "--hw-decoder-load", "0.0"]
    assert Run("cpu").argv() == ["--decode", "cpu"] and Run("nvimgcodec", 0.5).name == "nvimgcodec:0.5"
    whole = parse_runs("dali:0.9:none")[0]
    assert whole == Run("dali", 0.9, "none") and whole.name == "dali:0.9:none" and whole.file_name == "dali-0.9-none"
    assert whole.argv() == ["--decode", "dali", "--hw-decoder-load", "0.9", "--dali-regions", "none"]


def test_a_bad_decoders_list_is_a_usage_error_before_any_work():
    p = proc.run([sys.executable, str(SCRIPT), "--decoders", "cpu,pil"], cwd=REPO_ROOT, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines() == [
        "error: --decoders: 'pil' is not one of cpu, nvjpeg, nvimgcodec, dali "
        "(nvimgcodec:LOAD or dali:LOAD for a --hw-decoder-load between 0 and 1)"]


def test_a_decode_only_row_is_the_median_of_its_rounds_and_says_how_far_apart_they_were():
    """Two H100 runs gave the same DALI graph 5,024 and 9,772 images/s: a row measured in rounds
    shows that within one run, and its slowest micro-batch a one-time stall."""
    from bench.gpu_vision import row_of, spread_words

    def result(rate, slowest):
        return {"images_per_s": rate, "host_images_per_s": rate + 1, "decode_call_share": 0.9,
                "median_batch_ms": 30.0, "slowest_batch_ms": slowest, "decoder_line": "DALI decodes"}

    row = row_of([result(5024.0, 41.0), result(9772.0, 260.0), result(8000.0, 35.0)], gpu=4000.0)
    assert row["images_per_s"] == 8000.0 and row["host_images_per_s"] == 8001.0 and row["over_gpu"] == 2.0
    assert row["rounds_images_per_s"] == [5024.0, 9772.0, 8000.0] and row["spread"] == round(9772 / 5024, 3)
    assert row["slowest_batch_ms"] == 260.0 and row["median_batch_ms"] == 30.0
    assert spread_words(row) == " (rounds 5,024, 9,772 and 8,000: 1.95x apart)"
    assert spread_words(row_of([result(5024.0, 41.0)], gpu=4000.0)) == ""  # one round: nothing to compare
    # Rounds whose micro-batches took alike: the median never reads above the slowest (the clean-clone
    # CI's dry run once had 40.0 against 39.99).
    alike = [dict(result(100.0, 39.99), median_batch_ms=39.99) for _ in range(2)]
    assert row_of(alike, gpu=4000.0)["median_batch_ms"] <= row_of(alike, gpu=4000.0)["slowest_batch_ms"] == 39.99


def test_the_mixed_files_alternate_the_two_kinds_and_an_unknown_kind_is_refused():
    from bench.gpu_vision import FILE_KINDS, file_kinds

    full, subsampled = [Path(f"a{i}.jpg") for i in range(3)], [Path(f"b{i}.jpg") for i in range(3)]
    kinds = file_kinds(full, subsampled)
    assert set(kinds) == set(FILE_KINDS) and kinds["4:4:4"] == full and kinds["4:2:0"] == subsampled
    assert [f.name for f in kinds["mixed"]] == ["a0.jpg", "b0.jpg", "a1.jpg", "b1.jpg", "a2.jpg", "b2.jpg"]
    p = proc.run([sys.executable, str(SCRIPT), "--trainer-files", "4:2:2"], cwd=REPO_ROOT, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines() == [
        "error: --trainer-files: invalid choice: '4:2:2' (choose from '4:4:4', '4:2:0', 'mixed')"]


def test_a_run_starts_only_where_the_time_left_holds_the_longest_run_so_far():
    budget = Budget(100, first_estimate_s=40, start=time.monotonic() - 50)
    assert budget.why_not() is None  # 50 s left, a run takes about 40
    budget.took(55)
    why = budget.why_not()
    assert why is not None and "of the --budget-s 100 left" in why and "about 55 s" in why
    budget.took(30)  # a shorter run does not lower the estimate
    assert budget.estimate_s == 55
    assert Budget(10, first_estimate_s=5, start=time.monotonic() - 20).why_not().startswith("0 s of")


def test_the_summary_leaves_out_the_first_epoch_and_each_epochs_first_window():
    def step(step, epoch, rate):
        return {"kind": "step", "step": step, "epoch": epoch, "images_per_sec": rate}

    def epoch(n, seconds, rate, wait):
        return {"kind": "epoch", "epoch": n, "epoch_time_s": seconds, "images_per_sec": rate,
                "data_wait_fraction": wait}

    records = [step(2, 0, 10.0), step(4, 0, 100.0), epoch(0, 9.0, 50.0, 0.5),
               step(6, 1, 20.0), step(8, 1, 200.0), step(10, 1, 300.0), epoch(1, 2.0, 100.0, 0.25),
               step(12, 2, 30.0), step(14, 2, 400.0), step(16, 2, 500.0), epoch(2, 6.0, 300.0, 0.5)]
    figures = summarize(records)
    # Epochs 1 and 2: (200 + 1800) images in 8 s; the wait (0.5 + 3) s of 8 s.
    assert figures == {"images_per_s": 250.0, "data_wait_fraction": 0.4375, "measured_epochs": 2,
                       "steady_images_per_s": 350.0}  # median of 200, 300, 400, 500
    assert summarize(records[:3]) == {}  # the first epoch alone measures nothing


def test_the_folder_links_the_few_files_under_as_many_names_as_asked(tmp_path):
    sources = []
    for i in range(3):
        sources.append(tmp_path / f"src{i}.jpg")
        sources[-1].write_bytes(bytes([i]) * 10)
    root = linked_folder(sources, tmp_path / "data", train=7, val=2, classes=2)
    train = sorted((root / "train").rglob("*.jpg"))
    assert len(train) == 7 and len(list((root / "val").rglob("*.jpg"))) == 2
    assert sorted(p.name for p in (root / "train").iterdir()) == sorted(p.name for p in (root / "val").iterdir())
    assert all(p.stat().st_nlink > 1 for p in train) and sources[0].stat().st_nlink == 1 + 3 + 1
    with pytest.raises(ValueError, match="3 classes need"):
        linked_folder(sources, tmp_path / "other", train=7, val=2, classes=3)
