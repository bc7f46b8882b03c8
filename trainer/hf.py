"""Hugging Face weights in and out.

In: `load_hf_weights` fills a built (and, with several ranks, FSDP2-sharded) model from a
directory as `save_pretrained` writes it (config.json, *.safetensors, optionally an index). Each
rank reads only the rows of each tensor its shard holds, through safetensors' memory-mapped
slices, so a 70B model never exists whole on one rank or one host.

Out: `python -m trainer.hf export --checkpoint DIR --out DIR [--dtype bf16|fp32]` writes a
complete checkpoint of ours as config.json, sharded safetensors and their index, loadable by
transformers' `from_pretrained` and by serving engines. Tensors are read from the distributed
checkpoint a few at a time, so memory stays near one output shard. The tokenizer files of the
directory the run started from (or of --tokenizer DIR) are copied along, and its bos/eos/pad ids
go into config.json and generation_config.json. The output appears whole or not at all: SIGTERM
or Ctrl-C removes what was written and exits 143 or 130 in one line.

Also: `tiny --out DIR` (a small random model in that format, for local runs and tests) and
`verify DIR` (load an export with transformers and run it).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import sys
import warnings
from dataclasses import MISSING
from pathlib import Path

import torch
from torch.distributed.checkpoint.api import CheckpointException

from config.models import ModelConfig
from config.options import positive_float
from trainer.cli import (Parser, Stopped, UsageError, WorkerExit, checked_path, output_in_place, run_main,
                         staging_folder, stopped_by_signals)
from config.paths import exists, file_status, input_dir, is_dir, is_plain_name, read_json
from trainer.hf_config import (HF_KEYS, TOKENIZER_FILES, hf_names, id_count, read_tokenizer, special_token_ids,
                               to_hf_config)

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
            weight_map = checked_path("--init-from-hf", read_json, index).get("weight_map")
            if not isinstance(weight_map, dict):
                raise UsageError("--init-from-hf", f"{index} has no weight_map object")
            outside = next(((name, f) for name, f in weight_map.items() if not is_plain_name(f)), None)
            if outside is not None:
                raise UsageError("--init-from-hf", f"{index}: weight_map must name files in its own folder (no '/', "
                                                   f"'.' or '..'), got {outside[1]!r} for {outside[0]}")
            self.files = {name: directory / f for name, f in weight_map.items()}
            for file in sorted(set(self.files.values())):  # safetensors' open() waits on a named pipe for ever
                checked_path("--init-from-hf", file_status, file)
        else:
            single = directory / "model.safetensors"
            if not single.is_file():
                raise UsageError("--init-from-hf", f"{directory} has neither {INDEX} nor model.safetensors")
            self.files = {name: single for name in self._handle(single).keys()}

    def _handle(self, path: Path):
        if path not in self._handles:
            try:
                self._handles[path] = self._open(str(path), framework="pt")
            except Exception as exc:  # safetensors raises its own untyped errors (a short or foreign file)
                raise UsageError("--init-from-hf", f"{path} is not a safetensors file that loads "
                                                   f"({type(exc).__name__}: {exc})") from None
        return self._handles[path]

    def _slice(self, name: str):
        if name not in self.files:
            raise UsageError("--init-from-hf", f"{self.directory} lacks tensor {name}")
        try:
            return self._handle(self.files[name]).get_slice(name)
        except Exception as exc:  # an index that puts the tensor in a file not holding it
            raise UsageError("--init-from-hf", f"{self.files[name]} does not hold {name} ({exc})") from None

    def shape(self, name: str) -> tuple[int, ...]:
        """The shape in the file's header; no tensor data is read."""
        return tuple(self._slice(name).get_shape())

    def rows(self, name: str, dim: int, start: int, stop: int, shape: tuple[int, ...]) -> torch.Tensor:
        """Rows start:stop along `dim` of tensor `name`, after checking its full shape."""
        sliced = self._slice(name)
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


def _shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Our parameters' shapes, from a model built on the meta device: nothing is allocated."""
    from trainer.model import Transformer
    with torch.device("meta"):
        return {n: tuple(p.shape) for n, p in Transformer(cfg).named_parameters()}


# The fields that size each kind of parameter (by a part of its name) besides dim, which sizes all.
_SIZED_BY = {"tok_embeddings.": ("vocab_size",), "output.": ("vocab_size",), ".wk.": ("n_kv_heads",),
             ".wv.": ("n_kv_heads",), ".router.": ("n_experts",), "feed_forward.w": ("n_experts", "ffn_dim")}


