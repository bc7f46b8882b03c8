"""Deleting checkpoint folders off the training thread.

Rank 0 deletes the checkpoints retention retires and the folders of saves that never completed.
On the training thread that stalled the loop (313-600 ms for a 44M-parameter model on a local
disk; minutes for a 70B checkpoint on FSx) while every other rank waited at the next collective,
under the steady-state timeout. Here deletions run on one background thread, in order.

A folder is first renamed into DIR/.deleting/ (one metadata operation, also on Lustre), then
deleted there. A deletion cut short by the end of the process therefore never leaves a half-deleted
folder under a checkpoint's name, which with its COMPLETE marker still in place would look
resumable; what is left in .deleting/ is deleted by the next run. And once a folder is renamed, its
name is free: a save of the same step may begin at once without racing the deletion.

Nothing is deleted once `allowed()` turns false: a run that lost its lease (trainer/lease.py)
leaves the directory to the run that took it over.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from trainer.log import log, warn

TRASH = ".deleting"


class BackgroundRemover:
    def __init__(self, directory: Path, *, allowed: Callable[[], bool] = lambda: True):
        self.trash, self.allowed = Path(directory) / TRASH, allowed
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-retention")
        self.futures: list[Future] = []
        self.stuck: set[Path] = set()  # failed this run: tried again by the next, not at every save

    def run(self, task: Callable[[], None]) -> None:
        """Run `task` on the background thread after the tasks before it; it may call discard().
        An error is logged there, never raised into training: a deletion that fails costs disk
        space, not work."""
        def guarded():
            try:
                task()
            except Exception as exc:  # noqa: BLE001 (the thread must outlive any file-system error)
                warn(f"deleting old checkpoint folders failed: {type(exc).__name__}: {exc}")
        self.futures = [f for f in self.futures if not f.done()] + [self.executor.submit(guarded)]

    def discard(self, folder: Path) -> bool:
        """Rename `folder` into the trash now, on the calling thread (its name is then free); the
        trash is emptied by empty_trash(). False when not allowed or the folder is gone."""
        if not self.allowed():
            return False
        for _ in range(2):  # the trash itself may have been removed, empty, a moment before
            self.trash.mkdir(exist_ok=True)
            try:
                os.replace(folder, self.trash / f"{folder.name}.{uuid.uuid4().hex[:8]}")
                return True
            except FileNotFoundError:
                if not folder.exists():
                    return False
        return False

    def empty_trash(self) -> None:
        """Delete what the trash holds (run it through run())."""
        if not self.trash.is_dir():
            return
        for entry in sorted(self.trash.iterdir()):
            if not self.allowed():
                return
            if entry in self.stuck:
                continue
            t0 = time.perf_counter()
            failure = _delete(entry)
            if failure:  # disk space is lost, not work: training goes on
                self.stuck.add(entry)
                warn(f"could not delete {entry} ({failure}); it stays for the next run to try again")
                continue
            log(f"Deleted {entry.name.rsplit('.', 1)[0]} in the background ({time.perf_counter() - t0:.1f} s)")
        try:
            self.trash.rmdir()
        except OSError:  # renamed into meanwhile, or holding what would not go
            pass

    @property
    def busy(self) -> bool:
        return any(not f.done() for f in self.futures)

    def wait(self) -> None:
        """Until every task so far is done."""
        for future in self.futures:
            future.result()
        self.futures = []

    def close(self, *, wait: bool) -> None:
        """Stop the thread, after the tasks so far with `wait`; without, tasks not begun are
        dropped and the next run empties the trash."""
        self.executor.shutdown(wait=wait, cancel_futures=not wait)


def _delete(folder: Path) -> str | None:
    """Delete `folder` as far as it goes; None, or the first path that would not go and why."""
    failures: list[str] = []

    def failed(_function, path, exc_info):
        failures.append(f"{path}: {exc_info[1].strerror or exc_info[1]}")

    shutil.rmtree(folder, onerror=failed)
    return failures[0] if failures else None
