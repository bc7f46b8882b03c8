"""ops/proc.py: every child has a deadline and dies with its parent, grandchildren included.

Real processes throughout. Waiting for a process to end is a pidfd polled with a deadline (the
kernel says when it exits), never a sleep.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ops import proc

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 60

# A child that starts a grandchild which would wait forever, and reports both pids.
FAMILY = """
import signal, subprocess, sys
grandchild = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"], start_new_session={session})
print("grandchild", grandchild.pid, flush=True)
grandchild.wait()
"""
# The grandchild in the child's group, or in a session of its own as torchrun starts its workers
# (which a kill of the child's group does not reach).
SESSIONS = pytest.mark.parametrize("session", [False, True], ids=["same-group", "own-session"])

PARENT = """
import sys
sys.path.insert(0, {repo!r})
from ops import proc
child = proc.start([sys.executable, "-c", {family!r}])
print("child", child.pid, flush=True)
sys.stdin.read()  # until the test kills this process
"""

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs Linux pidfds to wait on a non-child")


def _pids(stream, count: int) -> dict[str, int]:
    pids = {}
    for _ in range(count):
        name, pid = stream.readline().split()
        pids[name] = int(pid)
    return pids


def _watch(pid: int) -> int | None:
    """A pidfd for pid, or None when it has already ended and been reaped."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None


def _ended(pidfd: int | None, timeout_s: float) -> bool:
    if pidfd is None:
        return True
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(timeout_s * 1000))


@SESSIONS
def test_a_parent_killed_with_sigkill_takes_its_child_and_grandchild_along(session):
    parent_code = PARENT.format(repo=str(REPO), family=FAMILY.format(session=session))
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        pids = _pids(parent.stdout, 2)
        fds = {name: _watch(pid) for name, pid in pids.items()}
        assert not any(_ended(fd, 0) for fd in fds.values()), "the family must be running before the kill"
        parent.kill()
        parent.wait(timeout=DEADLINE_S)
        still = [name for name, fd in fds.items() if not _ended(fd, DEADLINE_S)]
        assert not still, f"{still} outlived their SIGKILLed parent"
    finally:
        parent.kill()
        parent.wait()
        for pid in pids.values() if "pids" in locals() else ():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@SESSIONS
def test_a_timeout_kills_the_whole_group_and_returns_its_output(session):
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as expired:
        proc.run([sys.executable, "-c", FAMILY.format(session=session)], timeout=1)
    assert time.monotonic() - t0 < DEADLINE_S
    name, pid = expired.value.output.split()
    assert name == "grandchild"
    assert _ended(_watch(int(pid)), DEADLINE_S), "the grandchild outlived the timeout"


@pytest.fixture
def ctrl_c_interrupts():
    """SIGINT raises KeyboardInterrupt for the test's length, as in a terminal. A process started
    in the background by a shell without job control (`cmd &` in a script, a CI runner's nohup)
    inherits SIGINT ignored, and Python then keeps it ignored: there Ctrl-C rightly interrupts
    nothing (ops.proc hands a held Ctrl-C on only to a handler that does not ignore it), and these
    tests would fail for the way the suite was started."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_an_interrupted_wait_kills_the_group_before_the_exception_leaves(tmp_path, ctrl_c_interrupts):
    """Ctrl-C (or any exception) while waiting: nothing is left running behind the error."""
    fifo = tmp_path / "pid"
    os.mkfifo(fifo)
    seen: list[int] = []

    def interrupt_once_running() -> None:
        with open(fifo) as f:  # opens when the command does; the pid arrives when it runs
            seen.append(int(f.read()))
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    threading.Thread(target=interrupt_once_running, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        proc.run(["bash", "-c", f"echo $$ > {fifo}; exec sleep 600"], timeout=DEADLINE_S)
    assert _ended(_watch(seen[0]), DEADLINE_S)


def test_a_missing_command_is_file_not_found_as_with_subprocess():
    with pytest.raises(FileNotFoundError):
        proc.run(["no-such-command-anywhere"], timeout=5)


def test_run_returns_status_output_and_takes_input():
    done = proc.run([sys.executable, "-c", "import sys; print(sys.stdin.read().upper()); sys.exit(3)"],
                    input="hello", timeout=DEADLINE_S)
    assert (done.returncode, done.stdout.strip()) == (3, "HELLO")


def _subprocess_calls(path: Path):
    import ast

    for node in ast.walk(ast.parse(path.read_text())):
        fn = node.func if isinstance(node, ast.Call) else None
        if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) and fn.value.id == "subprocess" \
                and fn.attr in ("run", "call", "check_call", "check_output", "Popen", "getoutput", "getstatusoutput"):
            yield fn.attr, node.lineno, {k.arg for k in node.keywords}
        if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) and fn.value.id == "os" \
                and fn.attr in ("system", "popen", "spawnv", "spawnl", "execv", "execvp", "fork"):
            yield fn.attr, node.lineno, set()


def test_the_project_starts_processes_only_through_ops_proc():
    """ops/, trainer/, bench/ and app.py: every child has a deadline and dies with its parent only if
    it goes through ops.proc; the one Popen outside it is ops.proc's own."""
    sources = [p for d in ("ops", "trainer", "bench", "config", "k8s", "stacks", "cdk_constructs")
               for p in sorted((REPO / d).rglob("*.py"))] + [REPO / "app.py"]
    direct = [f"{p.relative_to(REPO)}:{line} {name}" for p in sources if p.name != "proc.py"
              for name, line, _ in _subprocess_calls(p)]
    assert not direct, f"use ops.proc.run/start (a timeout, a process group, the watchdog): {direct}"


def test_every_process_a_test_starts_has_a_timeout():
    """Tests may call subprocess directly, but never without a deadline (Popen: only here, killed in finally)."""
    missing = [f"{p.relative_to(REPO)}:{line} {name}" for p in sorted((REPO / "tests").rglob("*.py"))
               for name, line, keywords in _subprocess_calls(p)
               if "timeout" not in keywords and not (name == "Popen" and p.name == "test_proc.py")]
    assert not missing, f"add a timeout (or use ops.proc): {missing}"


def test_ctrl_c_while_the_child_is_being_started_kills_it_and_then_interrupts(monkeypatch, ctrl_c_interrupts):
    """Ctrl-C between the fork and the watchdog's bookkeeping: no child is left that nobody kills."""
    started = []
    real_tell = proc._watchdog.tell

    def tell_after_ctrl_c(line: str) -> None:
        if line.startswith("+"):
            started.append(int(line[1:]))
            signal.raise_signal(signal.SIGINT)  # lands while start() is still in its critical part
        real_tell(line)

    monkeypatch.setattr(proc._watchdog, "tell", tell_after_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        proc.start(["sleep", "600"])
    assert _ended(_watch(started[0]), DEADLINE_S)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