def _field_setting(cfg: ModelConfig, ours: str, expected: tuple[int, ...], actual: tuple[int, ...]) -> str | None:
    """The field of `cfg` that sets the first size in which parameter `ours`'s `expected` shape
    differs from `actual`; where it and dim give the same size, it (the embedding, compared
    first, has settled dim by then)."""
    sizes = {"vocab_size": cfg.vocab_size, "n_kv_heads": cfg.n_kv_heads * cfg.head_dim, "n_experts": cfg.n_experts,
             "ffn_dim": cfg.ffn_dim, "dim": cfg.dim}
    fields = [f for part, named in _SIZED_BY.items() if part in ours for f in named] + ["dim"]
    differing = [e for e, a in zip(expected, actual) if e != a] if len(expected) == len(actual) else []
    return next((f for f in fields if differing and sizes[f] == differing[0]), None)


def check_hf_weights(directory: str | Path, cfg: ModelConfig) -> None:
    """Compare the shape `cfg` gives each tensor with the safetensors headers (no tensor is read),
    before a model of that size is built: a config.json claiming 2^20-wide layers beside small
    weights died in the allocator, or was OOM-killed when the claim fitted just under the RAM."""
    directory = Path(directory)
    source, config = SafetensorsDirectory(directory), directory / "config.json"
    # The counts first: the name map and the meta model grow with them.
    for key, count, name in (("num_hidden_layers", cfg.n_layers,
                              f"model.layers.{cfg.n_layers - 1}.input_layernorm.weight"),
                             ("num_local_experts", cfg.n_experts,
                              f"model.layers.0.block_sparse_moe.experts.{cfg.n_experts - 1}.w1.weight")):
        if count and name not in source.files:
            raise UsageError("--init-from-hf", f"{config}: {key} is {count} but {directory} holds no {name}")
    shapes = _shapes(cfg)
    for ours, theirs in hf_names(cfg).items():
        expected = shapes[ours][1:] if len(shapes[ours]) == 3 else shapes[ours]  # one tensor per expert
        for name in theirs:
            actual = source.shape(name)
            if actual != expected:
                field = _field_setting(cfg, ours, expected, actual)
                what = f"{HF_KEYS[field]} {getattr(cfg, field)}" if field else "it"
                if field == "n_kv_heads":
                    # k/v rows are kv heads x hidden_size / heads, and q's are hidden_size whatever
                    # the head count: the weights cannot tell a wrong kv head count from a wrong head count.
                    what += f" with {HF_KEYS['n_heads']} {cfg.n_heads}"
                raise UsageError("--init-from-hf", f"{config}: {what} does not fit the weights: {name} in "
                                                   f"{source.files[name]} has shape {actual}, the config makes it "
                                                   f"{expected}")


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
    # Weights that config.json does not describe (more layers or experts than it says) would be
    # dropped without a word. Not weights: older conversions' rotary buffers, and the output
    # layer that a tied checkpoint may keep beside the embedding it shares.
    read = {t for theirs in names.values() for t in theirs}
    unread = sorted(name for name in source.files if name not in read and not name.endswith(".rotary_emb.inv_freq")
                    and not (cfg.tie_embeddings and name == "lm_head.weight"))
    if unread:
        raise UsageError("--init-from-hf", f"{directory} holds {len(unread)} tensors that no parameter of the model "
                                           f"reads ({', '.join(unread[:3])}{', ...' if len(unread) > 3 else ''}); "
                                           "its config.json does not describe these weights")
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


_FIELD_TYPES = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,),
                "int | None": (int, type(None)), "RopeScaling | None": (dict, type(None))}


def model_from_record(record_file: Path) -> tuple[ModelConfig, str | None]:
    """(model, init_from_hf) of a checkpoint's model.json; UsageError naming what is wrong. The
    file sits on shared storage and may be hand-edited: every field is checked before use."""
    from dataclasses import fields
    record = checked_path("--checkpoint", read_json, record_file)
    model, source = record.get("model"), record.get("init_from_hf")
    where = str(record_file)
    if not isinstance(model, dict):
        raise UsageError("--checkpoint", f"{where}: 'model' must be an object, got {type(model).__name__}")
    if source is not None and not isinstance(source, str):
        raise UsageError("--checkpoint", f"{where}: 'init_from_hf' must be a path, got {type(source).__name__}")
    for f in fields(ModelConfig):
        allowed = _FIELD_TYPES[f.type]
        value = model.get(f.name)
        if (f.name in model or f.default is MISSING) and (
                not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed)):
            raise UsageError("--checkpoint", f"{where}: model.{f.name} must be {f.type}, got {value!r}")
        if f.type == "int" and f.default is MISSING and value < 1:
            raise UsageError("--checkpoint", f"{where}: model.{f.name} must be at least 1, got {value}")
    scaling = model.get("rope_scaling") or {}
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in scaling.values()):
        raise UsageError("--checkpoint", f"{where}: model.rope_scaling must hold numbers, got {scaling!r}")
    try:
        return ModelConfig.from_dict(model), source
    except (TypeError, ValueError) as exc:
        raise UsageError("--checkpoint", f"{where}: {exc}") from None


