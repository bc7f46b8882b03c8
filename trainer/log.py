"""Log lines that stay whole when several ranks share one stdout pipe."""

import sys


def log(line: str, stream=None) -> None:
    # One write per line: print() writes the text and the newline separately, and two ranks
    # writing at once then interleave mid-line, which breaks anyone parsing the log.
    stream = stream or sys.stdout
    stream.write(line + "\n")
    stream.flush()


def warn(line: str) -> None:
    log(f"WARNING: {line}", sys.stderr)
