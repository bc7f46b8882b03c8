"""MetricsLogger and the non-finite guard in one process: what a metrics line holds and leaves out."""

from __future__ import annotations

import json

import pytest
import torch

from config.kubernetes import EXIT_NONFINITE
from trainer.batching import NonFiniteLoss, NonFiniteSteps
from trainer.dist import Runtime
from config.workloads.common import MetricsConfig
from trainer.late_read import LAG_STEPS
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
    m.step_done(3, t(float("nan")), None, t(float("nan")), 1e-3, skipped=t(1.0))  # as NonFiniteSteps decides it
    m.step_done(4, t(float("nan")), None, t(float("nan")), 1e-3, skipped=True)
    first, second = _lines(tmp_path)
    assert (first["loss"], first["grad_norm"], first["nonfinite_steps"]) == (2.0, 1.0, 1)
    assert (second["loss"], second["grad_norm"], second["nonfinite_steps"], second["nonfinite_steps_total"]) == \
        (None, None, 2, 3)
    assert "moe_aux_loss" not in first  # a dense model has none
    assert "NaN" not in (tmp_path / "m.jsonl").read_text()  # strict JSON


class GuardedStep:
    """One parameter under fused AdamW and the non-finite guard, stepped as trainer.llm steps."""

    def __init__(self, limit: int):
        self.w = torch.nn.Parameter(torch.ones(3))
        self.optimizer = torch.optim.AdamW([self.w], lr=0.1, fused=True)
        self.guard = NonFiniteSteps(CPU_RANK, limit, self.optimizer)

    def __call__(self, step: int, loss: float, *, last: bool = False) -> tuple[bool, bool]:
        """(skipped, whether the parameter changed)"""
        self.w.grad = torch.ones(3)
        before = self.w.detach().clone()
        skipped = self.guard.check(step, t(1.0), t(loss))
        self.optimizer.step()
        self.guard.stop_at_limit(step, now=last)
        return bool(skipped), not torch.equal(before, self.w.detach())


def test_a_non_finite_step_is_skipped_by_the_optimizer_itself_leaving_weights_moments_and_step_count():
    step = GuardedStep(limit=5)
    assert step(1, float("nan")) == (True, False)
    assert step(2, 2.0) == (False, True)
    moments = {k: v.clone() for k, v in step.optimizer.state[step.w].items()}
    assert step(3, float("inf")) == (True, False)
    assert all(torch.equal(moments[k], v) for k, v in step.optimizer.state[step.w].items())
    assert step(4, 1.0) == (False, True)
    assert step.optimizer.state[step.w]["step"].item() == 2  # AdamW's bias correction counts applied steps only
    assert step.guard.total == 2


def test_the_run_stops_lag_steps_after_n_non_finite_steps_in_a_row_on_every_rank_alike():
    step = GuardedStep(limit=2)
    for n, loss in enumerate([float("nan"), 1.0, float("inf"), float("-inf")], start=1):
        step(n, loss)  # steps 3 and 4 are 2 in a row; the count is read LAG_STEPS steps later
    assert LAG_STEPS == 2
    step(5, 1.0)
    with pytest.raises(NonFiniteLoss, match=r"^steps 3 to 4: 2 steps in a row .*--max-nonfinite-steps 2\); "
                                            r"stopped after step 6\.") as e:
        step(6, 1.0)
    assert e.value.code == EXIT_NONFINITE and step.guard.total == 3


def test_the_last_step_reads_its_own_count_at_once():
    step = GuardedStep(limit=1)
    step(1, 1.0)
    with pytest.raises(NonFiniteLoss, match=r"^steps 2 to 2: 1 steps in a row .*stopped after step 2\."):
        step(2, float("nan"), last=True)