def tokenizer_files(source: Path, field: str, vocab_size: int) -> tuple[list[Path], dict]:
    """The tokenizer files of Hugging Face directory `source` and its bos/eos/pad ids."""
    ids = special_token_ids(source, field)
    for key, value in ids.items():
        if any(i >= vocab_size for i in (value if isinstance(value, list) else [value])):
            raise UsageError(field, f"{source}: {key} {value} is outside the model's vocabulary of {vocab_size}")
    file = source / "tokenizer.json"
    if file.is_file():
        top = id_count(read_tokenizer(file, field)) - 1
        if top >= vocab_size:  # the export's first use would index past its embedding
            raise UsageError(field, f"{file}: its token ids go up to {top}, outside the model's vocabulary of "
                                    f"{vocab_size}")
    return [source / name for name in TOKENIZER_FILES if (source / name).is_file()], ids


def _plan_shards(cfg: ModelConfig, max_bytes: float, element: int) -> list[list[str]]:
    """Our parameter names grouped into output files of at most `max_bytes` (one tensor may exceed)."""
    shapes = _shapes(cfg)
    shards, current, size = [], [], 0
    for name in hf_names(cfg):
        nbytes = math.prod(shapes[name]) * element
        if current and size + nbytes > max_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(name)
        size += nbytes
    return shards + ([current] if current else [])


def check_record(step: Path, record_file: Path, cfg: ModelConfig) -> None:
    """Compare model.json's shapes with the checkpoint's metadata, and its tensors' bytes with the
    data files', before _read allocates them: a hand-edited model.json of 2^20-wide layers died in
    the allocator (or was OOM-killed when the claim fitted just under the RAM)."""
    from trainer.safe_load import SafeFileSystemReader
    try:
        saved = SafeFileSystemReader(str(step)).read_metadata().state_dict_metadata
    except Exception as exc:
        raise UsageError("--checkpoint", f"{step} cannot be read ({_first_cause(exc)})") from None
    last = f"layers.{cfg.n_layers - 1}.attention_norm.weight"  # first: the meta model grows with n_layers
    if f"app.model.{last}" not in saved:
        raise UsageError("--checkpoint", f"{record_file}: model.n_layers is {cfg.n_layers} but {step} holds no {last}")
    needed = 0
    for ours, expected in _shapes(cfg).items():
        entry = saved.get(f"app.model.{ours}")
        if entry is None or not hasattr(entry, "size"):
            continue  # _read says what is missing
        actual = tuple(entry.size)
        if actual != expected:
            field = _field_setting(cfg, ours, expected, actual)
            what = f"model.{field} {getattr(cfg, field)}" if field else "it"
            raise UsageError("--checkpoint", f"{record_file}: {what} does not fit the checkpoint: {ours} in {step} "
                                             f"has shape {actual}, model.json makes it {expected}")
        needed += math.prod(actual) * entry.properties.dtype.itemsize
    # The metadata is a file too: it and model.json may claim the same absurd shapes.
    held = sum(f.stat().st_size for f in step.glob("*.distcp"))
    if held < needed:
        raise UsageError("--checkpoint", f"{step} cannot be read (its data files hold {held:,} bytes, fewer than "
                                         f"the {needed:,} its model's tensors take)")


def _read(step: Path, cfg: ModelConfig, names: list[str]) -> dict[str, torch.Tensor]:
    from trainer import safe_load
    shapes = _shapes(cfg)
    wanted = {n: torch.empty(shapes[n], dtype=torch.float32) for n in names}
    with warnings.catch_warnings():  # one process reading on purpose: DCP's warning says so
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        # DCP logs each failed metadata read with its traceback on the root logger; the one line
        # below says what failed.
        quiet = logging.root.manager.disable
        logging.disable(logging.WARNING)
        try:
            safe_load.load({"app": {"model": wanted}}, str(step), no_dist=True)
        except (Exception, CheckpointException) as exc:  # the latter is a BaseException
            raise UsageError("--checkpoint", f"{step} cannot be read ({_first_cause(exc)})") from None
        finally:
            logging.disable(quiet)
    return wanted


