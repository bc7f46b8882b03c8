"""Every bench script's arguments: a bad one is one line naming it and what is allowed, exit 2,
before any work. Each script's main(argv) runs in this process (tests/cli_sweep.py): importing
the scripts is cheap once torch is, and a value that were taken would start the benchmark, which
the deadline then reports."""

from __future__ import annotations

import importlib

import pytest

from cli_sweep import captured_parser, run_in_process
from config.options import non_negative_int, positive_float, positive_int, timeout_seconds

SCRIPTS = ["activation_checkpointing", "dcp_async", "gpu_llm", "gpu_mfu", "gpu_vision", "launch_to_first_step",
           "preemption", "profile_summary", "recovery", "scaling", "step_overhead", "vision_loader", "vision_resize"]
DEADLINE_S = 30
# What each kind of number is given; every one is refused.
REFUSED = {positive_int: ["0", "-1", str(10**20), "x"], non_negative_int: ["-1", str(10**20), "x"],
           positive_float: ["0", "-1", "nan", "inf", "x"], timeout_seconds: ["0", "-1", "nan", "1e20", "x"]}


def _main(script: str):
    return importlib.import_module(f"bench.{script}").main


def _refused_in_one_line(script: str, argv: list[str], says: str) -> None:
    got = run_in_process(_main(script), argv, DEADLINE_S)
    said = f"{script} {' '.join(argv)}: exit {got.code}, hung {got.hung}, stderr {got.stderr!r}{got.escaped}"
    assert not got.hung and not got.escaped and got.code == 2, said
    assert len(got.lines) == 1 and got.lines[0].startswith("error: ") and "usage:" not in got.stderr, said
    assert says in got.lines[0], said


@pytest.mark.parametrize("script", SCRIPTS)
def test_an_unknown_flag_is_one_line_and_exit_2(script):
    extra = ["profile.txt"] if script == "profile_summary" else []  # its one positional
    _refused_in_one_line(script, [*extra, "--no-such-flag"], "--no-such-flag")


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_number_is_checked_zero_negative_huge_and_not_a_number_refused_in_one_line(script):
    """A count of 0 ended in a ZeroDivisionError or an empty median after the work, 10**20 in an
    OverflowError or a run without end, a NaN budget bounded nothing: each number now has a
    config/options.py type, and what that type refuses is one line naming the flag."""
    extra = ["profile.txt"] if script == "profile_summary" else []
    numbers = [action for action in captured_parser(_main(script), [])._actions
               if action.option_strings and action.type is not None and action.type in (int, float, *REFUSED)]
    assert numbers and [a.dest for a in numbers if a.type in (int, float)] == [], f"{script}: a number without a bound"
    for action in numbers:
        for value in REFUSED[action.type]:
            _refused_in_one_line(script, [*extra, action.option_strings[0], value], action.option_strings[0])


@pytest.mark.parametrize("script, argv, says", [
    ("activation_checkpointing", ["--dim", "32"], "--dim: 32 makes no model"),  # no 64-wide head
    # One layer: every mode's estimated activations are equal, and the ratio divided by 0 at the end.
    ("activation_checkpointing", ["--layers", "1"], "--layers: must be at least 2"),
    ("activation_checkpointing", ["--dim", "576"], "--dim: 576 makes no model"),  # 9 heads, 2 kv heads
    ("dcp_async", ["--dim", "576"], "--dim: 576 makes no model"),
    ("step_overhead", ["--dim", "16"], "--dim: 16 makes no model"),  # no feed-forward width
    ("step_overhead", ["--dim", "1152"], "--dim: 1152 makes no model"),  # 9 heads, 2 kv heads
    ("gpu_mfu", ["--configs", "8:2", "eight:1"], "--configs: 'eight:1' is not LAYERS:BATCH[:ac]"),
    ("gpu_mfu", ["--configs", "8:0"], "--configs: '8:0' is not LAYERS:BATCH[:ac]"),
    ("gpu_mfu", ["--configs", "8:2:recompute"], "--configs: '8:2:recompute' is not LAYERS:BATCH[:ac]"),
    ("vision_loader", ["--case", "reencoded", "--short-side", "100"], "--short-side: 100 is below 256"),
    ("gpu_vision", ["--epochs", "1"], "--epochs must be at least 2"),
])
def test_a_value_the_benchmark_cannot_use_is_refused_before_its_work(script, argv, says):
    """Before, a --dim whose heads do not divide ended in a ValueError traceback (dcp_async after
    starting its process group), a bad --configs entry in one after the GPU runs before it, and a
    --short-side out of range in a UsageError traceback."""
    _refused_in_one_line(script, argv, says)
