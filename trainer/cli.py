"""Argument parsing shared by the workloads: one-line errors that name the field, no tracebacks.

A pod log that ends in a 40-line traceback for a typo in `--steps` hides the one fact a person
needs; here every user error is a single `error: --field: what is wrong` line and exit status 2.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import random
import re
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, NoReturn, TypeVar

from config.errors import one_line
from trainer.log import log
from config.options import add_to_parser, build

T = TypeVar("T")


class UsageError(Exception):
    """A bad argument or input file, found after parsing (a missing shard, a foreign tokenizer)."""

    def __init__(self, field: str, message: str):
        super().__init__(one_line(f"{field}: {message}"))


class WorkerExit(Exception):
    """A failure that is not the user's typo but still deserves one line and its own exit status
    (config/kubernetes.py), not a traceback: e.g. checkpoints that exist and do not load."""

    def __init__(self, message: str, code: int, *, consequence: bool = False):
        """`consequence`: this rank stops because another rank met the problem, whose own line names it."""
        super().__init__(message)
        self.code, self.consequence = code, consequence


class Parser(argparse.ArgumentParser):
    def __init__(self, **kwargs):
        kwargs.setdefault("formatter_class", argparse.ArgumentDefaultsHelpFormatter)
        super().__init__(**kwargs)

    def error(self, message: str) -> NoReturn:  # argparse's own errors, e.g. an invalid int
        from config.kubernetes import EXIT_USAGE

        log(f"error: {message.replace('argument ', '')}", sys.stderr)
        raise SystemExit(EXIT_USAGE)


def parse_config(cls: type[T], argv=None) -> T:
    """A workload's job configuration (config/workloads/) from its command line: the parser is
    derived from the configuration's own option declarations (config/options.py)."""
    parser = Parser(prog=f"python -m {cls.module}", description=(cls.__doc__ or "").strip().split("\n")[0])
    add_to_parser(parser, cls)
    return build(cls, vars(parser.parse_args(argv)))


def create_folder(path: Path, field: str, *, wanted: Path | None = None) -> Path:
    """`path` as a folder, created with its parents; UsageError naming `field` and `wanted` (what
    the folder is for, default `path`) when it cannot be: a parent that is a file, a read-only or
    missing mount."""
    from config.paths import exists, is_dir, writable_dir

    wanted = wanted or path
    for folder in (path, *path.parents):
        if checked_path(field, exists, folder) and not checked_path(field, is_dir, folder):
            raise UsageError(field, f"cannot create {wanted}: {folder} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(field, f"cannot create {wanted}: {exc.strerror or exc}") from None
    return checked_path(field, writable_dir, path)


def staging_folder(out: Path, field: str) -> Path:
    """A new empty folder beside `out`, on its file system, for an output that appears whole or
    not at all: fill it, then os.replace it onto `out`."""
    from config.paths import refuse_dangling_link

    checked_path(field, refuse_dangling_link, out)
    create_folder(out.parent, field, wanted=out)
    # A signal between mkdtemp making the folder and its caller holding the path would leave it
    # behind: inside stopped_by_signals it is raised once the folder is on the list that block
    # removes.
    with _signals_held() as stopping:
        try:
            folder = _new_folder(out.parent, f".{out.name}.")
        except OSError as exc:
            raise UsageError(field, f"cannot create {out}: {exc.strerror or exc}") from None
        if stopping is not None:
            stopping.staging.append(folder)
    return folder


_NAME_CHARACTERS = "abcdefghijklmnopqrstuvwxyz0123456789_"


def _new_folder(parent: Path, prefix: str) -> Path:
    """A folder of a new name, `prefix` and 8 random characters of [a-z0-9_] (stale_staging's
    pattern), made with the mode of any new folder (the umask's), not mkdtemp's 0700: it becomes the
    output, which other users of the file system (a serving pod's, a colleague's) read."""
    pick = random.SystemRandom()
    for _ in range(100):
        folder = parent / (prefix + "".join(pick.choices(_NAME_CHARACTERS, k=8)))
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"no free name {prefix}XXXXXXXX in {parent}")


