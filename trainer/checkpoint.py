"""Distributed checkpoints (torch.distributed.checkpoint) that count only when complete.

Layout: DIR/step-00000040/ holds DCP's files; DIR/step-00000040/COMPLETE is written by rank 0
after every rank's files and the metadata are on disk. A save killed half way leaves a folder
without the marker, which resume ignores and deletes. Resume walks the complete checkpoints
newest first and falls back, with a warning, past one that is damaged itself; a refused one (it
asks to run code: trainer/safe_load.py) and any other load error stop the run with nothing
changed (trainer/checkpoint_load.py). No complete checkpoint is
ever renamed or deleted except by retention, which deletes only checkpoints older than a newer
complete save. Deletions run on a background thread of rank 0 (trainer/retention.py).

DIR/model.json records the model the checkpoints belong to (its configuration, and the Hugging
Face directory it started from, whose tokenizer an export copies). A run of another shape is
refused before it starts instead of loading nothing and training from step 0.

Saves are asynchronous: the state is staged to host memory, and the writing runs on a
background thread over its own gloo group while training goes on.
"""

from __future__ import annotations

import json
import os
import re
import stat
from concurrent.futures import Future
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import FileSystem, FileSystemWriter
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful

from config.kubernetes import EXIT_CHECKPOINT_READ_FAILED, EXIT_CHECKPOINTS_UNLOADABLE, EXIT_CRASH, EXIT_USAGE
from config.models import ModelConfig, shape_difference
from config.paths import file_status, read_json
from config.workloads.common import CheckpointConfig
from trainer import safe_load
from trainer.checkpoint_load import FAILED, REFUSED, Verdict, agree, classify, describe, precheck
from trainer.cli import UsageError, WorkerExit, checked_path, create_folder, write_whole
from trainer.dist import Runtime, same_buffers
from trainer.lease import LEASE_FILE, LOCK_FILE, WAIT_S, Lease, LeaseHeld, Owner
from trainer.log import log, warn
from trainer.retention import TRASH, BackgroundRemover

MARKER = "COMPLETE"
MODEL_FILE = "model.json"
RUN_SETTINGS = ("global_batch_size",)  # record entries a resume may change (trainer/batching.py)
_STEP_DIR = re.compile(r"^step-(\d{8})$")


# The status of a run whose checkpoint directory went away under it (deleted, or FSx unmounted):
# retryable, as a full disk is. A lost mount is cured by the restart, on this node or another, which
# resumes from the directory's checkpoints; a deleted directory's run begins again, as the next run
# in an empty directory would. Not EXIT_USAGE: under a TrainJob that fails the job for good.
DIRECTORY_LOST = EXIT_CRASH


class CheckpointWriteFailed(RuntimeError):
    """A save that did not complete (a full disk, an I/O error). The run crashes with it, as with
    any unexpected error (trainer.cli.report_crash), but its line names the checkpoint and each
    rank's cause: DCP's own CheckpointException puts every rank's traceback into its message."""

    def __init__(self, path: str, exc: CheckpointException | OSError):
        """`exc`: DCP's, or the OSError of rank 0's marker, written once every rank's files are on disk."""
        if isinstance(exc, OSError):
            why = f"rank 0, its {MARKER} marker: {describe(exc)}"
        else:
            ranks: dict[str, list[int]] = {}  # a full disk fails every rank alike: one reason, the ranks it stopped
            for rank, (error, _) in sorted(exc.failures.items()):
                ranks.setdefault(describe(error), []).append(rank)
            why = "; ".join(f"rank{'s' if len(r) > 1 else ''} {', '.join(map(str, r))}: {reason}"
                            for reason, r in ranks.items())
        super().__init__(f"checkpoint {path} was not written; the checkpoints before it are kept ({why})")


