"""`python -m trainer.data prepare`: text into token shards, streaming.

Inputs are plain text (*.txt: one document per file), JSON lines (*.jsonl, *.json, and their
.gz forms, as C4 ships: one document per line, its text under --text-field) and Parquet
(*.parquet: one document per row of the --text-field column). Nothing is read whole: text files
go in blocks of lines, JSON lines and Parquet row batches a few hundred documents at a time, and
tokens go straight to the open shard file, so a corpus larger than memory works. The tokenizer
is a `tokenizer.json` or a Hugging Face model directory holding one. Shards are written into a
staging folder that replaces --output only when every shard and meta.json are on disk.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import zlib
from array import array
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path

from config.options import positive_int
from config.paths import exists, input_dir, is_dir, is_file, walk
from trainer.cli import (Parser, Stopped, UsageError, WorkerExit, checked_path, output_in_place, stale_staging,
                         staging_folder, stopped_by_signals)
from trainer.hf_config import id_count, read_tokenizer
from trainer.log import warn

SUFFIXES = (".txt", ".jsonl", ".json", ".jsonl.gz", ".json.gz", ".parquet")
EOS_CANDIDATES = ("<|end_of_text|>", "</s>", "<|endoftext|>", "<eos>")
BATCH_DOCUMENTS = 256  # documents tokenized per call (the tokenizer parallelises over a batch)
# A batch of JSON lines ends once its lines pass this many bytes, whatever their count: BATCH_DOCUMENTS
# lines of up to LINE_LIMIT_BYTES each are 16 GiB (a gzip of about 18 MB). Ordinary documents (a few
# KB) never reach it, so their batches, and how fast they go, stay as they were.
BATCH_BYTES = 16 << 20
TEXT_BLOCK_BYTES = 1 << 20  # plain text is read and tokenized a block of whole lines at a time
# The longest line read, a JSON line (one document) or a line of text: a book is a few MB. A gzip
# of 70 KB inflates to a line of 64 MiB, and a line is held in memory whole.
LINE_LIMIT_BYTES = 64 << 20
# The most a Parquet file's text column may decode to, counting each document as at least one byte,
# times the file's size: gzip's ceiling (about 1,030). Real text compresses 3 to 10 times; past this
# it is a bomb (a zstd page of one long repeated value, or a dictionary entry repeated by an RLE run
# of millions of rows), which would take the Job's memory or hours for a file of a few KB.
PARQUET_EXPANSION = 1024


def _kind(path: Path) -> str | None:
    name = path.name.lower()
    return next((s for s in SUFFIXES if name.endswith(s)), None)


def _files_below(folder: Path) -> list[Path]:
    found = (Path(root, name) for root, _, names in walk(folder) for name in names)
    return [f for f in found if _kind(f) and f.is_file()]


def find_inputs(inputs: list[Path]) -> list[Path]:
    files = []
    for p in inputs:
        if checked_path("--input", is_file, p):
            if _kind(p) is None:
                raise UsageError("--input", f"{p}: unsupported file type (supported: {', '.join(SUFFIXES)})")
            files.append(p)
        elif checked_path("--input", is_dir, p):
            files += checked_path("--input", _files_below, p)
    for f in files:  # opened once before any output exists: a refusal mid-run read as a failed write
        try:
            open(f, "rb").close()
        except OSError as exc:
            raise UsageError("--input", f"cannot read {f} ({exc.strerror or exc})") from None
    return sorted(files)


def load_tokenizer(path: Path):
    file = path / "tokenizer.json" if checked_path("--tokenizer", is_dir, path) else path
    if not file.is_file():
        raise UsageError("--tokenizer", f"{path} is neither a tokenizer.json nor a directory holding one")
    return read_tokenizer(file, "--tokenizer"), file


def documents(path: Path, text_field: str, progress) -> Iterator[list[str]]:
    """Batches of texts from one file: every JSON line and Parquet row is a document; a plain
    text file is one document, yielded in blocks of whole lines."""
    kind = _kind(path)
    if kind == ".txt":
        with open(path, "rb") as f:
            while block := _read_block(f, path):
                progress(len(block))
                yield [block.decode("utf-8", errors="replace")]
        return
    if kind == ".parquet":
        yield from _parquet_documents(path, text_field, progress)
        return
    number = 0
    try:
        # One handle: raw.tell() is the progress in the file's own bytes, compressed or not.
        with open(path, "rb") as raw, (gzip.open(raw, "rb") if kind.endswith(".gz") else nullcontext(raw)) as f:
            batch, last, size = [], 0, 0
            while line := f.readline(LINE_LIMIT_BYTES + 1):
                number += 1
                if len(line) > LINE_LIMIT_BYTES:
                    raise UsageError("--input", f"{path}:{number}: a line longer than {LINE_LIMIT_BYTES:,} bytes")
                size += len(line)
                line = line.decode("utf-8")  # per line, so an error names its line
                if not line.strip():
                    continue
                try:
                    text = json.loads(line)[text_field]
                except (ValueError, KeyError, TypeError, RecursionError):  # the last: brackets nested past the parser
                    raise UsageError("--input", f"{path}:{number}: not a JSON object with a {text_field!r} field "
                                                "(see --text-field)") from None
                if not isinstance(text, str):
                    raise UsageError("--input", f"{path}:{number}: its {text_field!r} field must be a string, got "
                                                f"{'null' if text is None else type(text).__name__}")
                batch.append(text)
                if len(batch) == BATCH_DOCUMENTS or size >= BATCH_BYTES:
                    progress(raw.tell() - last)
                    last = raw.tell()
                    yield batch
                    batch, size = [], 0
            progress(raw.tell() - last)
            if batch:
                yield batch
    # Only reading happens in this block: the consumer's errors (a full disk) stay its own.
    except UnicodeDecodeError as exc:
        raise UsageError("--input", f"{path}:{number}: not UTF-8 text ({exc.reason})") from None
    except EOFError:
        raise UsageError("--input", f"{path}: truncated: the gzip stream ends after line {number} without its "
                                    "end marker") from None
    except gzip.BadGzipFile as exc:
        raise UsageError("--input", f"{path}: not a gzip file ({exc})") from None
    except zlib.error as exc:
        raise UsageError("--input", f"{path}: corrupt gzip data after line {number} ({exc})") from None
    except OSError as exc:
        raise UsageError("--input", f"{path}: unreadable after line {number} ({exc.strerror or exc})") from None


def _parquet_documents(path: Path, text_field: str, progress) -> Iterator[list[str]]:
    """Row batches of the text column, bounded before anything is decoded by the metadata's
    claims (sizes, rows, the column's type) and while decoding by what the batches really hold."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path)
    except Exception as exc:
        raise UsageError("--input", f"{path} is not a Parquet file ({exc})") from None
    if text_field not in table.schema_arrow.names:
        raise UsageError("--text-field", f"{path} has no column {text_field!r} (columns: "
                                         f"{', '.join(table.schema_arrow.names)})")
    kind = table.schema_arrow.field(text_field).type
    values = kind.value_type if pa.types.is_dictionary(kind) else kind
    if not (pa.types.is_string(values) or pa.types.is_large_string(values) or pa.types.is_string_view(values)):
        raise UsageError("--input", f"{path}: its {text_field!r} column holds {kind}, expected strings "
                                    "(see --text-field)")
    meta, size = table.metadata, path.stat().st_size
    bound = PARQUET_EXPANSION * size

    def bomb(claim: str) -> UsageError:
        return UsageError("--input", f"{path}: {claim}, more than {PARQUET_EXPANSION:,} times the file's {size:,} "
                                     "bytes (a Parquet bomb, or damaged metadata)")

    leaf = next(i for i in range(meta.num_columns) if meta.schema.column(i).path == text_field)
    claimed = sum(meta.row_group(g).column(leaf).total_uncompressed_size for g in range(meta.num_row_groups))
    if claimed > bound:
        raise bomb(f"its {text_field!r} column claims {claimed:,} bytes of text")
    if meta.num_rows > bound:
        raise bomb(f"its {text_field!r} column claims {meta.num_rows:,} rows")
    rows, rows_done, reported, decoded = max(1, meta.num_rows), 0, 0, 0
    batches = table.iter_batches(batch_size=BATCH_DOCUMENTS, columns=[text_field])
    while True:
        try:
            batch = next(batches, None)
        except Exception as exc:  # pyarrow's errors for a damaged page (ArrowInvalid, OSError, ...)
            raise UsageError("--input", f"{path}: damaged Parquet data ({str(exc).splitlines()[0][:160]})"
                             ) from None
        if batch is None:
            return
        column = batch.column(0)
        # Measured in Arrow's buffers, before a Python string of any of them exists.
        lengths = (pc.take(pc.binary_length(column.dictionary), column.indices) if pa.types.is_dictionary(column.type)
                   else pc.binary_length(column))
        longest = pc.max(lengths).as_py() or 0
        if longest > LINE_LIMIT_BYTES:
            row = rows_done + pc.index(lengths, longest).as_py() + 1
            raise UsageError("--input", f"{path}: row {row:,}: a document longer than {LINE_LIMIT_BYTES:,} bytes")
        decoded += (pc.sum(lengths).as_py() or 0) + batch.num_rows
        if decoded > bound:
            raise bomb(f"decodes to {decoded:,} bytes of text")
        texts = [t for t in column.to_pylist() if t]
        rows_done += batch.num_rows
        # Whole bytes in proportion to rows, so the file's share of the bar adds up exactly.
        progress(size * rows_done // rows - reported)
        reported = size * rows_done // rows
        yield texts


def _read_block(f, path: Path) -> bytes:
    """The next block of whole lines of a text file."""
    try:
        block = f.read(TEXT_BLOCK_BYTES)
        rest = f.readline(LINE_LIMIT_BYTES + 1) if block else block  # end on a line boundary
    except OSError as exc:
        raise UsageError("--input", f"{path}: unreadable ({exc.strerror or exc})") from None
    if len(block) - 1 - block.rfind(b"\n") + len(rest) > LINE_LIMIT_BYTES:  # the line the block ends in, whole
        raise UsageError("--input", f"{path}: a line longer than {LINE_LIMIT_BYTES:,} bytes")
    return block + rest


class ShardWriter:
    """Token ids appended to shard-00000.bin, shard-00001.bin, ... of at most `shard_tokens`."""

    def __init__(self, directory: Path, shard_tokens: int, typecode: str):
        self.directory, self.shard_tokens, self.typecode = directory, shard_tokens, typecode
        self.counts: list[int] = []
        self.file = None

    def write(self, ids: list[int]) -> None:
        while ids:
            if self.file is None or self.counts[-1] == self.shard_tokens:
                self._next()
            room = self.shard_tokens - self.counts[-1]
            # Native byte order: little-endian on x86 and arm, as the reader expects.
            array(self.typecode, ids[:room]).tofile(self.file)
            self.counts[-1] += min(room, len(ids))
            ids = ids[room:]

    def _next(self) -> None:
        self.close()
        self.file = open(self.directory / f"shard-{len(self.counts):05d}.bin", "wb")
        self.counts.append(0)

    def close(self) -> None:
        if self.file is not None:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            self.file = None

    @property
    def names(self) -> list[str]:
        return [f"shard-{i:05d}.bin" for i in range(len(self.counts))]


def prepare(tokenizer_path: Path, inputs: list[Path], output: Path, shard_tokens: int, eos: str | None,
            text_field: str = "text") -> dict:
    from tqdm import tqdm

    tok, tokenizer_file = load_tokenizer(tokenizer_path)
    files = find_inputs(inputs)
    if not files:
        raise UsageError("--input", f"no {', '.join(SUFFIXES)} files found in {', '.join(map(str, inputs))}")
    eos_id = None
    for name in ([eos] if eos else EOS_CANDIDATES):
        eos_id = tok.token_to_id(name)
        if eos_id is not None:
            break
    if eos and eos_id is None:
        raise UsageError("--eos-token", f"{eos!r} is not in the tokenizer's vocabulary")
    if checked_path("--output", exists, output) and (not checked_path("--output", is_dir, output)
                                                     or any(checked_path("--output", input_dir, output).iterdir())):
        raise UsageError("--output", f"{output} exists and is not an empty folder")
    vocab = id_count(tok)
    dtype = "uint16" if vocab <= 2**16 else "uint32"
    stale = stale_staging(output)
    if stale:
        # Nothing keeps two prepares of one output apart, so a folder here may be a live run's.
        warn(f"{', '.join(map(str, stale))}: staging folders of a prepare of {output} that did not finish "
             f"(killed, or out of memory), or of one still running; left in place: remove them when no prepare "
             f"of {output} runs")
    staging = staging_folder(output, "--output")
    writer = ShardWriter(staging, shard_tokens, "H" if dtype == "uint16" else "I")
    docs = 0
    try:
        with tqdm(total=sum(f.stat().st_size for f in files), unit="B", unit_scale=True, desc="tokenizing") as bar:
            for f in files:
                plain = _kind(f) == ".txt"
                for texts in documents(f, text_field, bar.update):
                    for encoding in tok.encode_batch(texts, add_special_tokens=False):
                        ids = encoding.ids
                        if eos_id is not None and not plain:
                            ids = ids + [eos_id]
                        writer.write(ids)
                    docs += 0 if plain else len(texts)
                if plain:
                    docs += 1
                    if eos_id is not None:
                        writer.write([eos_id])
        writer.close()
        meta = {"dtype": dtype, "vocab_size": vocab, "shards": writer.names, "shard_tokens": writer.counts,
                "tokens": sum(writer.counts), "documents": docs, "tokenizer": str(tokenizer_file),
                # The separator after every document (None: the tokenizer has no end-of-text token).
                "eos_id": eos_id,
                "inputs": [str(f) for f in files]}
        (staging / "meta.json").write_text(json.dumps(meta, indent=2))
        if output.exists():
            output.rmdir()
        output_in_place()
        os.replace(staging, output)
    except OSError as exc:  # reading errors are UsageErrors already: this is the output failing
        _discard(writer, staging)
        raise UsageError("--output", f"writing {output} failed: {exc.strerror or exc}") from None
    except BaseException:
        _discard(writer, staging)
        raise
    return meta


def _discard(writer: ShardWriter, staging: Path) -> None:
    try:
        writer.close()
    except OSError:
        pass  # the shard being written is deleted with its folder
    shutil.rmtree(staging, ignore_errors=True)


def summary(meta: dict, output: Path) -> str:
    lines = [f"wrote {meta['tokens']:,} tokens of {meta['documents']:,} documents in {len(meta['shards'])} "
             f"shard(s) to {output}"]
    lines += [f"  {name}  {count:>14,} tokens" for name, count in zip(meta["shards"], meta["shard_tokens"])]
    return "\n".join(lines)


def main(argv=None) -> int:
    from trainer import imagenet

    p = Parser(prog="python -m trainer.data", description="Turn text into token shards, or ImageNet into ImageFolder.")
    sub = p.add_subparsers(dest="command", required=True)
    imagenet.add_parser(sub, p.formatter_class, p.error)
    prep = sub.add_parser("prepare", help="tokenize text, JSON lines or Parquet files into shards",
                          formatter_class=p.formatter_class)
    prep.error = p.error  # the same one-line errors as the top level
    prep.add_argument("--tokenizer", default="tokenizer.json",
                      help="a tokenizers-library tokenizer.json, or a Hugging Face model directory holding one")
    prep.add_argument("--input", nargs="+", default=["data/text"],
                      help=f"files or folders of {', '.join(SUFFIXES)} files")
    prep.add_argument("--output", default="data/tokens", help="folder for the shards and meta.json (new or empty)")
    prep.add_argument("--text-field", default="text", help="the text's field in JSON lines / column in Parquet")
    prep.add_argument("--shard-tokens", type=positive_int, default=100_000_000, help="tokens per shard")
    prep.add_argument("--eos-token", default=None, help="separator after each document (default: the tokenizer's own)")
    prep.add_argument("--skip-if-prepared", action="store_true",
                      help="exit 0 when --output already holds shards and meta.json (a rerun of a data Job)")
    args = p.parse_args(argv)
    if args.command == "imagenet":
        return imagenet.run(args)
    if args.skip_if_prepared and checked_path("--output", is_file, Path(args.output) / "meta.json"):
        print(f"{args.output} already holds token shards (meta.json); nothing to do")
        return 0
    missing = [i for i in args.input if not checked_path("--input", exists, i)]
    if missing:
        raise UsageError("--input", f"{missing[0]} does not exist")
    if not checked_path("--tokenizer", exists, args.tokenizer):
        raise UsageError("--tokenizer", f"{args.tokenizer} does not exist")
    output = Path(args.output)
    try:
        # Installed before the staging folder exists, so that no signal can leave one behind
        # (prepare removes it on any exception).
        with stopped_by_signals():
            meta = prepare(Path(args.tokenizer), [Path(i) for i in args.input], output, args.shard_tokens,
                           args.eos_token, args.text_field)
    except Stopped as stop:
        raise WorkerExit(f"stopped by {stop.name} before it finished; nothing was written to {output}",
                         stop.code) from None
    print(summary(meta, output))
    return 0
