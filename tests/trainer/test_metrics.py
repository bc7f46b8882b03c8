"""MetricsLogger and the non-finite guard in one process: what a metrics line holds and leaves out."""

from __future__ import annotations

import json

import pytest
import torch

from config.kubernetes import EXIT_NONFINITE
from trainer.batching import NonFiniteLoss, NonFiniteSteps
from trainer.dist import Runtime
from config.workloads.common import MetricsConfig
from trainer.metrics import MetricsLogger

CPU_RANK = Runtime(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), backend="gloo")


def _logger(tmp_path, log_every=2, last_step=100) -> MetricsLogger:
    return MetricsLogger(MetricsConfig(log_every, str(tmp_path / "m.jsonl")), CPU_RANK,
                         tokens_per_step_per_device=64, flops_per_token=1.0, last_step=last_step)


def _lines(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]


def t(value: float) -> torch.Tensor:
    return torch.tensor(value)


def test_the_first_step_is_warm_up_and_left_out_of_the_first_throughput_window(tmp_path):
    m = _logger(tmp_path, log_every=1)
    m.step_done(1, t(2.0), None, t(1.0), 1e-3, skipped=False)
    m.step_done(2, t(1.0), None, t(1.0), 1e-3, skipped=False)
    first, second = _lines(tmp_path)
    assert first["tokens_per_sec"] is None and first["mfu"] is None and first["loss"] == 2.0
    assert second["tokens_per_sec"] > 0


def test_a_line_holds_the_window_means_and_the_aux_loss_apart_from_the_lm_loss(tmp_path):
    m = _logger(tmp_path)
    m.step_done(1, t(3.0), t(1.5), t(0.5), 1e-3, skipped=False)
    m.step_done(2, t(2.0), t(2.5), t(1.5), 2e-3, skipped=False)
    [line] = _lines(tmp_path)
    assert (line["loss"], line["moe_aux_loss"], line["grad_norm"], line["lr"]) == (2.5, 2.0, 1.0, 2e-3)
    assert m.last_loss == 2.5


def test_skipped_steps_are_counted_and_kept_out_of_the_means(tmp_path):
    m = _logger(tmp_path)
    m.step_done(1, t(2.0), None, t(1.0), 1e-3, skipped=False)
    m.step_done(2, t(float("nan")), None, t(float("inf")), 1e-3, skipped=True)
    m.step_done(3, t(float("nan")), None, t(float("nan")), 1e-3, skipped=True)
    m.step_done(4, t(float("nan")), None, t(float("nan")), 1e-3, skipped=True)
    first, second = _lines(tmp_path)
    assert (first["loss"], first["grad_norm"], first["nonfinite_steps"]) == (2.0, 1.0, 1)
    assert (second["loss"], second["grad_norm"], second["nonfinite_steps"], second["nonfinite_steps_total"]) == \
        (None, None, 2, 3)
    assert "moe_aux_loss" not in first  # a dense model has none
    assert "NaN" not in (tmp_path / "m.jsonl").read_text()  # strict JSON


def test_the_guard_counts_non_finite_steps_in_a_row_and_stops_at_the_limit():
    guard = NonFiniteSteps(CPU_RANK, limit=2)
    assert guard.check(t(1.0), t(float("nan"))) is True
    assert guard.check(t(1.0), t(2.0)) is False and guard.in_a_row == 0  # a finite step ends the run of them
    assert guard.check(t(float("inf")), t(2.0)) is True
    guard.stop_at_limit(5)
    assert guard.check(t(1.0), t(float("-inf"))) is True
    with pytest.raises(NonFiniteLoss, match=r"^steps 6 to 7: 2 steps in a row .*--max-nonfinite-steps 2") as e:
        guard.stop_at_limit(7)
    assert e.value.code == EXIT_NONFINITE and guard.total == 3
