"""Values read LAG_STEPS steps late, and the preemption agreement built on them: every rank stops
at the same step, LAG_STEPS steps after the first signal, whichever rank got it."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from config.checkpoint_time import STEPS_AFTER_SIGNAL
from trainer.dist import Runtime
from trainer.late_read import LAG_STEPS, LateRead
from trainer.preemption import Preemption

CPU_RANK = Runtime(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), backend="gloo")


def test_a_value_comes_back_lag_pushes_later_with_its_tag_and_drain_returns_the_rest():
    late = LateRead(torch.device("cpu"), lag=2)
    answers = []
    for step in range(1, 5):
        late.push(torch.tensor([float(step), 2.0 * step]), tag=step)
        answers.append(late.due())
    assert answers == [[], [], [(1, [1.0, 2.0])], [(2, [2.0, 4.0])]]
    assert late.drain() == [(3, [3.0, 6.0]), (4, [4.0, 8.0])] and late.due() == []


def test_the_grace_period_counts_the_steps_a_worker_runs_after_the_signal():
    # The step in flight when SIGTERM arrives, then LAG_STEPS more until the agreed flag is read.
    assert STEPS_AFTER_SIGNAL == 1 + LAG_STEPS


@pytest.fixture
def preemption():
    previous = signal.getsignal(signal.SIGTERM)
    yield Preemption(CPU_RANK)
    signal.signal(signal.SIGTERM, previous)


def test_one_rank_stops_lag_steps_after_the_signal(preemption):
    answers = []
    for call in range(1, 7):
        if call == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        answers.append(preemption.agreed())
    assert answers.index(True) + 1 == 2 + LAG_STEPS


def test_the_last_step_of_a_run_reads_the_flag_at_once(preemption):
    assert preemption.agreed() is False
    os.kill(os.getpid(), signal.SIGTERM)
    assert preemption.agreed(now=True) is True


def _agree(rank: int, world: int, init_file: str, signalled_rank: int, signal_call: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    preemption = Preemption(Runtime(rank, world, 0, torch.device("cpu"), "gloo"))
    answers = []
    for call in range(1, 8):
        if rank == signalled_rank and call == signal_call:
            os.kill(os.getpid(), signal.SIGTERM)
        answers.append(preemption.agreed())
    with open(out, "w") as f:
        json.dump(answers, f)
    dist.destroy_process_group()


@pytest.mark.slow
def test_a_signal_to_one_rank_stops_every_rank_at_the_same_step(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    outs = [tmp_path / f"rank{r}.json" for r in range(2)]
    procs = [ctx.Process(target=_agree, args=(r, 2, str(tmp_path / "init"), 1, 3, str(outs[r]))) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=180)
        if p.is_alive():
            p.kill()
    assert [p.exitcode for p in procs] == [0, 0]
    answers = [json.loads(out.read_text()) for out in outs]
    assert answers[0] == answers[1]
    assert answers[0].index(True) + 1 == 3 + LAG_STEPS
