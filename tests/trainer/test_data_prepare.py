"""trainer.data prepare on JSON lines (plain and gzipped, as C4 ships), Parquet and plain text,
with the tokenizer of a Hugging Face model directory: every document's tokens, in file order,
separated by the tokenizer's end-of-sequence token, in shards of at most --shard-tokens."""

from __future__ import annotations

import gzip
import json
import re
import signal
import subprocess
import sys
from array import array

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer

from trainer.cli import UsageError, run_main
from trainer.hf_config import TOKENIZER_LIMIT_BYTES
from trainer.hf_tiny import write_tiny
from trainer.prepare import main, prepare
from trainer_procs import REPO, Job, job_env

DOCS = [f"document {i}: the ranks average their gradients and checkpoint to FSx, step {i * 7}." for i in range(700)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    write_tiny(root / "model")  # a Hugging Face model directory with a tokenizer.json
    data = root / "in"
    data.mkdir()
    (data / "a.jsonl").write_text("".join(json.dumps({"text": d, "url": "x"}) + "\n" for d in DOCS[:300]))
    with gzip.open(data / "b.json.gz", "wt") as f:
        f.writelines(json.dumps({"text": d}) + "\n" for d in DOCS[300:500])
    pq.write_table(pa.table({"text": DOCS[500:], "id": list(range(200))}), data / "c.parquet", row_group_size=64)
    (data / "d.txt").write_text("\n".join(DOCS[:50]) + "\n")
    return root


def _read_shards(out, meta):
    ids = []
    for name in meta["shards"]:
        a = array("H")
        a.frombytes((out / name).read_bytes())
        ids += a.tolist()
    return ids


def test_jsonl_gzip_parquet_and_text_become_every_documents_tokens_in_order(corpus, tmp_path, capsys):
    out = tmp_path / "tokens"
    assert main(["prepare", "--tokenizer", str(corpus / "model"), "--input", str(corpus / "in"),
                 "--output", str(out), "--shard-tokens", "5000"]) == 0
    meta = json.loads((out / "meta.json").read_text())
    tok = Tokenizer.from_file(str(corpus / "model" / "tokenizer.json"))
    eos = tok.token_to_id("</s>")
    expected = []
    for doc in DOCS:  # a.jsonl, b.json.gz, c.parquet in sorted file order
        expected += tok.encode(doc, add_special_tokens=False).ids + [eos]
    expected += tok.encode("\n".join(DOCS[:50]) + "\n", add_special_tokens=False).ids + [eos]  # d.txt: one document
    assert _read_shards(out, meta) == expected
    assert meta["tokens"] == len(expected) and meta["documents"] == 701
    assert len(meta["shards"]) > 2 and all(n <= 5000 for n in meta["shard_tokens"]) and sum(meta["shard_tokens"]) == len(expected)
    printed = capsys.readouterr()
    assert f"wrote {len(expected):,} tokens of 701 documents in {len(meta['shards'])} shard(s)" in printed.out
    assert f"shard-00000.bin  {5000:>14,} tokens" in printed.out
    assert "tokenizing" in printed.err  # the progress bar


def test_a_malformed_json_line_names_the_file_and_line_and_leaves_no_output(corpus, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "fine"}) + "\n" + json.dumps({"body": "no text"}) + "\n")
    with pytest.raises(UsageError, match=r"--input: .*bad.jsonl:2: not a JSON object with a 'text' field"):
        prepare(corpus / "model", [bad], tmp_path / "out", 100, None)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*"))


