"""bench/vision_loader.py --case epoch-start and dali-regions, tiny, on the CPU: they run
trainer.vision's own loaders in both orders, and DALI's three training graphs, and print every
figure (a benchmark: the figures are not judged here). A --workers, --batch or --images of 0 is
refused in one line with every other bench number (tests/test_bench_arguments.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torchvision", reason="torchvision is a pinned dependency")

from ops import proc  # noqa: E402

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "vision_loader.py"


@pytest.mark.slow
def test_epoch_start_times_the_boundary_in_both_orders():
    p = proc.run([sys.executable, str(SCRIPT), "--case", "epoch-start", "--workers", "1", "--batch", "4",
                  "--images", "8", "--rounds", "2"], timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])["epoch_start"]
    assert (out["batch"], out["workers"], out["train_images"], out["val_images"]) == (4, 1, 8, 8)
    for side in ("after", "before"):
        for key in ("evaluation_s", "wait_s", "to_first_batch_s", "to_all_read_s"):
            assert out[f"{side}_{key}"] > 0, (side, key)
        # The boundary holds the evaluation and the wait, and the epoch's reads end after its first.
        assert out[f"{side}_to_all_read_s"] >= out[f"{side}_to_first_batch_s"] >= out[f"{side}_evaluation_s"]
    for ratio in ("wait", "to_first_batch", "to_all_read"):
        assert out[f"{ratio}_after_over_before"] > 0, ratio
    assert p.stdout.count("round ") == 2


@pytest.mark.slow
def test_dali_regions_times_the_three_graphs_on_both_sets():
    """--case dali-regions, tiny: every graph measured on the 4:4:4 set and the 4:2:0 copy, each
    round printed, and the conditional's cost against the graph it picks for each set."""
    pytest.importorskip("nvidia.dali", reason="nvidia-dali-cuda120 is a pinned dependency")
    p = proc.run([sys.executable, str(SCRIPT), "--case", "dali-regions", "--images", "8", "--batch", "4",
                  "--rounds", "2"], timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])["dali_regions"]
    assert (out["batch"], out["dali_threads"], out["images"]) == (4, 1, 8)
    for name, pick in (("4:4:4", "all"), ("4:2:0", "none")):
        assert all(out[name][f"{mode}_images_per_s"] > 0 for mode in ("per-file", "all", "none")), name
        assert out[name][f"per_file_over_{pick}"] > 0 and len(out[name]) == 4, name
    assert p.stdout.count("round ") == 2
