"""The watchdog ops/proc.py starts: `python -I -S proc_watchdog.py FD`.

Reads '+PGID' and '-PGID' lines from FD, a pipe only the parent writes to. End-of-file means the
parent has ended, however it ended: every group still listed gets SIGKILL. Runs in a session of
its own, so Ctrl-C in the parent's terminal reaches the parent, not this process. Standard
library only, no site-packages: it starts in a few milliseconds.
"""

import os
import signal
import sys


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
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass


if __name__ == "__main__":
    main(int(sys.argv[1]))
