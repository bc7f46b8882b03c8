"""Hugging Face weights in and out.

In: `load_hf_weights` fills a built (and, with several ranks, FSDP2-sharded) model from a
directory as `save_pretrained` writes it (config.json, *.safetensors, optionally an index). Each
rank reads only the rows of each tensor its shard holds, through safetensors' memory-mapped
slices, so a 70B model never exists whole on one rank or one host.

Out: `python -m trainer.hf export --checkpoint DIR --out DIR [--dtype bf16|fp32]` writes a
complete checkpoint of ours as config.json, sharded safetensors and their index, loadable by
transformers' `from_pretrained` and by serving engines. Tensors are read from the distributed
checkpoint a few at a time, so memory stays near one output shard. The tokenizer files of the
directory the run started from are copied along. The output appears whole or not at all.

Also: `tiny --out DIR` (a small random model in that format, for local runs and tests) and
`verify DIR` (load an export with transformers and run it).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import torch

from config.models import ModelConfig
from trainer.cli import Parser, UsageError, positive_float, run_main
from trainer.hf_config import TOKENIZER_FILES, hf_names, to_hf_config

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float32: "float32"}
INDEX = "model.safetensors.index.json"


# --- in -----------------------------------------------------------------------------------------

class SafetensorsDirectory:
    """Every tensor of a Hugging Face directory by name, opened lazily (memory-mapped)."""

    def __init__(self, directory: Path):
        from safetensors import safe_open
        self.directory, self._open, self._handles = directory, safe_open, {}
        index = directory / INDEX
        if index.is_file():
            self.files = {name: directory / f for name, f in json.loads(index.read_text())["weight_map"].items()}
        else:
            single = directory / "model.safetensors"
            if not single.is_file():
                raise UsageError("--init-from-hf", f"{directory} has neither {INDEX} nor model.safetensors")
            self.files = {name: single for name in self._handle(single).keys()}

    def _handle(self, path: Path):
        if path not in self._handles:
            self._handles[path] = self._open(str(path), framework="pt")
        return self._handles[path]

    def rows(self, name: str, dim: int, start: int, stop: int, shape: tuple[int, ...]) -> torch.Tensor:
        """Rows start:stop along `dim` of tensor `name`, after checking its full shape."""
        if name not in self.files:
            raise UsageError("--init-from-hf", f"{self.directory} lacks tensor {name}")
        sliced = self._handle(self.files[name]).get_slice(name)
        if tuple(sliced.get_shape()) != tuple(shape):
            raise UsageError("--init-from-hf", f"tensor {name} has shape {tuple(sliced.get_shape())}, the "
                                               f"config says {tuple(shape)}")
        index = (slice(None),) * dim + (slice(start, stop),)
        return sliced[index]


def _local_rows(param: torch.Tensor) -> tuple[torch.Tensor, int, int, int]:
    """(local tensor, sharded dim, first row, row count) of a parameter; a plain tensor is whole."""
    from torch.distributed.tensor import DTensor, Shard
    if not isinstance(param, DTensor):
        return param.data, 0, 0, param.shape[0]
    (placement,) = param.placements
    assert isinstance(placement, Shard), placement
    dim, size = placement.dim, param.shape[placement.dim]
    # DTensor's Shard follows torch.chunk: ceil(size / ranks) rows per rank, the last ones short or empty.
    ranks, rank = param.device_mesh.size(), param.device_mesh.get_local_rank()
    chunk = -(-size // ranks)
    start = min(rank * chunk, size)
    local = param.to_local()
    count = min(size, start + chunk) - start
    assert local.shape[dim] == count, (local.shape, dim, count)
    return local, dim, start, count


@torch.no_grad()
def load_hf_weights(model: torch.nn.Module, directory: str | Path, rt) -> None:
    """Overwrite every parameter of `model` with the Hugging Face checkpoint's values."""
    directory = Path(directory)
    cfg: ModelConfig = model.cfg
    source = SafetensorsDirectory(directory)
    names = hf_names(cfg)
    params = dict(model.named_parameters())
    if set(params) != set(names):
        raise AssertionError(f"model and name map disagree: {sorted(set(params) ^ set(names))[:4]}")
    for ours, theirs in names.items():
        param = params[ours]
        local, dim, start, count = _local_rows(param)
        if len(theirs) == 1:
            rows = source.rows(theirs[0], dim, start, start + count, param.shape)
        elif dim == 0:  # stacked experts sharded by expert: whole tensors of this rank's experts
            rows = torch.stack([source.rows(t, 0, 0, param.shape[1], param.shape[1:]) for t in theirs[start:start + count]])
        else:  # stacked experts sharded along their rows: those rows of every expert
            rows = torch.stack([source.rows(t, dim - 1, start, start + count, param.shape[1:]) for t in theirs])
        local.copy_(rows.to(local.dtype))
    model.init_buffers(rt.device)
    if rt.is_main:
        print(f"Initialised {len(names)} tensors from Hugging Face checkpoint {directory}", flush=True)


# --- out ----------------------------------------------------------------------------------------