class ModelAndOptimizer(Stateful):
    """Model and optimizer state as DCP wants them: sharded tensors keyed by parameter name, so
    a checkpoint written by N ranks loads on M. A replicated model's (DDP's) buffers are rank 0's
    on every rank first (trainer.dist.same_buffers): DCP writes each replicated tensor from
    whichever rank its plan balances it to, so a save mixed the ranks' BatchNorm statistics."""

    def __init__(self, model, optimizer, *, replicated_buffers: bool = False):
        self.model, self.optimizer, self.replicated_buffers = model, optimizer, replicated_buffers

    def state_dict(self) -> dict[str, Any]:
        if self.replicated_buffers:
            same_buffers(self.model)  # every rank calls this in a save (and a load, where it is overwritten)
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        # An asynchronous save stages the tensors while training goes on. Parameters and optimizer
        # state change only in the optimizer step, which waits for staging, but buffers such as
        # BatchNorm's running statistics change in the next forward: they are copied now.
        buffers = {name for name, _ in self.model.named_buffers()}
        model_sd = {k: v.clone() if k in buffers else v for k, v in model_sd.items()}
        if any(t.is_cuda for t in model_sd.values() if isinstance(t, torch.Tensor)):
            # Staging copies on its own stream from another thread, unordered with this one: the
            # optimizer step and the copies above must be done on the device before it starts.
            torch.cuda.current_stream().synchronize()
        return {"model": model_sd, "optim": optim_sd}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])


def step_dir(directory: Path, step: int) -> Path:
    return directory / f"step-{step:08d}"


def list_steps(directory: Path, *, complete: bool = True) -> list[int]:
    """Steps with a checkpoint folder in `directory`, oldest first."""
    if not directory.is_dir():
        return []
    steps = []
    for entry in directory.iterdir():
        m = _STEP_DIR.match(entry.name)
        if m and ((entry / MARKER).exists() == complete):
            steps.append(int(m.group(1)))
    return sorted(steps)


def read_model_record(directory: Path) -> dict | None:
    """DIR/model.json, None when there is none; PathProblem when it is not a JSON object."""
    path = directory / MODEL_FILE
    return read_json(path) if path.exists() else None


def existing_checkpoints(cfg: CheckpointConfig) -> tuple[Path, dict | None] | None:
    """The checkpoint directory, created and checked writable and free of files under the names of
    the trainer's folders, and the model record its checkpoints were written for (None when it has
    none); None without --checkpoint-dir or when it holds no complete checkpoint yet. Run by every
    rank before any process group exists, so a bad directory is one line and an exit, not a hang.
    Each workload then compares the record with what it is about to train (check_directory,
    trainer.vision's check_record)."""
    if not cfg.directory:
        return None
    path = create_folder(Path(cfg.directory), "--checkpoint-dir")
    for entry in path.iterdir():
        # Resume and retention move such names into the trash to delete them: someone's file there
        # is not the trainer's to delete, and would never leave the trash or free its name. A link
        # is not followed: its target is someone else's (a linked trash would be emptied there).
        if (_STEP_DIR.match(entry.name) or entry.name == TRASH) and (entry.is_symlink() or not entry.is_dir()):
            what = "a symbolic link" if entry.is_symlink() else "not a folder"
            raise UsageError("--checkpoint-dir", f"{entry} is {what}, but the trainer keeps folders of its "
                                                 f"own under that name; move it out of {path}")
    for name in (LEASE_FILE, LOCK_FILE):
        # Rank 0 reads the lease, and opens its lock, before resuming: a named pipe there held the
        # run in open() for ever, and a link to /dev/zero was read until memory ran out.
        found = checked_path("--checkpoint-dir", file_status, path / name)
        if found is not None and stat.S_ISDIR(found.st_mode):
            raise UsageError("--checkpoint-dir", f"{path / name} is a folder, but the trainer keeps its lease in a "
                                                 f"file of that name; move it out of {path}")
    record = checked_path("--checkpoint-dir", read_model_record, path)
    return (path, record) if list_steps(path) else None


def check_directory(cfg: CheckpointConfig, model: ModelConfig) -> dict | None:
    """The LLM's check: the directory opens, and its checkpoints (if any) are of this model's shape,
    so a mistake is one line, not a run that trains from step 0. Returns the record the
    checkpoints were written with (None: no checkpoints yet)."""
    existing = existing_checkpoints(cfg)
    if existing is None:
        return None
    path, record = existing
    if record is None:
        # Older trainers wrote no model.json and rotated q/k in the interleaved (Meta) layout;
        # their weights would load without error and compute something else.
        raise UsageError("--checkpoint-dir", f"{path} holds checkpoints without {MODEL_FILE}, written by a trainer "
                                             "with another rotary layout; they cannot be resumed, use another directory")
    if not isinstance(record.get("model"), dict):
        raise UsageError("--checkpoint-dir", f"{path / MODEL_FILE} has no \"model\" object: its checkpoints were "
                                             "not written by trainer.llm; use another directory")
    difference = shape_difference(record["model"], model)
    if difference:
        raise UsageError("--checkpoint-dir", f"{path} holds checkpoints of another model: {difference}; "
                                             "use another directory, or the model they were written by")
    return record


