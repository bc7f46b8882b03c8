"""Where a profiled trainer's threads spent their time: py-spy's raw folded stacks (as
bench/gpu_vision.py --profile writes them) summed per thread of the process's threads whose name
holds THREAD (a child process's threads, the loader processes', are named "child NAME"), by the
innermost frame (the leaf: a wait shows as the wait) and by the innermost frame
of this repository's code.

    python bench/profile_summary.py PROFILE [--thread MainThread] [--thread decode-ahead] [--top 10]

--thread matches a part of the name: "MainThread" also matches each "child MainThread"; name the
training process's alone with --exact.

Each line of PROFILE is `process PID:"cmd";thread (TID): NAME;frame;...;frame COUNT` (py-spy record
--subprocesses --threads --format raw). Without --thread, every thread name that holds samples is
listed with its share of them.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from config import paths  # noqa: E402
from config.options import positive_int  # noqa: E402
from trainer.cli import Parser  # noqa: E402

OURS = ("trainer/", "bench/", "config/", "ops/")


def read_stacks(path: Path) -> list[tuple[str, list[str], int]]:
    """(thread, frames, samples) per line, the thread as thread_name gives it, "child " before a child
    process's; ValueError naming the line that is not py-spy's raw format."""
    rows = []
    # Line by line: a profile is a few MB, and a file that is none must not be read whole first.
    for number, line in paths.read_lines(path):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        parts = stack.split(";")
        depth = 0
        while depth < len(parts) and parts[depth].startswith("process "):
            depth += 1
        if not count.isdigit() or depth == 0 or depth == len(parts) or not parts[depth].startswith("thread "):
            raise ValueError(f"line {number} is not py-spy's raw format with --subprocesses --threads: {line[:80]!r}")
        # The profiled process's own threads by name; a child's (a loader process) as "child NAME".
        rows.append((("child " if depth > 1 else "") + thread_name(parts[depth]), parts[depth + 1:], int(count)))
    if not rows:
        raise ValueError("it holds no samples")
    return rows


def thread_name(thread: str) -> str:
    """'thread (1025): MainThread' -> 'MainThread'; an unnamed thread keeps its id."""
    return thread.split(": ", 1)[1] if ": " in thread else thread


def summary(rows, thread: str, top: int, exact: bool = False) -> str:
    leaf, ours, total = collections.Counter(), collections.Counter(), 0
    for name, frames, n in rows:
        if (thread != name) if exact else (thread not in name):
            continue
        total += n
        leaf[frames[-1] if frames else "(no Python frame)"] += n
        mine = [f for f in frames if f.rpartition(" (")[2].startswith(OURS)]
        ours[mine[-1] if mine else "(none of this repository's frames)"] += n
    if not total:
        return f"{thread}: no samples"
    lines = [f"{thread}: {total:,} samples"]
    for title, counter in (("innermost frame", leaf), ("innermost frame of this repository", ours)):
        lines.append(f"  by {title}:")
        lines += [f"    {100 * n / total:5.1f}%  {frame}" for frame, n in counter.most_common(top)]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = Parser(description=__doc__.split("\n")[0])
    p.add_argument("profile", help="py-spy raw folded stacks (bench/gpu_vision.py --profile)")
    p.add_argument("--thread", action="append", default=[], help="a thread name or part of one (repeatable)")
    p.add_argument("--top", type=positive_int, default=10, help="frames listed per view")
    p.add_argument("--exact", action="store_true", help="--thread names whole thread names")
    args = p.parse_args(argv)
    path = Path(args.profile)
    if not path.is_file():
        p.error(f"profile: {path} is not a file")
    try:
        rows = read_stacks(path)
    except paths.PathProblem as problem:  # it names the path and the line
        p.error(f"profile: {problem}")
    except ValueError as problem:
        p.error(f"profile: {path}: {problem}")
    if not args.thread:
        names = collections.Counter()
        for name, _, n in rows:
            names[name] += n
        total = sum(names.values())
        for name, n in names.most_common():
            print(f"{100 * n / total:5.1f}%  {name}")
        return 0
    print("\n".join(summary(rows, thread, args.top, args.exact) for thread in args.thread))
    return 0


if __name__ == "__main__":
    sys.exit(main())
