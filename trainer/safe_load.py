"""Load checkpoints and snapshots without unpickling code from shared storage.

Checkpoints live on FSx, which every pod of the cluster can write. torch.distributed.checkpoint
(torch 2.13) reads two things with full pickle: each checkpoint's `.metadata` file
(filesystem.py FileSystemReader.read_metadata: `pickle.load`) and every non-tensor value, such
as an optimizer's hyper-parameters (default_planner.py DefaultLoadPlanner.load_bytes:
`torch.load(..., weights_only=False)`). A crafted file in either place runs its code in the next
pod that resumes. `load` reads the metadata with an unpickler that builds only DCP's own metadata
records, and the values with `weights_only=True`; the tensors themselves DCP already reads with
`weights_only=True`. Anything else is refused with UnsafeCheckpoint, before any of it runs.
Single-file snapshots use torch.load(weights_only=True) directly; `weights_only_refusal` turns
its refusal into one line.
"""

from __future__ import annotations

import io
import pickle
import re
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

from config.paths import open_regular

# What DCP's metadata pickle refers to (found by listing the globals of checkpoints that torch
# 2.13 writes for our models, optimizers and progress records): its record dataclasses, tensor
# shapes, dtypes and layouts, and the checkpoint's path. None of them can run a command.
_METADATA_CLASSES = {
    "torch.distributed.checkpoint.metadata": {
        "Metadata", "StorageMeta", "MetadataIndex", "TensorProperties", "TensorStorageMetadata",
        "BytesStorageMetadata", "ChunkStorageMetadata", "_MEM_FORMAT_ENCODING"},
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size"},
    "pathlib": {"Path", "PosixPath", "PurePosixPath"},
}


class UnsafeCheckpoint(pickle.UnpicklingError):
    """A checkpoint file asks for something other than data; nothing of it was run."""


def weights_only_refusal(exc: pickle.UnpicklingError) -> str:
    """Why torch.load(weights_only=True) refused a file, in one line: the global a crafted file
    names, or what made the file unreadable."""
    text = str(exc)
    if m := re.search(r"Unsupported global: GLOBAL (\S+)", text):
        return f"it refers to {m.group(1)}, which is neither a tensor nor plain data; refused without running it"
    m = re.search(r"WeightsUnpickler error:\s*([^\n]+)", text)
    return f"not a file torch.save wrote ({(m.group(1) if m else text.strip().splitlines()[-1])[:160]})"


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if name in _METADATA_CLASSES.get(module, ()):
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise UnsafeCheckpoint(f"unsafe checkpoint: its metadata refers to {module}.{name}, which a checkpoint "
                               "never holds; refused without running it")


def read_metadata(stream: io.BufferedIOBase) -> Metadata:
    metadata = _MetadataUnpickler(stream).load()
    if not isinstance(metadata, Metadata):
        raise UnsafeCheckpoint(f"unsafe checkpoint: its metadata is a {type(metadata).__name__}, not DCP's Metadata")
    return metadata


class SafeFileSystemReader(FileSystemReader):
    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        # As FileSystemReader.read_metadata (torch 2.13), with the restricted unpickler, and opened
        # as a regular file only: a named pipe there held `trainer.hf export` in open() for ever.
        with open_regular(self._get_metadata_path(kwargs.get("rank"))) as stream:
            metadata = read_metadata(stream)
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class SafeLoadPlanner(DefaultLoadPlanner):
    def load_bytes(self, read_item, value: io.BytesIO) -> None:
        # As DefaultLoadPlanner.load_bytes (torch 2.13), with weights_only=True.
        try:
            obj = torch.load(value, weights_only=True)
        except pickle.UnpicklingError as exc:
            raise UnsafeCheckpoint(f"unsafe checkpoint: its value {read_item.dest_index.fqn}: "
                                   f"{weights_only_refusal(exc)}") from None
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
        else:
            self.state_dict[read_item.dest_index.fqn] = obj


def load(state: dict[str, Any], checkpoint_id: str, **kwargs: Any) -> None:
    """dcp.load of the checkpoint folder `checkpoint_id`, reading no pickled code."""
    dcp.load(state, checkpoint_id=checkpoint_id, storage_reader=SafeFileSystemReader(checkpoint_id),
             planner=SafeLoadPlanner(), **kwargs)