class CheckpointManager:
    def __init__(self, cfg: CheckpointConfig, rt: Runtime, state: dict[str, Stateful], *, last_step: int = 0,
                 model_record: dict | None = None):
        """`last_step` (if any) always saves; `model_record` is written to DIR/model.json."""
        self.cfg, self.rt, self.state = cfg, rt, state
        self.last_step, self.model_record = last_step, model_record
        self.directory = Path(cfg.directory) if cfg.directory else None
        self.pending: tuple[int, Future] | None = None
        self.staging: Future | None = None
        self.last_saved = 0
        self.stager = None
        self.lease: Lease | None = None  # rank 0's, taken by resume()
        # rank 0's: a save left incomplete (the lease lost, or the directory), and the status it ends the run with
        self.unmarked: tuple[str, int] | None = None
        self.held_directory: int | None = None  # rank 0's descriptor of the directory it resumed in
        self.remover = None  # rank 0 deletes old and incomplete checkpoint folders in the background
        if self.enabled and rt.is_main:
            self.remover = BackgroundRemover(self.directory,
                                             allowed=lambda: self.lease is None or self.lease.lost_to is None)
        if self.enabled and not cfg.synchronous and _async_staging_supported():
            # Staging (the copy of the state into host memory) also runs in the background; the
            # loop only waits for it before the next optimizer step changes the tensors. One
            # stager for the whole run reuses its (pinned, on GPU) host buffers save after save.
            on_gpu = rt.device.type == "cuda"
            self.stager = DefaultStager(StagingOptions(use_pinned_memory=on_gpu, use_shared_memory=False,
                                                       use_async_staging=True, use_non_blocking_copy=on_gpu))

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    def due(self, step: int) -> bool:
        return self.enabled and (step % self.cfg.every == 0 or step == self.last_step)

    def step_done(self, step: int) -> None:
        """After each optimizer step: start a save when one is due, finalise finished ones."""
        if self.due(step):
            self.save(step)
        self.poll()

    def save_now(self, step: int) -> None:
        """A complete checkpoint of `step` before returning (preemption)."""
        self.save(step, blocking=True)
        self.wait()

    # --- resume ---------------------------------------------------------------------------------

    def resume(self) -> int:
        """Load the newest complete checkpoint that loads; return its step (0: none).

        A checkpoint that is damaged itself (trainer/checkpoint_load.py) is passed over, with a
        warning, for the previous one; it stays where it is. A refused checkpoint (one that asks
        to run code, or lacks an entry this trainer resumes from) and any other failure end the
        run with WorkerExit and change nothing. When checkpoints exist and none loads, the run
        ends with one message naming each and why, unless allow_fresh_start lets it begin at
        step 0. The run's record (model.json) is written only once the decision is made."""
        if not self.enabled:
            return 0
        group = self.rt.checkpoint_group
        self._take_lease()
        candidates = [None]
        if self.rt.is_main:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._hold_directory()
            self._remove_incomplete()
            candidates = [list_steps(self.directory)]
        # Every rank must try the same checkpoints in the same order: take rank 0's listing.
        dist.broadcast_object_list(candidates, src=0, group=group)
        loaded = self._load_newest(candidates[0])
        if self.rt.is_main:
            self._write_model_record()
        self.last_saved = loaded
        return loaded

    def _load_newest(self, steps: list[int]) -> int:
        passed_over: list[str] = []
        for step in reversed(steps):
            path = step_dir(self.directory, step)
            verdict = self._load(path)
            if verdict.kind is None:
                if self.rt.is_main:
                    log(f"Resumed from checkpoint {path} (step {step})")
                return step
            if verdict.kind == REFUSED:
                raise WorkerExit(f"checkpoint {path} is refused ({verdict}); nothing was changed and no older "
                                 "checkpoint was loaded", EXIT_CHECKPOINTS_UNLOADABLE)
            if verdict.kind == FAILED:
                raise WorkerExit(f"checkpoint {path} could not be read ({verdict}); this is not damage "
                                 "of the checkpoint, so nothing was changed and no older checkpoint was "
                                 "loaded: the restart tries again", EXIT_CHECKPOINT_READ_FAILED)
            passed_over.append(f"{path.name}: {verdict}")
            if self.rt.is_main:
                warn(f"checkpoint {path} is damaged ({verdict}); it stays in place, "
                     "falling back to the previous one")
        if passed_over and not self.cfg.allow_fresh_start:
            raise WorkerExit(f"none of the {len(passed_over)} checkpoints in {self.directory} loads ("
                             + "; ".join(passed_over) + "): refusing to train from step 1 over them; "
                             "repair or move them, or pass --allow-fresh-start", EXIT_CHECKPOINTS_UNLOADABLE)
        if passed_over and self.rt.is_main:
            warn(f"--allow-fresh-start: none of the checkpoints in {self.directory} loads; training from step 1 "
                 "(the damaged ones stay until a save of the same step replaces them)")
        return 0

    def _take_lease(self) -> None:
        """Rank 0 takes the directory's lease (trainer/lease.py) before anything here is touched;
        every rank stops with its one-line refusal when another live run holds it. Rank 0 first
        waits for such a lease to go stale (a run stopped moments ago keeps it), while the other
        ranks wait in the broadcast below, bounded by the start-up timeout (1800 s by default,
        against WAIT_S's 140 s): the wait takes at most half of that bound, so a short
        --startup-timeout shortens the wait rather than failing the broadcast first."""
        refusal = [None]
        if self.rt.is_main:
            self.lease = Lease(self.directory, Owner.of_this_process())
            try:
                self.lease.acquire(wait_s=min(WAIT_S, self.rt.startup_timeout_s / 2))
                self.lease.start_renewing()
            except LeaseHeld as exc:
                refusal = [(str(exc), EXIT_USAGE)]
            except OSError as exc:  # said on every rank, rather than leaving the others waiting
                refusal = [(f"cannot take the lease on {self.directory}: {exc}", EXIT_CHECKPOINT_READ_FAILED)]
        dist.broadcast_object_list(refusal, src=0, group=self.rt.checkpoint_group)
        if refusal[0]:
            raise WorkerExit(*refusal[0])

    def _check_lease(self, step: int) -> None:
        """Before each save: a run that lost its lease (it stalled past the lease's life and
        another run took the directory over) must not write into it; nor one whose directory is
        gone or is another folder (deleted, its file system unmounted): DCP would make the folder
        anew and write checkpoints there that no lease guards and no resume accepts."""
        stop = [None]
        if self.rt.is_main:
            if self.lease is not None and self.lease.lost_to:
                stop = [(f"the lease on {self.directory} was taken over by {self.lease.lost_to}; this run stops "
                         "without writing another checkpoint there", EXIT_USAGE)]
            elif (what := self._directory_lost()) is not None:
                stop = [(f"--checkpoint-dir: {self.directory} {what} (deleted, or its file system unmounted); this "
                         f"run stops without writing {step_dir(self.directory, step)}: a folder made anew holds "
                         f"neither the run's {MODEL_FILE} nor its lease, and no run would resume from its "
                         "checkpoints", DIRECTORY_LOST)]
        dist.broadcast_object_list(stop, src=0, group=self.rt.checkpoint_group)
        if stop[0]:
            raise WorkerExit(*stop[0])

    def _hold_directory(self) -> None:
        """Keep the directory open while the run lives: its inode cannot be reused meanwhile, so a
        folder made again at its path is never taken for it (_directory_lost)."""
        if self.held_directory is not None:
            os.close(self.held_directory)
        self.held_directory = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)

    def _directory_lost(self) -> str | None:
        """How the directory at the path differs from the one held since resume; None: the same."""
        if self.held_directory is None:
            return None
        try:
            now = os.stat(self.directory)
        except FileNotFoundError:
            return "is gone"
        except OSError as exc:
            return f"cannot be read ({exc.strerror or exc})"
        held = os.fstat(self.held_directory)
        if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
            return "is no longer the folder this run resumed in"
        return None

    def _load(self, path: Path) -> Verdict:
        """Load `path` into the state; the verdict all ranks agree on (loaded: Verdict(None))."""
        group = self.rt.checkpoint_group
        checked = Verdict(None)
        if self.rt.is_main:  # the files' sizes and the metadata, once: they are the same for every rank
            try:
                precheck(path, entries=self.state)
            except Exception as exc:
                checked = classify(exc)
        checked = [checked]
        dist.broadcast_object_list(checked, src=0, group=group)
        if checked[0].kind is not None:
            return checked[0]
        try:
            safe_load.load(self.state, str(path), process_group=group)  # FSx is shared and writable: no pickled code
        # DCP raises on every rank when any rank's read fails; its CheckpointException is a
        # BaseException, so it is named here explicitly.
        except (Exception, CheckpointException) as exc:
            return agree(classify(exc), group)
        return agree(Verdict(None), group)

    def _write_model_record(self) -> None:
        if self.model_record is None:
            return
        record = self.model_record
        existing = read_model_record(self.directory)
        if existing is not None and list_steps(self.directory):
            # Kept when checkpoints exist (the workload has matched their shape): it also names
            # the Hugging Face directory the run first started from. The run settings that a
            # resume may change on purpose (the global batch, with its flag) are updated.
            record = {**existing, **{k: v for k, v in self.model_record.items() if k in RUN_SETTINGS}}
            if record == existing:
                return
        write_whole(self.directory / MODEL_FILE, json.dumps(record, indent=2) + "\n")

    # --- save -----------------------------------------------------------------------------------

    def save(self, step: int, *, blocking: bool = False) -> None:
        """Start saving `step`; with `blocking`, return only once it is complete."""
        if not self.enabled or step == self.last_saved:
            return
        self.wait()  # one save in flight at a time keeps host memory bounded
        self._check_lease(step)
        path = str(step_dir(self.directory, step))
        if self.rt.is_main:
            # A folder left by an earlier save of this step must not look complete while this one
            # is being written: a kill mid-write would otherwise leave a half-new "checkpoint".
            # DCP's save begins with a collective, so no rank writes before this removal.
            Path(path, MARKER).unlink(missing_ok=True)
        if blocking or self.cfg.synchronous:
            try:
                dcp.save(self.state, storage_writer=_writer(path), process_group=self.rt.checkpoint_group)
            except CheckpointException as exc:
                raise CheckpointWriteFailed(path, exc) from exc
            self._finalize(step)
        else:
            response = dcp.async_save(self.state, storage_writer=_writer(path),
                                      process_group=self.rt.checkpoint_group, async_stager=self.stager)
            self.staging = getattr(response, "staging_completion", None)
            self.pending = (step, getattr(response, "upload_completion", response))
        self.last_saved = step

    def wait_staging(self) -> None:
        """Call before the optimizer step: the staged copy must be taken before weights change."""
        if self.staging is not None:
            self.staging.result()
            self.staging = None

    def close(self, *, finished: bool = False) -> None:
        """Wait for the save in flight; a run that `finished` also waits for the deletions under
        way and gives the directory's lease back, one that stops early leaves them (the next run
        finishes them) and keeps the lease for its restart (trainer/lease.py). A finished run whose
        last save was not marked complete (another run took the directory over meanwhile) raises
        WorkerExit on every rank: a worker that exited 0 would mark the job Succeeded without its
        final model."""
        self.wait()
        unmarked = [self.unmarked]
        if finished and self.enabled:
            dist.broadcast_object_list(unmarked, src=0, group=self.rt.checkpoint_group)
        if self.stager is not None:
            self.stager.close()
            self.stager = None
        if self.remover is not None:
            if finished and self.remover.busy:
                log("Waiting for the deletion of old checkpoints before giving the lease back")
            self.remover.close(wait=finished)
        if self.lease is not None:
            if finished:
                self.lease.release()
            else:
                self.lease.stop_renewing()
        if self.held_directory is not None:
            os.close(self.held_directory)
            self.held_directory = None
        if finished and unmarked[0]:
            raise WorkerExit(*unmarked[0])

    def poll(self) -> None:
        """Finalise a background save that has finished; never blocks the training loop."""
        if self.pending and self.pending[1].done():
            self.wait()

    def wait(self) -> None:
        self.wait_staging()
        if self.pending:
            step, future = self.pending
            self.pending = None
            try:
                future.result()  # re-raises a failed write here, on the training thread
            except CheckpointException as exc:
                raise CheckpointWriteFailed(str(step_dir(self.directory, step)), exc) from exc
            self._finalize(step)

    def _finalize(self, step: int) -> None:
        if not self.rt.is_main:
            return
        # Rank 0's save finishes by writing DCP's metadata, which it does only after gathering
        # every rank's write results: when it returns, all ranks' files are on disk.
        path = step_dir(self.directory, step)
        with self.lease.held() if self.lease is not None else nullcontext(True) as held:
            # A run that stalled past the lease's life with this save in flight: the run that took
            # the directory over would resume from it at its next restart. A directory deleted after
            # the save's check (_check_lease) was made anew by DCP, without the run's record.
            lost = self._directory_lost() if held else None
            if held and lost is None:
                try:
                    write_whole(path / MARKER, f"{step}\n")
                except OSError as exc:
                    raise CheckpointWriteFailed(str(path), exc) from exc
        if lost is not None:
            self.unmarked = (f"this run reached its end, but --checkpoint-dir {self.directory} {lost} (deleted, or its "
                             f"file system unmounted) while its last checkpoint {path} was being written: that "
                             "checkpoint is left incomplete (not marked COMPLETE), so this run's final model is not "
                             "there", DIRECTORY_LOST)
            warn(f"--checkpoint-dir {self.directory} {lost}; checkpoint {path} is left incomplete (not marked "
                 "COMPLETE) and this run writes no more checkpoints there")
            return
        if not held:
            # The next save stops every rank (_check_lease); when there is none, close() does.
            self.unmarked = (f"this run reached its end, but the lease on {self.directory} was taken over by "
                             f"{self.lease.lost_to} while its last checkpoint {path} was being written: that "
                             "checkpoint is left incomplete (not marked COMPLETE), so this run's final model is not "
                             "there", EXIT_USAGE)
            warn(f"the lease on {self.directory} was taken over by {self.lease.lost_to}; checkpoint {path} is left "
                 "incomplete (not marked COMPLETE) and this run writes no more checkpoints there")
            return
        log(f"Checkpoint saved: {path}")
        self.remover.run(lambda: self._retire(step))

    def _retire(self, step: int) -> None:
        """On the background thread: delete the complete checkpoints older than the newest `keep`
        of those up to `step`, and the folders of saves below it that never completed. Retention
        counts this save and older ones only: a newer checkpoint here is a damaged one resume
        passed over, left in place until a save of its step replaces it, and must not push the
        checkpoints this run can resume from out of the kept ones. No save below `step` is in
        flight (saves are finalised in order), and a save in flight above it is never touched."""
        older = [s for s in list_steps(self.directory) if s <= step]
        for old in older[:-self.cfg.keep] + [s for s in list_steps(self.directory, complete=False) if s < step]:
            self.remover.discard(step_dir(self.directory, old))
        self.remover.empty_trash()

    def _remove_incomplete(self) -> None:
        """At resume: the folders of saves that never completed (a worker killed mid-write) are
        renamed away now, so that this run may save their steps again, and deleted in the
        background with whatever an earlier run left to delete."""
        for step in list_steps(self.directory, complete=False):
            self.remover.discard(step_dir(self.directory, step))
        self.remover.run(self.remover.empty_trash)