def stale_staging(out: Path) -> list[Path]:
    """The staging folders of `out` beside it (staging_folder's names: mkdtemp's 8 characters of
    [a-z0-9_] after the prefix, so `.out.v2.xxxxxxxx`, which belongs to out.v2, is not one of them)."""
    name = re.compile(rf"\.{re.escape(out.name)}\.[a-z0-9_]{{8}}")
    try:
        return sorted(p for p in out.parent.iterdir() if name.fullmatch(p.name) and p.is_dir())
    except OSError:  # no parent yet, or one this user may not list: staging_folder says so
        return []


class Stopped(BaseException):
    """SIGTERM or SIGINT inside `stopped_by_signals`. A BaseException, as KeyboardInterrupt is, so
    that no `except Exception` takes it for a failure of its own."""

    def __init__(self, signum: int):
        from config.kubernetes import EXIT_INTERRUPTED, EXIT_PREEMPTED

        self.name = signal.Signals(signum).name
        super().__init__(self.name)
        # 128 + the signal, as a shell reports a process it ended: interrupted, run it again.
        self.code = EXIT_PREEMPTED if signum == signal.SIGTERM else EXIT_INTERRUPTED


class _Stopping:
    """The stopped_by_signals block under way (signals reach only the main thread: one at a time)."""

    def __init__(self):
        self.held = False  # a signal now waits for the end of _signals_held
        self.pending: int | None = None
        self.in_place = False  # the output is renamed into place: a signal stops nothing any more
        self.staging: list[Path] = []  # made by staging_folder in the block


_stopping: _Stopping | None = None


@contextmanager
def stopped_by_signals() -> Iterator[None]:
    """SIGTERM (a deleted or preempted pod, `timeout`) and SIGINT raise Stopped in the block, so that
    the cleanup of a half-made output runs: Python's default for SIGTERM ends the process at once.
    Later signals are ignored until the block ends (a second Ctrl-C must not cut that cleanup short);
    a signal the process was started ignoring stays ignored. A Stopped leaving the block removes the
    staging folders made in it (its raiser's cleanup may not have known one yet)."""
    global _stopping
    if threading.current_thread() is not threading.main_thread():  # only it receives Python's signals
        yield
        return
    wanted = (signal.SIGTERM, signal.SIGINT)
    stopping = _Stopping()

    def stop(signum, frame):
        for s in wanted:
            if previous[s] is not signal.SIG_IGN:
                signal.signal(s, signal.SIG_IGN)
        if stopping.in_place:
            return
        if stopping.held:
            stopping.pending = signum
            return
        raise Stopped(signum)

    previous = {s: signal.getsignal(s) for s in wanted}
    for s in wanted:
        if previous[s] is not signal.SIG_IGN:
            signal.signal(s, stop)
    _stopping = stopping
    try:
        yield
    except Stopped:
        for folder in stopping.staging:
            shutil.rmtree(folder, ignore_errors=True)  # one renamed into place is not there any more
        raise
    finally:
        _stopping = None
        for s in wanted:
            signal.signal(s, signal.SIG_DFL if previous[s] is None else previous[s])  # None: not set from Python


@contextmanager
def _signals_held() -> Iterator[_Stopping | None]:
    """Inside stopped_by_signals, a signal in this block raises Stopped at its end, not in the middle."""
    stopping = _stopping
    if stopping is None:
        yield None
        return
    stopping.held = True
    try:
        yield stopping
    finally:
        stopping.held = False
    if stopping.pending is not None:
        raise Stopped(stopping.pending)


def output_in_place() -> None:
    """Said just before the rename that puts a finished output in place: inside stopped_by_signals, a
    signal from then on is ignored, for it stops nothing, and a Stopped would report the complete
    output as not written (exit 143 beside it, a retry refusing it as not empty)."""
    if _stopping is not None:
        _stopping.in_place = True


