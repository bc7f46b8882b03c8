"""The watchdog ops/proc.py starts: `python -I -S proc_watchdog.py FD`.

Reads '+PGID' and '-PGID' lines from FD, a pipe only the parent writes to. End-of-file means the
parent has ended, however it ended: every group still listed gets SIGKILL, and so does every
descendant of its leader that left the group for a session of its own (torchrun starts each worker
so). Runs in a session of its own, so Ctrl-C in the parent's terminal reaches the parent, not this
process. Standard library only, no site-packages: it starts in a few milliseconds. ops/proc.py
uses `descendants` and `kill` as well.
"""

import os
import signal
import sys


def descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, start time) of every process below `pid`, from /proc's parent links (none where there
    is no /proc). Taken while `pid` lives: a process whose parent has died is re-parented, and
    nothing links it to this family any more."""
    children: dict[int, list[tuple[int, str]]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if name.isdigit():
            fields = _stat(int(name))
            if fields:
                children.setdefault(int(fields[1]), []).append((int(name), fields[19]))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child[0])
    return found


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields from the state on (field 3 is [0], the parent [1], start time [19])."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def kill(pgid: int | None, family: list[tuple[int, str]]) -> None:
    """SIGKILL to the group (None: no group), then to each of `family` that is still the process
    it was (the same start time: a pid the kernel has given to another process since is left alone)."""
    if pgid is not None:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
    for pid, started in family:
        fields = _stat(pid)
        if fields and fields[19] == started:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def main(fd: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    groups: set[int] = set()
    pending = b""
    while chunk := os.read(fd, 4096):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line[:1] == b"+":
                groups.add(int(line[1:]))
            elif line[:1] == b"-":
                groups.discard(int(line[1:]))
    for pgid in groups:
        kill(pgid, descendants(pgid))


if __name__ == "__main__":
    main(int(sys.argv[1]))
