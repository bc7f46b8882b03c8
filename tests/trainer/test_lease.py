"""The checkpoint directory's lease (trainer/lease.py): one run at a time, restarts of the same run
welcome, stale leases taken over; and the refusal a second real run gets."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from trainer.lease import LEASE_FILE, POLL_S, RENEW_S, TTL_S, Lease, LeaseHeld, Owner
from trainer_procs import REPO, Job, file_size_limited, job_env, llm_args, torchrun_args

A = Owner("job-a-1234567890", "job-a-worker-0", 57)
B = Owner("job-b-0987654321", "job-b-worker-0", 61)


class Clock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class Sleep:
    """Sleeping on the fake clock: time passes at once, and `meanwhile` runs after each nap (the
    other run, renewing or not)."""

    def __init__(self, clock: Clock, meanwhile=lambda: None):
        self.clock, self.meanwhile, self.naps = clock, meanwhile, []

    def __call__(self, seconds: float) -> None:
        self.naps.append(seconds)
        self.clock.now += seconds
        self.meanwhile()


def record(directory) -> dict:
    return json.loads((directory / LEASE_FILE).read_text())


def test_a_live_lease_of_another_run_is_refused_naming_its_owner(tmp_path):
    clock = Clock()
    Lease(tmp_path, A, clock=clock).acquire()
    clock.now += 60
    with pytest.raises(LeaseHeld, match=r"in use by run job-a-1234567890 \(host job-a-worker-0, pid 57\), "
                                        r"renewed 60 s ago"):
        Lease(tmp_path, B, clock=clock).acquire()
    assert record(tmp_path)["run"] == A.run


def test_a_restart_of_the_same_run_on_another_pod_keeps_the_lease(tmp_path, capsys):
    clock = Clock()
    Lease(tmp_path, A, clock=clock).acquire()
    clock.now += 5
    restarted = Owner(A.run, "job-a-worker-1", 9)  # rank 0 now on another node, same rendezvous id
    Lease(tmp_path, restarted, clock=clock).acquire()
    assert record(tmp_path) | {"acquired": 0} == {"run": A.run, "host": "job-a-worker-1", "pid": 9, "acquired": 0,
                                                  "renewed": clock.now, "ttl_s": 120.0}
    assert "a restart of the same run" in capsys.readouterr().out


def test_a_lease_not_renewed_within_its_life_is_taken_over_with_a_warning(tmp_path, capsys):
    clock = Clock()
    Lease(tmp_path, A, clock=clock).acquire()
    clock.now += 121
    Lease(tmp_path, B, clock=clock).acquire()
    assert record(tmp_path)["run"] == B.run
    assert "taking over the lease" in capsys.readouterr().err


def test_a_lease_its_run_stopped_renewing_moments_ago_is_waited_for_and_then_taken_over(tmp_path, capsys):
    # `ops stop OLD-RUN` then `ops start PRESET`: the stopped run keeps its lease (for a restart that
    # now never comes); the new run must not spend its restarts on refusals until it goes stale.
    clock = Clock()
    Lease(tmp_path, A, clock=clock).acquire()
    stopped = clock.now
    clock.now += 10
    sleep = Sleep(clock)
    Lease(tmp_path, B, clock=clock, sleep=sleep).acquire(wait_s=TTL_S + RENEW_S)
    assert record(tmp_path)["run"] == B.run
    out, err = capsys.readouterr()
    assert re.search(rf"held by run {A.run} \(host job-a-worker-0, pid 57\), renewed 10 s ago; waiting up to "
                     r"140 s for it to go stale", out), out
    assert "taking over the lease" in err
    # It read the record again every few seconds and took over as soon as the lease was stale.
    assert sleep.naps and max(sleep.naps) <= POLL_S
    assert TTL_S <= record(tmp_path)["acquired"] - stopped <= TTL_S + POLL_S


def test_a_lease_its_run_keeps_renewing_is_refused_after_the_bounded_wait_in_one_line(tmp_path):
    clock = Clock()
    a = Lease(tmp_path, A, clock=clock)
    a.acquire()
    renewed = [clock.now]

    def a_lives():  # a live run renews every RENEW_S seconds
        if clock.now - renewed[0] >= RENEW_S:
            a.renew()
            renewed[0] = clock.now

    sleep = Sleep(clock, a_lives)
    with pytest.raises(LeaseHeld, match=rf"^{re.escape(str(tmp_path))} is in use by run {A.run} \(host job-a-worker-0, "
                                        r"pid 57\), renewed \d+ s ago; a lease not renewed for 120 s is taken over"):
        Lease(tmp_path, B, clock=clock, sleep=sleep).acquire(wait_s=TTL_S + RENEW_S)
    assert record(tmp_path)["run"] == A.run
    assert TTL_S + RENEW_S <= sum(sleep.naps) and max(sleep.naps) <= POLL_S  # bounded: no nap past the wait
    assert sum(sleep.naps) <= TTL_S + RENEW_S + 1e-9


def test_a_restart_of_the_same_run_takes_the_lease_at_once_without_waiting(tmp_path):
    clock = Clock()
    Lease(tmp_path, A, clock=clock).acquire()
    clock.now += 5

    def no_sleep(seconds):
        raise AssertionError(f"waited {seconds} s for its own run's lease")

    Lease(tmp_path, Owner(A.run, "job-a-worker-1", 9), clock=clock, sleep=no_sleep).acquire(wait_s=TTL_S + RENEW_S)
    assert record(tmp_path)["pid"] == 9


def test_renewal_keeps_a_lease_alive_and_notices_a_takeover(tmp_path):
    clock = Clock()
    a = Lease(tmp_path, A, clock=clock)
    a.acquire()
    for _ in range(10):  # 200 s of renewals every 20 s: never stale
        clock.now += 20
        a.renew()
    with pytest.raises(LeaseHeld):
        Lease(tmp_path, B, clock=clock).acquire()
    clock.now += 500  # a stalled run: B takes over, and A's next renewal finds out
    Lease(tmp_path, B, clock=clock).acquire()
    a.renew()
    assert a.lost_to.startswith(f"run {B.run}") and record(tmp_path)["run"] == B.run


def test_a_local_owner_whose_process_is_gone_is_stale_at_once(tmp_path):
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          timeout=60)
    me = Owner.of_this_process(env={})
    dead = Owner("killed-run", me.host, int(done.stdout))
    clock = Clock()
    Lease(tmp_path, dead, clock=clock).acquire()
    Lease(tmp_path, Owner("next-run", me.host, me.pid), clock=clock).acquire()
    assert record(tmp_path)["run"] == "next-run"


def test_a_finished_run_gives_the_lease_back_and_only_its_own(tmp_path):
    clock = Clock()
    a = Lease(tmp_path, A, clock=clock)
    a.acquire()
    a.release()
    assert not (tmp_path / LEASE_FILE).exists()
    Lease(tmp_path, B, clock=clock).acquire()
    a.release()  # no longer A's: left alone
    assert record(tmp_path)["run"] == B.run


def test_the_run_id_is_torchruns_rendezvous_id_else_host_and_pid():
    assert Owner.of_this_process(env={"TORCHELASTIC_RUN_ID": "llama-abc"}).run == "llama-abc"
    # A TrainJob's attempts rendezvous under new ids and name their run in TRAINER_RUN_ID.
    assert Owner.of_this_process(env={"TORCHELASTIC_RUN_ID": "llama-abc-1", "TRAINER_RUN_ID": "llama-abc"}).run == "llama-abc"
    me = Owner.of_this_process(env={})
    assert me.run == f"{me.host}:{os.getpid()}"


LEASE_ON_A_FULL_DISK = r"""
import errno, sys
from trainer.lease import Lease, Owner
for pid in (101, 102):  # restarts, each a process of its own
    try:
        Lease(sys.argv[1], Owner("job-a", "job-a-worker-0", pid)).acquire()
    except OSError as exc:
        assert exc.errno == errno.EFBIG, exc
    else:
        raise SystemExit("the disk took the lease")