def write_whole(path: Path, content: str | Callable[[BinaryIO], object]) -> None:
    """`content` as the file `path`, which readers see whole or not at all: written beside it under
    a temporary name of this process, flushed to disk, and renamed over it. `content` is text, or
    a function that writes the bytes to the open file (torch.save, a figure's savefig). A write
    that fails (a full disk) removes its temporary file before the error goes on: every restart
    fails alike, and each one's half-written file would take more of the space."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            if isinstance(content, str):
                f.write(content.encode("utf-8"))
            else:
                content(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def open_for_append(path: Path, field: str):
    """`path` opened for appending lines (line-buffered, readable while a run goes on), its folder
    created; UsageError naming `field` when it cannot be."""
    from config.paths import is_dir

    if checked_path(field, is_dir, path):
        raise UsageError(field, f"{path} is a folder, expected a file")
    create_folder(path.parent, field, wanted=path)
    try:
        return open(path, "a", buffering=1, encoding="utf-8")
    except OSError as exc:
        raise UsageError(field, f"cannot write {path}: {exc.strerror or exc}") from None


def checked_path(field: str, check: Callable[[str | Path], T], path: str | Path) -> T:
    """One of config.paths' checks (read_json, output_dir, ...) with its problem as this field's UsageError."""
    from config.paths import PathProblem

    try:
        return check(path)
    except PathProblem as problem:
        raise UsageError(field, str(problem)) from None


def run_main(main: Callable[[], int | None], *, finalize: bool = True) -> NoReturn:
    """Run a workload's main, turning UsageError into the one-line form, NCCL off EFA on an EFA
    node group (trainer/nccl_net.py) and a WorkerExit (a run stopped early, on non-finite losses,
    or on checkpoints that do not load) into their own exit statuses (config/kubernetes.py), and
    any other exception into a crash report. With finalize=False (distributed workers) the
    process then ends without interpreter finalization (exit_without_finalization below
    says why)."""
    code = _run(main)
    if not finalize:
        exit_without_finalization(code)
    raise SystemExit(code)


def exit_without_finalization(code: int) -> NoReturn:
    """End a worker after its process groups are destroyed, skipping interpreter finalization.

    Why: a gloo worker thread drops its reference to the collective it ran a moment after the
    caller's wait() returns. When that is the last reference to a tensor that has a Python
    object (a barrier holds the works before it, whose tensors trainer code made), freeing it
    takes the GIL; if the main thread has meanwhile begun finalizing the interpreter, Python 3.11
    ends that thread with pthread_exit, whose unwinding through a C++ destructor calls
    std::terminate: "terminate called without an active exception", SIGABRT, and a finished run
    reported failed (trainer.ddp's rank 1 after its final barrier: 3 of 50 runs here under
    load, none of 45 since; the core dump showed exactly that stack). Destroying a group from Python would join its
    threads first, but DistributedDataParallel keeps references to the default group that
    outlive the module, so the threads live until exit. Everything a worker writes is closed
    and flushed before this (checkpoints, metrics, stdout and stderr).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# What a failed run raised, kept until the process ends. Its traceback holds the frames' locals
# (DistributedDataParallel, its Reducer, the process group); freeing them when the except clause
# ends runs ProcessGroupGloo's destructor, which waits for its work threads, and one still blocked in
# a collective with a peer that is gone never finishes: the worker printed its crash and then hung
# in the destructor, so torchrun never restarted it (py-spy: _run -> pybind11_object_dealloc ->
# ~Reducer -> ~ProcessGroupGloo -> condition_variable::wait, in test_vision_faults' killed-agent
# test). Distributed workers end with os._exit (exit_without_finalization), so what is
# kept here is never destroyed.
_FAILED: list[BaseException] = []


def _run(main: Callable[[], int | None]) -> int:
    try:
        return main() or 0
    except (KeyboardInterrupt, SystemExit):
        raise
    # BaseException: torch.distributed.checkpoint raises its CheckpointException (a save that a
    # full disk or an I/O error stopped) as one, and it is a crash like any other.
    except BaseException as exc:
        _FAILED.append(exc)
        return _exit_status(main, exc)


def _exit_status(main: Callable, exc: BaseException) -> int:
    from config.kubernetes import EXIT_CRASH, EXIT_NOT_ON_EFA, EXIT_USAGE
    from trainer.nccl_net import NotOnEfa

    if isinstance(exc, UsageError):
        log(f"error: {exc}", sys.stderr)
        return EXIT_USAGE
    if isinstance(exc, NotOnEfa):
        log(str(exc), sys.stderr)
        return EXIT_NOT_ON_EFA
    if isinstance(exc, WorkerExit):
        # Every rank raises it (they agree before they stop); one line per pod's log is enough.
        if os.environ.get("LOCAL_RANK", "0") == "0":
            log(f"error: {exc}", sys.stderr)
        if exc.consequence:
            _record_as_consequence(f"error: {exc}")
        return exc.code
    gone = peer_gone(exc)
    if gone is not None:
        # Not a crash of its own: the reason is in the log of the rank that stopped first, and a
        # traceback here would bury it. Exit 1 keeps it a failure torchrun restarts on.
        rank = f"rank {os.environ['RANK']}" if "RANK" in os.environ else "this process"
        line = f"error: {rank} stops: another rank of the run stopped first ({gone}); that rank's log says why"
        log(line, sys.stderr)
        _record_as_consequence(line)
        return EXIT_CRASH
    report_crash(main, exc)  # a crash, not a user error: see report_crash
    return EXIT_CRASH