class _WriteErrorsNamed(FileSystem):
    """DCP's file system, with a write that the disk refuses raised as the disk's OSError (a full
    disk's ENOSPC, EFBIG, EIO). torch.save's zip writer turns it into "RuntimeError: [enforce fail
    at inline_container.cc:672] . unexpected pos 704 vs 598", and the OSError survives only as that
    error's context on the rank it happened on: DCP pickles each rank's error to gather them, which
    drops the context."""

    @contextmanager
    def create_stream(self, path, mode):
        try:
            with super().create_stream(path, mode) as stream:
                yield stream
        except RuntimeError as exc:
            cause = exc.__cause__ or exc.__context__
            while cause is not None and not isinstance(cause, OSError):
                cause = cause.__cause__ or cause.__context__
            if cause is None:
                raise
            # Without the file's name: the checkpoint's path is in the line already, and a crash's
            # line is cut at 300 characters (trainer.cli.report_crash).
            raise OSError(cause.errno, cause.strerror) from exc


def _writer(path: str) -> FileSystemWriter:
    writer = FileSystemWriter(path)
    writer.fs = _WriteErrorsNamed()
    return writer


def _async_staging_supported() -> bool:
    """Background staging needs torch >= 2.13: 2.11's stager fails to copy FSDP2's sharded
    tensors ("KeyError: <class 'type'>", seen on the H100 machine). Older versions stage
    synchronously (DCP's default) and still write in the background."""
    major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    return (major, minor) >= (2, 13)
