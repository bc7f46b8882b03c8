"""Every import of torchvision goes through here, and so does anything that imports transformers.

torchvision 0.28.0 on PyPI is the CUDA build. Beside the CPU torch (this machine, CI) its C++
extension does not load, and `import torchvision` then fails with "operator torchvision::nms does
not exist": its fake-kernel registrations for `nms` and `qnms` assume the extension defined those
operators (NOTES.md). transformers imports torchvision whenever it is installed, so a bare
`import transformers` model load fails the same way.

`prepare()` loads the extension when it matches this torch (the container images install the
matching build from PyTorch's index, and get the real operators); otherwise it defines the two
operator schemas, with no kernels, so the import succeeds. Models, transforms and datasets work;
only the C++ operators (nms, roi_align, torchvision.io decoders) stay unavailable, and the
trainer uses none of them.
"""

from __future__ import annotations

import importlib.util
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

# The operator schemas torchvision's C++ extension defines (torchvision/csrc/ops/nms.cpp, qnms).
_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor",
)
_state: dict[str, object] = {}


def _extension_path(spec) -> Path | None:
    for folder in spec.submodule_search_locations or ():
        for suffix in EXTENSION_SUFFIXES:
            if (candidate := Path(folder) / f"_C{suffix}").is_file():
                return candidate
    return None


def prepare() -> bool:
    """Make `import torchvision` work; returns whether the C++ operators are real. Idempotent, and
    free (torch is not imported) where torchvision is not installed."""
    if "native" in _state:
        return bool(_state["native"])
    spec = importlib.util.find_spec("torchvision")
    if spec is None:
        _state["native"] = False
        return False
    import torch

    native = False
    path = _extension_path(spec)
    if path is not None:
        try:
            torch.ops.load_library(str(path))  # torchvision loads the same file; a second dlopen is a no-op
            native = True
        except (OSError, RuntimeError):
            native = False
    if not native:
        library = torch.library.Library("torchvision", "DEF")
        for schema in _SCHEMAS:
            library.define(schema)
        _state["library"] = library  # the definitions live as long as this object
    _state["native"] = native
    return native


def import_torchvision():
    prepare()
    import torchvision
    return torchvision