def _record_as_consequence(line: str) -> None:
    """TORCHELASTIC_ERROR_FILE for a rank that stopped because another did, dated one second later
    than now. torchrun's summary names as root cause the failure of the lowest whole-second
    timestamp, and gives a failure without an error file the time it reads it (torch 2.13
    ProcessFailure, ChildFailedError.get_first_failure): with no file, or a file of this second,
    a peer that stopped in the same second as the rank that failed first was named instead of it."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    try:
        with open(path, "w") as f:
            json.dump({"message": line, "timestamp": int(time.time()) + 1}, f)
    except OSError:  # the line above is in the log; the summary is a convenience
        pass


# How a collective fails in a rank whose peer process went away, as torch 2.13 words it: gloo's TCP
# pair raises "[.../gloo/transport/tcp/pair.cc:553] Connection closed by peer [addr]:port. This is
# typically caused by a remote worker crashing..." (a RuntimeError; seen under torchrun when a peer
# exits mid-step), or a read's or write's strerror. NCCL's wording is not matched: this torch build
# has no NCCL to take it from, and an NCCL error (DistBackendError) also reports bugs such as
# invalid usage, whose traceback must stay.
PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")


def peer_gone(exc: BaseException) -> str | None:
    """'gloo: <words>' when `exc` is torch.distributed's error for a peer process that went away
    (gloo's RuntimeError, or a DistError with the same words); None for anything else, a bug's
    RuntimeError and an OSError of a socket of our own included."""
    # A process that never imported torch.distributed made no collective (and a crash report of a
    # tool that never imported torch should not wait seconds for it).
    distributed = sys.modules.get("torch.distributed")
    if distributed is None or not isinstance(exc, RuntimeError):
        return None
    text = str(exc)
    if "gloo" not in text and not isinstance(exc, getattr(distributed, "DistError", ())):
        return None
    words = next((words for words in PEER_GONE if words in text), None)
    if words is None:
        return None
    return f"gloo: {words}" if "gloo" in text else words


CRASH_MARKER = "----- {command} crashed: traceback follows -----"
CRASH_END = "----- end of traceback -----"


def report_crash(main: Callable, exc: BaseException) -> None:
    """An unexpected exception (an NCCL error, a full disk, a bug): the traceback stays in the log,
    between two marker lines, and one line ends the log naming the command and the exception.

    In a pod the log is the only place a person can read (a trace file in the pod's /tmp is gone
    with the pod, and the job's folder on FSx may be what failed), and the last line is what
    `kubectl logs --tail` and a pod's termination message show. Under torchrun the exception also
    goes to TORCHELASTIC_ERROR_FILE, so the agent's failure summary names this root cause instead
    of "error_file: <N/A>". Exit status 1 keeps a crash retryable (torchrun, the Job's backoff)."""
    import traceback

    module = getattr(main, "__module__", None)
    if module in (None, "__main__"):
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        module = spec.name if spec is not None else sys.argv[0]
    rank = f" (rank {os.environ['RANK']})" if "RANK" in os.environ else ""
    log(CRASH_MARKER.format(command=module), sys.stderr)
    log("".join(traceback.format_exception(exc)).rstrip("\n"), sys.stderr)  # in pieces, ranks' lines would mix
    log(CRASH_END, sys.stderr)
    what = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
    log(f"error: python -m {module}{rank} failed unexpectedly ({what}); the traceback is above", sys.stderr)
    if os.environ.get("TORCHELASTIC_ERROR_FILE"):
        try:
            from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

            ErrorHandler().record_exception(exc)
        except Exception:  # the report must not replace the crash it reports
            pass