def find_checkpoint(path: Path) -> tuple[Path, Path]:
    """(root holding model.json, newest complete step folder) for a root or a step folder."""
    from trainer.checkpoint import MARKER, MODEL_FILE, list_steps, step_dir
    if (path / MARKER).is_file():
        root, step = path.parent, path
    else:
        steps = list_steps(path)
        if not steps:
            raise UsageError("--checkpoint", f"{path} holds no complete checkpoint (step-NNNNNNNN/{MARKER})")
        root, step = path, step_dir(path, steps[-1])
    if not (root / MODEL_FILE).is_file():
        raise UsageError("--checkpoint", f"{root} has no {MODEL_FILE}; it was written by an older trainer that did "
                                         "not record its model")
    return root, step


def _plan_shards(cfg: ModelConfig, max_bytes: float, element: int) -> list[list[str]]:
    """Our parameter names grouped into output files of at most `max_bytes` (one tensor may exceed)."""
    from trainer.model import Transformer
    with torch.device("meta"):
        shapes = {n: p.numel() for n, p in Transformer(cfg).named_parameters()}
    shards, current, size = [], [], 0
    for name in hf_names(cfg):
        nbytes = shapes[name] * element
        if current and size + nbytes > max_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(name)
        size += nbytes
    return shards + ([current] if current else [])


def _read(step: Path, cfg: ModelConfig, names: list[str]) -> dict[str, torch.Tensor]:
    import torch.distributed.checkpoint as dcp
    from trainer.model import Transformer
    with torch.device("meta"):
        meta = dict(Transformer(cfg).named_parameters())
    wanted = {n: torch.empty(meta[n].shape, dtype=torch.float32) for n in names}
    with warnings.catch_warnings():  # one process reading on purpose: DCP's warning says so
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load({"app": {"model": wanted}}, checkpoint_id=str(step), no_dist=True)
    return wanted


def export(checkpoint: Path, out: Path, dtype: torch.dtype, max_shard_gb: float = 5.0) -> Path:
    from safetensors.torch import save_file
    root, step = find_checkpoint(checkpoint)
    record = json.loads((root / "model.json").read_text())
    cfg = ModelConfig.from_dict(record["model"])
    if out.exists() and any(out.iterdir()):
        raise UsageError("--out", f"{out} exists and is not empty")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        element = torch.finfo(dtype).bits // 8
        groups = _plan_shards(cfg, max_shard_gb * 1e9, element)
        names, weight_map, total = hf_names(cfg), {}, 0
        for i, group in enumerate(groups):
            filename = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
            tensors = {}
            for ours, value in _read(step, cfg, group).items():
                parts = value.unbind(0) if len(names[ours]) > 1 else (value,)
                for theirs, part in zip(names[ours], parts):
                    tensors[theirs] = part.to(dtype).contiguous()
                    weight_map[theirs] = filename
                    total += part.numel() * element
            save_file(tensors, str(staging / filename), metadata={"format": "pt"})
        (staging / INDEX).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map},
                                                indent=2) + "\n")
        (staging / "config.json").write_text(json.dumps(to_hf_config(cfg, DTYPE_NAMES[dtype]), indent=2) + "\n")
        source = record.get("init_from_hf")
        for name in TOKENIZER_FILES:
            if source and (Path(source) / name).is_file():
                shutil.copy2(Path(source) / name, staging / name)
        if out.exists():
            out.rmdir()
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return step


def main(argv=None) -> int:
    p = Parser(prog="python -m trainer.hf", description="Hugging Face checkpoints in and out.")
    sub = p.add_subparsers(dest="command", required=True)
    exp = sub.add_parser("export", help="a checkpoint of ours as a Hugging Face directory", formatter_class=p.formatter_class)
    exp.add_argument("--checkpoint", required=True, help="a checkpoint directory (newest complete step) or a step folder")
    exp.add_argument("--out", required=True, help="the Hugging Face directory to write (must not exist or be empty)")
    exp.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="tensor type of the exported weights")
    exp.add_argument("--max-shard-gb", type=positive_float, default=5.0, help="largest safetensors file")
    tiny = sub.add_parser("tiny", help="write a small random model as a Hugging Face directory", formatter_class=p.formatter_class)
    tiny.add_argument("--out", required=True)
    tiny.add_argument("--model", default="tiny", help="entry of the model table")
    ver = sub.add_parser("verify", help="load a Hugging Face directory with transformers and run it", formatter_class=p.formatter_class)
    ver.add_argument("directory")
    for s in (exp, tiny, ver):
        s.error = p.error  # the same one-line errors as the top level
    args = p.parse_args(argv)
    if args.command == "export":
        checkpoint, out = Path(args.checkpoint), Path(args.out)
        if not checkpoint.is_dir():
            raise UsageError("--checkpoint", f"{checkpoint} is not a directory")
        step = export(checkpoint, out, DTYPES[args.dtype], args.max_shard_gb)
        print(f"Exported {step} to {out} ({args.dtype})")
    elif args.command == "tiny":
        from trainer.hf_tiny import write_tiny
        write_tiny(Path(args.out), args.model)
        print(f"Wrote a random {args.model} Hugging Face model to {args.out}")
    else:
        from trainer.hf_tiny import verify
        print(verify(Path(args.directory)))
    return 0


if __name__ == "__main__":
    run_main(main)
