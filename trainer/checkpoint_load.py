"""Why a checkpoint did not load, decided the same on every rank: its own damage, a refusal, or
anything else.

Only a checkpoint's own damage lets resume fall back to an older one: a missing, truncated or
undecodable file, or tensors of another shape than the model's. Those are properties of the
files and stay true on the next attempt. Anything else (an I/O error such as EIO or ESTALE, a
timeout, running out of memory, a lost peer) says nothing about the checkpoint: falling back
would throw away good work, so resume stops and changes nothing, and the restart tries again.
An error not recognised as damage counts as anything else.

A refused checkpoint is whole but must not be loaded, and no older one is loaded in its place:
one whose metadata or values ask to run code (trainer/safe_load.py: someone with write access to
the shared file system may have planted it), or one written without an entry of the state this
trainer resumes from (an earlier trainer's, such as an LLM checkpoint from before the data
position was saved). Falling back would hide the first and throw away the second's good work;
resume stops, changes nothing, and names it, and a person decides.

DCP hides why its metadata did not load (an AssertionError naming "metadata is None"), so the
metadata and the files it lists are checked here first: the file exists, unpickles (with
safe_load's restricted unpickler: never pickle.load), every data file is at least as long as the
bytes the metadata says it holds, and every entry of the state is there.
"""

from __future__ import annotations

import errno
import pickle
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException

from config.paths import PathProblem, open_regular
from trainer.safe_load import UnsafeCheckpoint, read_metadata

METADATA_FILE = ".metadata"  # torch.distributed.checkpoint's FileSystemWriter names it so
DAMAGED, FAILED, REFUSED = "damaged", "failed", "refused"
# Which verdict decides when ranks (or the failures DCP gathers from them) disagree: a refusal is
# a fact about the files that no retry changes; a failure says nothing about them; damage last.
DECIDING = (REFUSED, FAILED, DAMAGED)
UNSAFE = "unsafe checkpoint:"  # how safe_load's refusals begin, also inside DCP's wrapped errors

# RuntimeErrors that are about the bytes or the shapes in the files. Other RuntimeErrors (gloo's
# and NCCL's errors, out of memory) are not damage.
_DAMAGE_MESSAGES = (
    "PytorchStreamReader failed",  # a tensor file that is not a complete zip archive
    "Missing key in checkpoint state_dict",  # written for another model
    "Unexpected key(s) in state_dict",
    "size mismatch",
)


class Damaged(Exception):
    """A checkpoint's own files are missing, truncated or undecodable."""


class Refused(Exception):
    """A checkpoint whose files are whole but which this trainer must not load."""


@dataclass(frozen=True)
class Verdict:
    kind: str | None  # None: loaded; DAMAGED; REFUSED; FAILED
    reason: str = ""
    rank: int | None = None  # the rank the failure happened on, where known

    def __str__(self) -> str:
        return self.reason if self.rank is None else f"rank {self.rank}: {self.reason}"


def precheck(path: Path, entries: Iterable[str] = ()) -> None:
    """Raise Damaged when the metadata is missing or undecodable, or a data file it lists is
    missing or shorter than its data; Refused when the metadata asks to run code or lacks one of
    the state's top-level `entries`; any other OSError (EIO, ESTALE, EACCES) propagates."""
    try:
        with open_regular(path / METADATA_FILE) as f:  # a named pipe there would hold the resume for ever
            metadata = read_metadata(f)
    except FileNotFoundError:
        raise Damaged(f"{METADATA_FILE} is missing") from None
    except PathProblem as problem:
        raise Damaged(str(problem)) from None
    except UnsafeCheckpoint as exc:
        raise Refused(f"{exc}; inspect it, and move it out of the directory to resume from the one before") from None
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, IndexError, TypeError) as exc:
        raise Damaged(f"{METADATA_FILE} does not decode ({type(exc).__name__}: {_first_line(exc)})") from None
    ends: dict[str, int] = defaultdict(int)
    for info in (getattr(metadata, "storage_data", None) or {}).values():
        name = getattr(info, "relative_path", None)
        if name is None:
            raise Damaged(f"{METADATA_FILE} does not list its data files")
        ends[name] = max(ends[name], int(info.offset) + int(info.length))
    if not ends:
        raise Damaged(f"{METADATA_FILE} lists no data")
    for name, end in sorted(ends.items()):
        try:
            size = (path / name).stat().st_size
        except FileNotFoundError:
            raise Damaged(f"{name} is missing") from None
        if size < end:
            raise Damaged(f"{name} is truncated: {size} bytes, its data end at byte {end}")
    written = {fqn.split(".", 1)[0] for fqn in metadata.state_dict_metadata}
    missing = [entry for entry in entries if entry not in written]
    if missing:
        raise Refused(f"it has no {', '.join(map(repr, missing))} entry, which this trainer resumes from: an earlier "
                      "trainer wrote it; resume it with that trainer, or start this run in another --checkpoint-dir")


def classify(exc: BaseException) -> Verdict:
    """This rank's reading of one failed load. DCP raises the same CheckpointException, with
    every rank's failure in it, on every rank; a refusal, then any other failure, outweighs damage."""
    if isinstance(exc, CheckpointException):
        verdicts = [replace(_classify_one(e), rank=rank) for rank, (e, _) in sorted(exc.failures.items())]
    else:
        verdicts = [_classify_one(exc)]
    for kind in DECIDING:
        for verdict in verdicts:
            if verdict.kind == kind:
                return verdict
    return Verdict(FAILED, describe(exc))


def _classify_one(exc: BaseException) -> Verdict:
    reason = describe(exc)
    if isinstance(exc, Damaged):
        return Verdict(DAMAGED, str(exc))
    if isinstance(exc, (Refused, UnsafeCheckpoint)) or UNSAFE in str(exc):
        return Verdict(REFUSED, str(exc) if isinstance(exc, Refused) else reason)
    if isinstance(exc, (EOFError, pickle.UnpicklingError)):
        return Verdict(DAMAGED, reason)
    if isinstance(exc, OSError):
        return Verdict(DAMAGED if exc.errno == errno.ENOENT else FAILED, reason)
    if isinstance(exc, ValueError) and str(exc).startswith("Size mismatch"):
        return Verdict(DAMAGED, reason)  # the planner's check of each tensor's shape
    if (type(exc) is RuntimeError  # not torch.OutOfMemoryError, DistError and the like
            and any(m.lower() in str(exc).lower() for m in _DAMAGE_MESSAGES)):
        return Verdict(DAMAGED, reason)
    return Verdict(FAILED, reason)


def agree(local: Verdict, group) -> Verdict:
    """The verdict every rank acts on: refused if any rank refused, else failed if any rank
    failed, else damaged if any rank saw damage, else loaded. A rank can fail alone (its own
    memory, its own copy of the state)."""
    if not dist.is_initialized() or dist.get_world_size(group) == 1:
        return local
    everyone: list[Verdict | None] = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, local, group=group)
    for kind in DECIDING:
        for rank, verdict in enumerate(everyone):
            if verdict.kind == kind:
                return verdict if verdict.rank is not None else replace(verdict, rank=rank)
    return local


def describe(exc: BaseException) -> str:
    if isinstance(exc, torch.OutOfMemoryError):
        return f"out of memory ({_first_line(exc)})"
    return f"{type(exc).__name__}: {_first_line(exc)}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""