def _first_cause(exc: BaseException) -> str:
    """One line for an error of DCP, which wraps each rank's error with its traceback."""
    if isinstance(exc, CheckpointException) and exc.failures:
        exc = next(iter(exc.failures.values()))[0]
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160] if text else ''}"


def _staging(out: Path) -> Path:
    """An empty folder beside `out`, renamed onto it when the export is whole."""
    if checked_path("--out", exists, out) and not checked_path("--out", is_dir, out):
        raise UsageError("--out", f"{out} exists and is not a folder")
    if checked_path("--out", exists, out) and any(checked_path("--out", input_dir, out).iterdir()):
        raise UsageError("--out", f"{out} exists and is not empty")
    return staging_folder(out, "--out")


def export(checkpoint: Path, out: Path, dtype: torch.dtype, max_shard_gb: float = 5.0,
           tokenizer: Path | None = None) -> tuple[Path, str | None]:
    """(step exported, a note when the export has no tokenizer). The tokenizer files and the
    bos/eos/pad ids come from `tokenizer`, else from the Hugging Face directory the run started
    from (model.json's init_from_hf)."""
    from safetensors.torch import save_file

    from trainer.checkpoint import MODEL_FILE
    root, step = find_checkpoint(checkpoint)
    cfg, started_from = model_from_record(root / MODEL_FILE)
    check_record(step, root / MODEL_FILE, cfg)
    note, copies, token_ids = None, [], {}
    if tokenizer is not None:
        copies, token_ids = tokenizer_files(tokenizer, "--tokenizer", cfg.vocab_size)
    elif started_from is None:
        note = "the run did not start from a Hugging Face directory (model.json has no init_from_hf)"
    elif not checked_path("--checkpoint", is_dir, started_from):
        note = f"{started_from}, the Hugging Face directory the run started from, is not a directory here"
    else:
        copies, token_ids = tokenizer_files(Path(started_from), f"--checkpoint: init_from_hf {started_from}",
                                            cfg.vocab_size)
    if note is None and not copies:
        note = f"{tokenizer or started_from} holds no tokenizer files ({', '.join(TOKENIZER_FILES)})"
    if note:
        note += "; exported without a tokenizer; give --tokenizer DIR (a Hugging Face directory) to add one"
    staging = _staging(out)
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
        config = to_hf_config(cfg, DTYPE_NAMES[dtype], token_ids)
        (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        for file in copies:
            shutil.copy2(file, staging / file.name)
        if token_ids and not (staging / "generation_config.json").exists():
            # What generate() stops on; a source's own generation_config.json (copied) is kept as is.
            (staging / "generation_config.json").write_text(json.dumps(token_ids, indent=2) + "\n")
        if out.exists():
            out.rmdir()
        output_in_place()
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return step, note


def main(argv=None) -> int:
    p = Parser(prog="python -m trainer.hf", description="Hugging Face checkpoints in and out.")
    sub = p.add_subparsers(dest="command", required=True)
    exp = sub.add_parser("export", help="a checkpoint of ours as a Hugging Face directory", formatter_class=p.formatter_class)
    exp.add_argument("--checkpoint", required=True, help="a checkpoint directory (newest complete step) or a step folder")
    exp.add_argument("--out", required=True, help="the Hugging Face directory to write (must not exist or be empty)")
    exp.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="tensor type of the exported weights")
    exp.add_argument("--max-shard-gb", type=positive_float, default=5.0, help="largest safetensors file")
    exp.add_argument("--tokenizer", default=None,
                     help="Hugging Face directory whose tokenizer files and bos/eos ids to export "
                          "(default: the one the run started from, --init-from-hf)")
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
        if not checked_path("--checkpoint", is_dir, checkpoint):
            raise UsageError("--checkpoint", f"{checkpoint} is not a directory")
        tokenizer = Path(args.tokenizer) if args.tokenizer else None
        if tokenizer is not None and not checked_path("--tokenizer", is_dir, tokenizer):
            raise UsageError("--tokenizer", f"{tokenizer} is not a directory (a Hugging Face model directory "
                                            "holding tokenizer.json and tokenizer_config.json)")
        try:
            # Installed before the staging folder exists, so that no signal can leave one behind
            # (export removes it on any exception).
            with stopped_by_signals():
                step, note = export(checkpoint, out, DTYPES[args.dtype], args.max_shard_gb, tokenizer)
        except Stopped as stop:
            raise WorkerExit(f"stopped by {stop.name} before it finished; nothing was written to {out}",
                             stop.code) from None
        if note:
            print(f"note: {note}", file=sys.stderr)
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
