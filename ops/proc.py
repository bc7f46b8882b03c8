"""Child processes with a deadline that never outlive the process that started them.

Every command ops (and the tests and benchmarks around it) runs goes through `run` or `start`:
- the command gets its own process group, so a timeout or a stop ends everything it started
  (cdk's node starts `python app.py`), not just the first; descendants that leave the group for a
  session of their own (torchrun starts each worker so) are found from /proc while their parent
  lives and killed with it;
- one watchdog per parent (ops/proc_watchdog.py, started on first use) holds the read end of a
  pipe only this process writes to. However this process ends, SIGKILL included, the pipe
  reaches end-of-file and the watchdog kills every group still running, and their descendants. A prctl death signal
  would catch only the direct child and only on Linux; the pipe works on macOS too.
- `run` has no default timeout: each caller says how long its command may take.

A group is forgotten once its leader has been reaped; what a command leaves running in the
background after it exits on its own is not followed further.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Sequence

from ops.proc_watchdog import descendants, kill

WATCHDOG = Path(__file__).with_name("proc_watchdog.py")


class _Watchdog:
    """The parent's side of the lifeline: '+PGID' and '-PGID' lines to the watchdog process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._owner = 0  # the pid that started the watchdog: a forked child needs its own
        self._process: subprocess.Popen | None = None  # kept so that it is never collected as "still running"

    def _lifeline(self) -> int | None:
        if self._fd is not None and self._owner == os.getpid():
            return self._fd
        read, write = os.pipe()
        try:
            self._process = subprocess.Popen([sys.executable, "-I", "-S", str(WATCHDOG), str(read)], pass_fds=(read,),
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            os.close(write)
            return None
        finally:
            os.close(read)
        self._fd, self._owner = write, os.getpid()
        return write

    def tell(self, line: str) -> None:
        with self._lock:
            fd = self._lifeline()
            if fd is None:
                return
            try:
                os.write(fd, f"{line}\n".encode())
            except OSError:  # the watchdog is gone (killed by hand): the timeouts still hold
                pass


_watchdog = _Watchdog()


def start(argv: Sequence[str], **popen: Any) -> subprocess.Popen:
    """subprocess.Popen(argv, **popen) in a new process group that dies with this process.
    The caller stops it with `stop` or waits for it; a command that is not there raises
    FileNotFoundError as Popen does."""
    if "start_new_session" in popen or "process_group" in popen or "preexec_fn" in popen:
        raise TypeError("ops.proc.start sets the process group itself")
    with _CtrlCDeferred() as ctrl_c:
        child = subprocess.Popen(list(argv), start_new_session=True, **popen)
        _watchdog.tell(f"+{child.pid}")
    if ctrl_c.interrupts:
        stop(child)
        ctrl_c.deliver()
    return child


class _CtrlCDeferred:
    """Ctrl-C between the fork and the watchdog's '+PGID' (Popen's own bookkeeping, the first
    watchdog's start) would leave a child nobody kills: it is held until `start` has the child,
    then delivered to the handler that was there (KeyboardInterrupt, usually)."""

    def __init__(self) -> None:
        self.pressed, self.installed, self.previous = False, False, None

    def __enter__(self) -> "_CtrlCDeferred":
        if threading.current_thread() is threading.main_thread():  # only it receives Python's signals
            self.previous, self.installed = signal.signal(signal.SIGINT, self._hold), True
        return self

    def _hold(self, signum, frame) -> None:
        self.pressed = True

    def __exit__(self, *exc) -> None:
        if self.installed:  # None: a handler set outside Python, which cannot be put back
            signal.signal(signal.SIGINT, signal.SIG_DFL if self.previous is None else self.previous)

    @property
    def interrupts(self) -> bool:
        """Held, and the handler it goes to does not ignore it."""
        return self.pressed and self.previous is not signal.SIG_IGN

    def deliver(self) -> None:
        if callable(self.previous):
            self.previous(signal.SIGINT, None)  # default_int_handler raises KeyboardInterrupt
        else:
            raise KeyboardInterrupt


def stop(child: subprocess.Popen, grace_s: float = 0.0, first: int = signal.SIGTERM) -> int:
    """End the child's whole group and every descendant that left it for a session of its own
    (torchrun's workers): `first` to the child alone, then after grace_s SIGKILL to all of them.
    A no-op for a child that has ended; returns its exit status."""
    try:
        family = descendants(child.pid) if child.poll() is None else []
        if child.poll() is None and grace_s > 0:
            child.send_signal(first)
            try:
                child.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        # A leader not reaped yet still owns its group id; one that ended in its grace does not,
        # and what it left behind goes all the same.
        kill(child.pid if child.poll() is None else None, family)
        return child.wait()
    finally:
        _watchdog.tell(f"-{child.pid}")


def run(argv: Sequence[str], *, timeout: float, input: str | bytes | None = None, cwd: str | Path | None = None,
        env: dict | None = None, capture_output: bool = True, text: bool = True) -> subprocess.CompletedProcess:
    """subprocess.run with a required timeout: past it, the command's whole group is killed and
    subprocess.TimeoutExpired raised. Ctrl-C or any error here kills the group too."""
    pipe = subprocess.PIPE if capture_output else None
    child = start(argv, cwd=cwd, env=env, text=text, stdout=pipe, stderr=pipe,
                  stdin=subprocess.PIPE if input is not None else None)
    try:
        out, err = child.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        kill(child.pid, descendants(child.pid))
        out, err = child.communicate()
        raise subprocess.TimeoutExpired(expired.cmd, timeout, out, err) from None
    finally:
        stop(child)  # Ctrl-C or an error while waiting: the group goes too
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)
