"""trainer.vision's metrics read the step's loss and non-finite flag LAG_STEPS steps late, as the
LLM loop reads its values (trainer/late_read.py): the lines, the skips and the stop after
--max-nonfinite-steps are what they were when the host read the flag at once, every line is
written, and the loss tensor a step hands in is not read before LAG_STEPS more steps are queued."""

from __future__ import annotations

import json

import pytest
import torch

from config.workloads.common import MetricsConfig
from trainer.batching import NonFiniteLoss, NonFiniteSteps
from trainer.dist import Runtime
from trainer.late_read import LAG_STEPS
from trainer.vision_metrics import VisionMetrics

CPU_RANK = Runtime(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), backend="gloo")
NAN = float("nan")


class GuardedRun:
    """One SGD parameter under NonFiniteSteps and VisionMetrics, stepped in trainer.vision's order:
    check, optimizer step, metrics, the limit."""

    def __init__(self, tmp_path, *, log_every: int = 1, limit: int = 3):
        self.file = tmp_path / "m.jsonl"
        self.w = torch.nn.Parameter(torch.ones(2))
        self.optimizer = torch.optim.SGD([self.w], lr=0.1, momentum=0.9, fused=True)
        self.guard = NonFiniteSteps(CPU_RANK, limit, self.optimizer)
        self.metrics = VisionMetrics(MetricsConfig(log_every, str(self.file)), CPU_RANK, batch_size=4)

    def step(self, step: int, loss: float, *, last: bool = False) -> bool:
        """Whether the parameter moved."""
        before = self.w.detach().clone()
        self.w.grad = torch.ones(2)
        value = torch.tensor(loss)
        self.metrics.data_wait(0.001)
        skipped = self.guard.check(step, value)
        self.optimizer.step()
        self.metrics.step_done(step, 0, value, 0.1, skipped=skipped)
        self.guard.stop_at_limit(step, now=last)
        return not torch.equal(before, self.w.detach())

    def lines(self) -> list[dict]:
        return [json.loads(line) for line in self.file.read_text().splitlines()] if self.file.exists() else []


def test_an_injected_nan_is_skipped_counted_and_left_out_of_the_loss_and_the_run_goes_on(tmp_path):
    run = GuardedRun(tmp_path, log_every=2)
    moved = [run.step(s, loss) for s, loss in enumerate([2.0, 4.0, NAN, 1.0, 3.0, 5.0], start=1)]
    assert moved == [True, True, False, True, True, True]  # the NaN step is not applied
    run.metrics.close()
    assert [(r["step"], r["loss"], r["nonfinite_steps"]) for r in run.lines()] == [(2, 3.0, 0), (4, 1.0, 1), (6, 4.0, 0)]
    assert "NaN" not in run.file.read_text()  # strict JSON


def test_lines_come_lag_steps_late_and_close_writes_the_pending_ones(tmp_path):
    run = GuardedRun(tmp_path)
    written = []
    for s in range(1, 6):
        run.step(s, float(s))
        written.append([r["step"] for r in run.lines()])
    assert LAG_STEPS == 2
    assert written == [[], [], [1], [1, 2], [1, 2, 3]]
    run.metrics.close()
    assert [r["step"] for r in run.lines()] == [1, 2, 3, 4, 5]


def test_a_steps_loss_tensor_is_not_read_before_lag_more_steps_are_queued(tmp_path):
    # The value pushed is a copy made on the device's stream; changing the tensor after the step
    # must not change the line (on a GPU the copy is queued; here it is made at once).
    run = GuardedRun(tmp_path)
    metrics = run.metrics
    loss = torch.tensor(7.0)
    metrics.step_done(1, 0, loss, 0.1, skipped=torch.tensor(0.0))
    loss.fill_(NAN)
    for s in (2, 3):
        metrics.step_done(s, 0, torch.tensor(1.0), 0.1, skipped=False)
    assert [r["loss"] for r in run.lines()] == [7.0]


def test_n_nans_in_a_row_stop_the_run_lag_steps_later_with_every_line_written(tmp_path):
    """The same stop as when the host read the flag each step: NonFiniteSteps' count was already
    read LAG_STEPS late; the metrics now are too, and close() writes the last steps' lines."""
    run = GuardedRun(tmp_path, limit=3)
    run.step(1, 2.0)
    for s in (2, 3, 4, 5):
        assert run.step(s, NAN) is False
    with pytest.raises(NonFiniteLoss, match=r"^steps 2 to 4: 3 steps in a row .*--max-nonfinite-steps 3\); "
                                            r"stopped after step 6\."):
        run.step(6, NAN)
    run.metrics.close()  # as trainer.vision does on NonFiniteLoss
    lines = run.lines()
    assert [r["step"] for r in lines] == [1, 2, 3, 4, 5, 6]
    assert lines[0]["loss"] == 2.0 and lines[0]["nonfinite_steps"] == 0
    assert all(r["loss"] is None and r["nonfinite_steps"] == 1 for r in lines[1:])
    assert run.guard.total == 5


def test_the_epoch_line_counts_every_step_of_the_epoch_including_those_not_yet_read(tmp_path):
    run = GuardedRun(tmp_path, log_every=100)
    for s, loss in enumerate([1.0, NAN, 3.0, 5.0], start=1):
        run.step(s, loss)
    run.metrics.train_done()
    record = run.metrics.epoch_done(4, 0, {"val_loss": 1.0, "top1": 0.5, "top5": 1.0, "val_images": 8})
    run.metrics.close()
    assert (record["steps"], record["loss"]) == (4, 3.0)  # the three finite losses' mean
    assert [r["kind"] for r in run.lines()] == ["epoch"]