"""


def test_a_lease_that_the_disk_refuses_is_raised_and_leaves_no_temporary_file(tmp_path):
    # A full disk fails every restart alike: each one's half-written temporary file took more of the space.
    p = subprocess.run(file_size_limited([sys.executable, "-c", LEASE_ON_A_FULL_DISK, str(tmp_path)], 40), cwd=REPO,
                       env=job_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".LEASE.lock"]


@pytest.mark.slow
def test_a_second_run_on_a_directory_in_use_is_refused_in_one_line_and_the_first_carries_on(tmp_path):
    first = Job(torchrun_args("trainer.llm", llm_args(tmp_path, steps=5000, every=1000)))
    try:
        first.wait_for(r"^step\s+5 ")
        # It waits (for half its start-up bound, here) for the lease to go stale before refusing:
        # the first run renews it all along.
        second = subprocess.run([sys.executable, "-m", "trainer.llm", *llm_args(tmp_path, steps=10),
                                 "--startup-timeout", "16"], cwd=REPO, env=job_env(), capture_output=True, text=True,
                                timeout=120)
        assert second.returncode == 2, second.stderr[-2000:]
        assert re.search(rf"^The lease on {tmp_path} is held by run \S+ \(host \S+, pid \d+\), renewed \d+ s ago; "
                         r"waiting up to 8 s for it to go stale", second.stdout, re.M), second.stdout[-2000:]
        [line] = second.stderr.strip().splitlines()[-1:]
        assert re.match(rf"error: {tmp_path} is in use by run \S+ \(host \S+, pid \d+\), renewed \d+ s ago", line), line
        assert "step " not in second.stdout
        assert first.proc.poll() is None  # still training
        seen = len(first.lines)
        first.wait_for(r"^step\s+\d+ ", start=seen)
    finally:
        first.stop()


@pytest.mark.slow
def test_a_run_started_moments_after_another_was_stopped_waits_for_its_lease_to_go_stale_and_trains(tmp_path):
    # `ops stop OLD-RUN` then `ops start PRESET`: the stopped run's rank 0 (another pod) renewed its
    # lease a moment ago and never will again (20 s before it goes stale: more than this start-up takes).
    stopped = {**vars(A), "acquired": time.time() - 3600, "renewed": time.time() - (TTL_S - 20), "ttl_s": TTL_S}
    (tmp_path / LEASE_FILE).write_text(json.dumps(stopped) + "\n")
    new = subprocess.run([sys.executable, "-m", "trainer.llm", *llm_args(tmp_path, steps=10)], cwd=REPO,
                         env=job_env(), capture_output=True, text=True, timeout=180)
    assert new.returncode == 0, new.stderr[-2000:]
    assert re.search(rf"^The lease on {tmp_path} is held by run {A.run} .*waiting up to 140 s", new.stdout, re.M)
    assert f"taking over the lease on {tmp_path} from run {A.run}" in new.stderr
    assert re.search(r"^step\s+10 ", new.stdout, re.M) and not (tmp_path / LEASE_FILE).exists()
