"""trainer/dist.py in a real two-rank gloo group: the start-up bound and the shorter steady-state
one, the flight recorder's folder, and an exit that no gloo thread can turn into SIGABRT."""

from __future__ import annotations

import socket
import subprocess
import sys

from trainer_procs import REPO, job_env, torchrun_args

SCRIPT = r"""
import os, sys, time
import torch
import torch.distributed as dist
from trainer import dist as tdist

rt = tdist.init(tdist.DistConfig(timeout_s=2, startup_timeout_s=60), checkpoint_group=True)

def say(line):
    # One write per line: unbuffered print() writes the text and its newline apart, and the two
    # ranks' lines interleaved ("STARTUPSTARTUP 0 ok\n 1 ok") in a full-suite run.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()

say(f"FLIGHT RECORDER FOLDER {os.path.isdir(os.path.dirname(os.environ['TORCH_NCCL_DEBUG_INFO_TEMP_FILE']))}")

def late_all_reduce():
    # Rank 1 arrives 6 s late: within the start-up bound, past the steady-state one.
    if rt.rank == 1:
        time.sleep(6)
    try:
        dist.all_reduce(torch.ones(1))
        return "ok"
    except RuntimeError as exc:
        return "timed out" if "Timed out" in str(exc) or "timed out" in str(exc) else f"error {exc}"

say(f"STARTUP {rt.rank} {late_all_reduce()}")
tdist.end_startup(rt)
say(f"STEADY {rt.rank} {late_all_reduce()}")
"""

WORKER = r"""
import atexit, sys
import torch
import torch.distributed as dist
from trainer import dist as tdist
from trainer.cli import run_main

atexit.register(lambda: print("FINALIZED", flush=True))

def main():
    tdist.init()
    try:
        dist.all_reduce(torch.ones(1))
        dist.barrier()  # the last collective: a gloo thread drops its work after wait() returns
        sys.stdout.write("LAST LINE, NOT FLUSHED")
        return 0
    finally:
        tdist.shutdown()

run_main(main, finalize=False)
"""


def _run(script: str, tmp_path, **env):
    path = tmp_path / "script.py"
    path.write_text(script)
    argv = torchrun_args("x", [])
    at = argv.index("-m", 3)
    return subprocess.run([*argv[:at], str(path)], cwd=REPO, env=job_env(**env), capture_output=True, text=True,
                          timeout=180)


def test_collectives_wait_out_the_start_up_bound_and_then_only_the_steady_state_one(tmp_path):
    p = _run(SCRIPT, tmp_path, TORCH_NCCL_DEBUG_INFO_TEMP_FILE=str(tmp_path / "flight-recorder" / "rank-"))
    out = p.stdout
    assert "FLIGHT RECORDER FOLDER True" in out, out + p.stderr[-2000:]
    assert "STARTUP 0 ok" in out and "STARTUP 1 ok" in out, out + p.stderr[-2000:]
    assert "STEADY 0 timed out" in out, out + p.stderr[-2000:]


def test_a_distributed_worker_exits_with_its_status_and_its_output_but_without_finalization(tmp_path):
    """No gloo thread can then meet a finalizing interpreter (trainer.cli.exit_without_finalization)."""
    p = _run(WORKER, tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.count("LAST LINE, NOT FLUSHED") == 2, p.stdout
    assert "FINALIZED" not in p.stdout and "terminate called" not in p.stderr


LONE = r"""
import torch
import torch.distributed as dist
from trainer import dist as tdist

for _ in range(2):  # again in the same process, as a test or a notebook does: RANK is set then
    rt = tdist.init(checkpoint_group=True)
    t = torch.ones(1)
    dist.all_reduce(t)
    dist.all_reduce(t, group=rt.checkpoint_group)
    print("LONE", rt.rank, rt.world_size, int(t.item()), flush=True)
    tdist.shutdown()
"""


def test_a_one_process_job_takes_no_port_another_process_can_hold(tmp_path):
    """Run outside torchrun, init rendezvouses in memory, the second time in a process too. It used to choose a free port and bind it
    later, and in CI another process bound the port in between (EADDRINUSE). Here the port in the
    environment is held by a listener: a job that bound any port named there would fail."""
    (tmp_path / "lone.py").write_text(LONE)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        env = job_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(held.getsockname()[1]))
        p = subprocess.run([sys.executable, str(tmp_path / "lone.py")], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.splitlines() == ["LONE 0 1 1"] * 2


def test_a_rank_without_the_rest_of_its_job_is_one_line_naming_what_is_missing():
    """RANK left in a shell or a pod spec by hand, without torchrun's other variables: one line and
    exit 2 before any rendezvous, not torch's "MASTER_ADDR expected" from deep inside it."""
    p = subprocess.run([sys.executable, "-m", "trainer.llm", "--steps", "1"], cwd=REPO,
                       env=job_env(RANK="3", WORLD_SIZE="4"), capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr[-2000:]
    assert p.stderr.strip() == ("error: RANK: RANK=3 is set but MASTER_ADDR, MASTER_PORT are not; run under "
                                "torchrun, which sets them all, or unset RANK for a one-process run")
