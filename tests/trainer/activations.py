"""What a forward pass leaves in memory for backward, measured: the bytes of every storage an op
created during forward that is still alive when forward returns.

saved_tensors_hooks alone cannot see it all: activation checkpointing installs its own hooks
inside each block, and selective checkpointing keeps the outputs it saves in its own cache, out
of autograd's sight. A dispatch mode sees every op's output; a weak reference to its storage
tells, after forward, whether anything (autograd, a checkpoint's cache) still holds it.
"""

from __future__ import annotations

import gc

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class _Outputs(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.storages: list[tuple[StorageWeakRef, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                # One reference per output, not per address: a storage freed during forward
                # may leave its address to a later one.
                storage = t.untyped_storage()
                self.storages.append((StorageWeakRef(storage), storage.nbytes()))
        return out


def bytes_held_for_backward(model: torch.nn.Module, tokens: torch.Tensor) -> int:
    """Bytes that model(tokens, tokens) leaves alive for backward, parameters and buffers excluded
    (the loss scalar's few bytes included)."""
    existing = {t.untyped_storage()._cdata for t in (*model.parameters(), *model.buffers())}
    with _Outputs() as outputs:
        loss = model(tokens, tokens)
    gc.collect()
    # Live storages have distinct addresses: dedupe the views of one storage by address.
    alive = {ref.cdata: size for ref, size in outputs.storages if not ref.expired()}
    del loss
    return sum(size for cdata, size in alive.items() if cdata not in existing)