@pytest.mark.parametrize("line, says", [
    ('{"text": null}', "its 'text' field must be a string, got null"),
    ('{"text": 5}', "its 'text' field must be a string, got int"),
    ('{"text": ' + "[" * 100_000 + "]" * 100_000 + "}", "not a JSON object with a 'text' field"),
])
def test_a_json_line_whose_text_is_not_a_string_or_nests_too_deeply_is_one_line_naming_the_line(
        corpus, tmp_path, capsys, line, says):
    """Before, a crash report: the tokenizer's TypeError for a null or a number, the parser's
    RecursionError for a few hundred KB of brackets."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "fine"}) + "\n" + line + "\n")
    code, err = run_prepare(["--tokenizer", str(corpus / "model"), "--input", str(bad),
                             "--output", str(tmp_path / "out")], capsys)
    assert (code, err) == (2, f"error: --input: {bad}:2: {says}" + (" (see --text-field)" if "JSON" in says else ""))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]


@pytest.mark.parametrize("name", ["bomb.jsonl.gz", "one-line.txt"])
def test_a_line_past_the_bound_is_one_line_naming_the_file_not_read_into_memory_whole(corpus, tmp_path, capsys,
                                                                                       monkeypatch, name):
    """A gzip of 70 KB that inflates to one line of 64 MiB (or a text file without a newline, of
    any size) was read whole into memory: a gzip bomb, or a damaged file, took the machine's memory."""
    from trainer import prepare as prepare_module

    bad = tmp_path / name
    if name.endswith(".gz"):
        bad.write_bytes(gzip.compress(b"a" * ((64 << 20) + 1), compresslevel=1))
        where, limit = f"{bad}:1", 64 << 20
    else:  # at a small bound here: the text path checks the same bound
        bad.write_bytes(b"short\n" + b"a" * 5000)
        monkeypatch.setattr(prepare_module, "TEXT_BLOCK_BYTES", 1024)
        monkeypatch.setattr(prepare_module, "LINE_LIMIT_BYTES", 4096, raising=False)
        where, limit = str(bad), 4096
    code, err = run_prepare(["--tokenizer", str(corpus / "model"), "--input", str(bad),
                             "--output", str(tmp_path / "out")], capsys)
    assert (code, err) == (2, f"error: --input: {where}: a line longer than {limit:,} bytes")
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_parquet_file_without_the_text_column_names_the_field(corpus, tmp_path):
    with pytest.raises(UsageError, match="--text-field: .* has no column 'content'"):
        prepare(corpus / "model", [corpus / "in" / "c.parquet"], tmp_path / "out", 100, None, text_field="content")


def test_an_existing_non_empty_output_is_refused(corpus, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep").write_text("x")
    with pytest.raises(UsageError, match="--output: .* exists and is not an empty folder"):
        prepare(corpus / "model", [corpus / "in" / "a.jsonl"], tmp_path / "out", 100, None)


def test_prepare_streams_bounded_batches_never_a_whole_file(corpus, tmp_path, monkeypatch):
    import trainer.prepare as prep
    monkeypatch.setattr(prep, "BATCH_DOCUMENTS", 7)
    monkeypatch.setattr(prep, "TEXT_BLOCK_BYTES", 256)
    batches = []
    real = prep.load_tokenizer

    def recording(path):
        tok, file = real(path)

        class Recorder:
            def __getattr__(self, name):
                return getattr(tok, name)

            def encode_batch(self, texts, **kw):
                batches.append(texts)
                return tok.encode_batch(texts, **kw)
        return Recorder(), file

    monkeypatch.setattr(prep, "load_tokenizer", recording)
    meta = prepare(corpus / "model", [corpus / "in"], tmp_path / "out", 5000, None)
    assert meta["documents"] == 701 and len(batches) > 100
    assert max(len(b) for b in batches) <= 7
    longest_line = max(len(d) for d in DOCS) + 1
    assert max(len(t.encode()) for b in batches for t in b) <= 256 + longest_line  # text files in blocks of lines


def test_skip_if_prepared_leaves_finished_shards_alone_and_still_refuses_a_half_filled_folder(corpus, tmp_path, capsys):
    """The data Job runs prepare again on every start; finished shards (meta.json) are kept."""
    out = tmp_path / "tokens"
    args = ["prepare", "--tokenizer", str(corpus / "model"), "--input", str(corpus / "in" / "d.txt"),
            "--output", str(out), "--skip-if-prepared"]
    assert main(args) == 0
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    capsys.readouterr()
    assert main(args) == 0
    assert capsys.readouterr().out.strip() == f"{out} already holds token shards (meta.json); nothing to do"
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    (out / "meta.json").unlink()
    with pytest.raises(UsageError, match="exists and is not an empty folder"):
        main(args)


def _gzip_cases(root):
    """Hostile .gz inputs, as a crawl or an interrupted copy leaves them."""
    whole = (root / "in" / "b.json.gz").read_bytes()
    cases = {
        "truncated": (whole[:len(whole) // 2], r"truncated: the gzip stream ends after line \d+ without its end marker"),
        "not-gzip": (b"plain text, not gzip\n", r"not a gzip file"),
        "corrupt-body": (whole[:10] + b"\xff" * 40 + whole[50:], r"corrupt gzip data after line \d+"),
    }
    return cases


@pytest.mark.parametrize("case", ["truncated", "not-gzip", "corrupt-body"])
def test_a_corrupt_or_truncated_gzip_input_is_one_line_exit_2_and_leaves_no_output(corpus, tmp_path, capsys, case):
    data, pattern = _gzip_cases(corpus)[case]
    bad = tmp_path / "in" / "c4-00001.json.gz"
    bad.parent.mkdir()
    bad.write_bytes(data)
    code, err = run_prepare(["--tokenizer", str(corpus / "model"), "--input", str(bad),
                             "--output", str(tmp_path / "out")], capsys)
    assert code == 2
    assert re.fullmatch(rf"error: --input: {re.escape(str(bad))}: {pattern}( \(.*\))?", err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]  # no output, no staging folder


def test_json_lines_that_are_not_utf8_name_the_line(corpus, tmp_path, capsys):
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(json.dumps({"text": "ok"}).encode() + b"\n" + '{"text": "café"}\n'.encode("latin-1"))
    code, err = run_prepare(["--tokenizer", str(corpus / "model"), "--input", str(bad),
                             "--output", str(tmp_path / "out")], capsys)
    assert (code, err) == (2, f"error: --input: {bad}:2: not UTF-8 text (invalid continuation byte)")


@pytest.mark.parametrize("where", ["under-a-file", "a-file"])
def test_an_output_that_cannot_be_created_is_one_line_and_exit_2(corpus, tmp_path, capsys, where):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    output = blocker / "tokens" if where == "under-a-file" else blocker
    code, err = run_prepare(["--tokenizer", str(corpus / "model"), "--input", str(corpus / "in" / "a.jsonl"),
                             "--output", str(output)], capsys)
    expected = (f"cannot create {output}: {blocker} is a file, not a folder" if where == "under-a-file"
                else f"{output} exists and is not an empty folder")
    assert (code, err) == (2, f"error: --output: {expected}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


@pytest.mark.parametrize("tokenizer, message", [
    ("folder-without-one", "is neither a tokenizer.json nor a directory holding one"),
    ("binary-file", "holds binary data (a NUL byte at offset 0), expected text"),
    ("tokenizer-json-is-a-folder", "is neither a tokenizer.json nor a directory holding one"),
])
def test_a_tokenizer_path_of_the_wrong_kind_is_one_line(corpus, tmp_path, capsys, tokenizer, message):
    path = tmp_path / tokenizer
    if tokenizer == "binary-file":
        path.write_bytes(bytes(range(256)) * 4)
    else:
        (path / "tokenizer.json" if tokenizer == "tokenizer-json-is-a-folder" else path).mkdir(parents=True)
    code, err = run_prepare(["--tokenizer", str(path), "--input", str(corpus / "in" / "a.jsonl"),
                             "--output", str(tmp_path / "out")], capsys)
    assert code == 2 and err.startswith("error: --tokenizer: ") and message in err, err
    assert not (tmp_path / "out").exists()


def test_a_huge_tokenizer_json_is_refused_at_a_bound_not_read_whole(corpus, tmp_path, capsys):
    """tokenizers' Tokenizer.from_file reads the whole file into memory, whatever its size: a 3 GB
    file took 3.3 GB, and a 50 GB one (sparse here) asks for 50 GB."""
    huge = tmp_path / "model" / "tokenizer.json"
    huge.parent.mkdir()
    with open(huge, "wb") as f:
        f.truncate(50 << 30)
    code, err = run_prepare(["--tokenizer", str(huge.parent), "--input", str(corpus / "in" / "a.jsonl"),
                             "--output", str(tmp_path / "out")], capsys)
    assert (code, err) == (2, f"error: --tokenizer: {huge} is larger than {TOKENIZER_LIMIT_BYTES:,} bytes")
    assert not (tmp_path / "out").exists()


def run_prepare(args, capsys) -> tuple[int, str]:
    """Exit status and the last line on stderr (the progress bar may come before it)."""
    with pytest.raises(SystemExit) as exit_:
        run_main(lambda: main(["prepare", *args]))
    err = capsys.readouterr().err
    assert err.endswith("\n") and "Traceback" not in err, err
    return exit_.value.code, err.rstrip("\n").split("\n")[-1]


@pytest.mark.parametrize("name", ["d.txt", "a.jsonl", "c.parquet"])
def test_an_input_file_this_user_may_not_read_is_one_line_naming_input_and_the_file(corpus, tmp_path, capsys, name):
    """It said `--output: writing ... failed: Permission denied` for a text file: the output was blamed."""
    from cli_sweep import denied_as_a_user

    unreadable = tmp_path / "in" / name
    unreadable.parent.mkdir()
    unreadable.write_bytes((corpus / "in" / name).read_bytes())
    unreadable.chmod(0)
    with denied_as_a_user():
        code, err = run_prepare(["--tokenizer", str(corpus / "model"), "--input", str(tmp_path / "in"),
                                 "--output", str(tmp_path / "out")], capsys)
    assert (code, err) == (2, f"error: --input: cannot read {unreadable} (Permission denied)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]  # no output, no staging folder


@pytest.mark.parametrize("mode", [0o000, 0o300], ids=["unenterable", "unlistable"])
def test_a_subfolder_of_input_this_user_may_not_list_is_one_line_naming_input_and_the_folder(corpus, tmp_path,
                                                                                           capsys, mode):
    """Path.rglob passed over it without a word: its files were never tokenized, and the run exited 0."""
    from cli_sweep import denied_as_a_user

    inputs = tmp_path / "in"
    (inputs / "more").mkdir(parents=True)
    (inputs / "a.jsonl").write_bytes((corpus / "in" / "a.jsonl").read_bytes())
    (inputs / "more" / "d.txt").write_bytes((corpus / "in" / "d.txt").read_bytes())
    (inputs / "more").chmod(mode)
    with denied_as_a_user():
        code, err = run_prepare(["--tokenizer", str(corpus / "model"), "--input", str(inputs),
                                 "--output", str(tmp_path / "out")], capsys)
    assert (code, err) == (2, f"error: --input: cannot list {inputs / 'more'} (Permission denied)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]  # no output, no staging folder


def test_an_output_folder_this_user_may_enter_but_not_list_is_one_line_naming_output(corpus, tmp_path, capsys):
    """Path.iterdir raised its PermissionError while checking that the folder is empty: a traceback."""
    from cli_sweep import denied_as_a_user

    output = tmp_path / "out"
    output.mkdir(mode=0o100)
    with denied_as_a_user():
        code, err = run_prepare(["--tokenizer", str(corpus / "model"), "--input", str(corpus / "in" / "a.jsonl"),
                                 "--output", str(output)], capsys)
    assert (code, err) == (2, f"error: --output: cannot list {output} (Permission denied)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("column, got", [
    (pa.array([1, 2]), "int64"),
    (pa.array([["a", "b"], ["c"]]), "list<element: string>"),
    (pa.array([{"x": "a"}, {"x": "b"}]), "struct<x: string>"),
    (pa.array([b"\xff\xfe", b"ok"]), "binary"),
    (pa.array([None, None], pa.null()), "null"),
])
def test_a_parquet_text_column_that_does_not_hold_strings_is_one_line_naming_its_type(corpus, tmp_path, capsys,
                                                                                      column, got):
    """Numbers, lists, structs and bytes ended in the tokenizer's TypeError, a crash report; a column
    of nulls only was 'wrote 0 tokens of 0 documents', exit 0."""
    bad = tmp_path / "in" / "bad.parquet"
    bad.parent.mkdir()
    pq.write_table(pa.table({"text": column}), bad)
    code, err = run_prepare(["--tokenizer", str(corpus / "model"), "--input", str(bad),
                             "--output", str(tmp_path / "out")], capsys)
    assert (code, err) == (2, f"error: --input: {bad}: its 'text' column holds {got}, expected strings "
                              "(see --text-field)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_a_parquet_text_column_of_dictionary_encoded_or_large_strings_is_read(corpus, tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    pq.write_table(pa.table({"text": pa.array(DOCS[:3]).dictionary_encode()}), data / "a.parquet",
                   store_schema=True)
    pq.write_table(pa.table({"text": pa.array(DOCS[3:5], pa.large_string())}), data / "b.parquet")
    meta = prepare(corpus / "model", [data], tmp_path / "out", 5000, None)
    tok = Tokenizer.from_file(str(corpus / "model" / "tokenizer.json"))
    eos = tok.token_to_id("</s>")
    assert _read_shards(tmp_path / "out", meta) == [i for d in DOCS[:5] for i in tok.encode(d, add_special_tokens=False).ids + [eos]]


@pytest.mark.parametrize("dictionary", [False, True], ids=["plain", "dictionary-typed"])
def test_a_parquet_document_past_the_line_bound_is_one_line_naming_its_row(corpus, tmp_path, capsys, monkeypatch,
                                                                          dictionary):
    """A JSON line is bounded; a Parquet value was not (at a small bound here: both check the same)."""
    from trainer import prepare as prepare_module

    monkeypatch.setattr(prepare_module, "LINE_LIMIT_BYTES", 4096)
    bad = tmp_path / "in" / "long.parquet"
    bad.parent.mkdir()
    column = pa.array(["short", "x" * 5000, "short"])
    pq.write_table(pa.table({"text": column.dictionary_encode() if dictionary else column}), bad)
    code, err = run_prepare(["--tokenizer", str(corpus / "model"), "--input", str(bad),
                             "--output", str(tmp_path / "out")], capsys)
    assert (code, err) == (2, f"error: --input: {bad}: row 2: a document longer than 4,096 bytes")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def _one_value_repeated(path, value: str, rows: int, **kw):
    """A Parquet file whose column is one dictionary entry and `rows` indices to it (an RLE run):
    a few hundred bytes on disk, value * rows once decoded."""
    column = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array([value]))
    pq.write_table(pa.table({"text": column}), path, compression="zstd", dictionary_pagesize_limit=64 << 20,
                   max_rows_per_page=rows, **kw)


def _prepare_in_two_gib(args) -> subprocess.CompletedProcess:
    """The command in a child with 2 GiB of address space, as a Job's memory limit would bound it: an
    unbounded read dies there fast instead of taking this machine's memory."""
    def two_gib():
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    return subprocess.run([sys.executable, "-m", "trainer.data", "prepare", *args], cwd=REPO, env=job_env(),
                          capture_output=True, text=True, timeout=120, preexec_fn=two_gib)


@pytest.mark.parametrize("bomb", ["zstd-of-one-long-value", "dictionary-value-repeated", "empty-value-repeated",
                                  "short-value-repeated-past-what-the-metadata-claims"])
def test_a_small_parquet_file_that_decodes_to_far_more_than_its_size_is_one_line_in_bounded_memory(
        corpus, tmp_path, bomb):
    """8 KB of zstd held one document of 256 MiB: the tokenizer aborted ('memory allocation failed',
    SIGABRT) and left its staging folder; of 64 MiB here, a MemoryError traceback. 1 KB held a
    dictionary page of one 4 MiB value and 200,000 indices to it (800 GB of text): a MemoryError
    traceback under a memory limit, the OOM killer without one. 600 bytes held 10 million empty values:
    17 s of reading to write 'wrote 0 tokens', and a few more KB hold billions. 100 KB repeated
    20,000 times passes every check of the metadata and decodes to 2 GB."""
    bad = tmp_path / "in" / "bomb.parquet"
    bad.parent.mkdir()
    if bomb == "zstd-of-one-long-value":
        pq.write_table(pa.table({"text": ["a" * (64 << 20)]}), bad, compression="zstd", use_dictionary=False)
    elif bomb == "dictionary-value-repeated":
        _one_value_repeated(bad, "b" * (4 << 20), 200_000)
    elif bomb == "empty-value-repeated":
        _one_value_repeated(bad, "", 10_000_000, row_group_size=10_000_000)
    else:  # the metadata's sizes and row count are within the bound: the text decoded is not
        _one_value_repeated(bad, "c" * 100_000, 20_000)
    done = _prepare_in_two_gib(["--tokenizer", str(corpus / "model"), "--input", str(bad),
                                "--output", str(tmp_path / "out")])
    assert done.returncode == 2, done.stderr[-2000:]
    from trainer.prepare import PARQUET_EXPANSION

    size = bad.stat().st_size
    assert size < 10_000
    assert re.fullmatch(rf"error: --input: {re.escape(str(bad))}: (its 'text' column claims|decodes to) [\d,]+ "
                        rf"(bytes|rows)( of text)?, more than {PARQUET_EXPANSION:,} times the file's {size:,} bytes "
                        r"\(a Parquet bomb, or damaged metadata\)", done.stderr.splitlines()[-1]), done.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def _long_corpus(folder, documents: int = 200_000):
    """JSON lines that take seconds to tokenize: a signal sent once the progress bar has moved
    reaches the run in the middle of its shards."""
    folder.mkdir()
    with open(folder / "long.jsonl", "w") as f:
        f.writelines(json.dumps({"text": f"document {i}: checkpoints on FSx, step {i}."}) + "\n"
                     for i in range(documents))


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_prepare_stopped_by_a_signal_removes_its_staging_folder_and_says_so_in_one_line(corpus, tmp_path, sig, code):
    """A deleted or preempted data Job, or `timeout`, sends SIGTERM: Python's default ended the process
    at once and its staging folder of partial shards stayed beside --output, one more per retry.
    Ctrl-C cleaned up, with a KeyboardInterrupt traceback."""
    _long_corpus(tmp_path / "in")
    out = tmp_path / "out"
    job = Job([sys.executable, "-m", "trainer.data", "prepare", "--tokenizer", str(corpus / "model"),
               "--input", str(tmp_path / "in"), "--output", str(out)])
    try:
        job.wait_for(r"tokenizing:\s+[1-9]\d?%", timeout=60)  # in the loop, with shards in staging
        job.proc.send_signal(sig)
        rc = job.finish(timeout=30)
    finally:
        job.stop()
    assert "Traceback" not in job.output, job.output[-3000:]
    assert (rc, job.output.splitlines()[-1]) == (
        code, f"error: stopped by {sig.name} before it finished; nothing was written to {out}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_a_signal_just_after_the_staging_folder_is_made_still_removes_it(corpus, tmp_path, monkeypatch):
    """A signal between the staging folder being made and prepare holding its path raised Stopped
    where nothing knew the folder: it stayed beside --output. raise_signal runs the handler at
    once, in this process, right after the folder is made."""
    from trainer import cli
    from trainer.cli import WorkerExit

    made = cli._new_folder

    def made_then_sigterm(parent, prefix):
        folder = made(parent, prefix)
        signal.raise_signal(signal.SIGTERM)
        return folder

    monkeypatch.setattr(cli, "_new_folder", made_then_sigterm)
    out = tmp_path / "out"
    with pytest.raises(WorkerExit) as stopped:
        main(["prepare", "--tokenizer", str(corpus / "model"), "--input", str(corpus / "in" / "a.jsonl"),
              "--output", str(out)])
    assert (stopped.value.code, str(stopped.value)) == (
        143, f"stopped by SIGTERM before it finished; nothing was written to {out}")
    assert list(tmp_path.iterdir()) == []


def test_a_signal_once_the_output_is_in_place_leaves_it_and_reports_success(corpus, tmp_path, sigterm_once_renamed_onto,
                                                                           capsys):
    """A signal just after the final rename raised Stopped: exit 143 and 'nothing was written to OUT'
    beside a complete OUT, which a retry then refused as not empty."""
    out = tmp_path / "out"
    sigterm_once_renamed_onto(out)
    assert main(["prepare", "--tokenizer", str(corpus / "model"), "--input", str(corpus / "in" / "a.jsonl"),
                 "--output", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {json.loads((out / 'meta.json').read_text())['tokens']:,} ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_sparse_tokenizers_highest_id_sets_the_vocab_size_and_the_shard_type(corpus, tmp_path):
    """A tokenizer.json whose ids have gaps: its token count chose uint16 shards for ids past 65,535,
    and prepare crashed with an OverflowError traceback; meta.json's vocab_size was the count, below
    the ids in the shards."""
    tokenizer = json.loads((corpus / "model" / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    vocab.update({name: i + 70_000 for name, i in vocab.items() if i >= 2})  # <s> and </s> stay 0 and 1
    sparse = tmp_path / "tokenizer.json"
    sparse.write_text(json.dumps(tokenizer))
    out = tmp_path / "out"
    meta = prepare(sparse, [corpus / "in" / "a.jsonl"], out, 100_000, None)
    assert (meta["dtype"], meta["vocab_size"]) == ("uint32", max(vocab.values()) + 1)
    tok = Tokenizer.from_str(sparse.read_text())
    expected = [i for d in DOCS[:300] for i in tok.encode(d, add_special_tokens=False).ids + [1]]
    assert array("I", (out / "shard-00000.bin").read_bytes()).tolist() == expected


def test_staging_folders_an_earlier_killed_prepare_left_are_named_in_one_warning_and_left_alone(corpus, tmp_path,
                                                                                                   capsys):
    """SIGKILL (the OOM killer, a pod past its grace period) leaves a staging folder no handler can
    remove. Nothing stops two prepares of one --output at once, so one of them may be another live
    run's: named, not removed."""
    out = tmp_path / "out"
    stale = [tmp_path / ".out.k1ll3d_a", tmp_path / ".out.k1ll3d_b"]
    for folder in stale:
        folder.mkdir()
        (folder / "shard-00000.bin").write_bytes(b"\0\0")
    other = tmp_path / ".out.v2.abcdefgh"  # the staging folder of --output out.v2, not of out
    other.mkdir()
    assert main(["prepare", "--tokenizer", str(corpus / "model"), "--input", str(corpus / "in" / "a.jsonl"),
                 "--output", str(out)]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "WARNING" in line]
    assert warnings == [f"WARNING: {stale[0]}, {stale[1]}: staging folders of a prepare of {out} that did not finish "
                        "(killed, or out of memory), or of one still running; left in place: remove them when no "
                        f"prepare of {out} runs"]
    assert all(folder.is_dir() for folder in (*stale, other)) and (out / "meta.json").is_file()


def test_a_batch_of_json_lines_is_bounded_in_bytes_whatever_the_lines_lengths(tmp_path):
    """A batch was BATCH_DOCUMENTS lines of up to LINE_LIMIT_BYTES each: 16 GiB in memory at once,
    from a gzip of about 18 MB. Ordinary documents still go BATCH_DOCUMENTS at a time."""
    from trainer.prepare import BATCH_BYTES, BATCH_DOCUMENTS, documents

    long = tmp_path / "long.jsonl"
    texts = [chr(ord("a") + i % 26) * (3 << 20) for i in range(BATCH_BYTES // (3 << 20) * 3)]
    long.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    batches = list(documents(long, "text", lambda done: None))
    assert [t for b in batches for t in b] == texts and len(batches) >= 3
    assert max(sum(len(t) for t in b) for b in batches) <= BATCH_BYTES + (3 << 20)
    short = tmp_path / "short.jsonl"
    short.write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS))
    assert [len(b) for b in documents(short, "text", lambda done: None)] == [BATCH_DOCUMENTS] * 2 + [700 - 512]
