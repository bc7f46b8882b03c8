"""config/paths.py: the checks every command runs on its path arguments before any work."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from config import paths
from config.paths import PathProblem


def test_an_endless_file_is_refused_at_the_limit_not_read_forever():
    with pytest.raises(PathProblem, match="larger than 1,024 bytes"):
        paths.read_bytes("/dev/zero", limit=1024, pipes=True)


def test_a_pipe_is_read_like_a_file_where_pipes_are_read_on_purpose(tmp_path):
    """`--from-file <(pass show hf)` gives a pipe, not a regular file."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text("hf_token\n"), daemon=True)
    writer.start()
    assert paths.read_text(fifo, pipes=True) == "hf_token\n"


def _special_files(tmp_path):
    fifo, sock = tmp_path / "fifo", tmp_path / "sock"
    os.mkfifo(fifo)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(sock))
    listener.close()  # the socket file stays
    return [(fifo, "a named pipe"), (sock, "a socket"), (Path("/dev/null"), "a character device")]


@pytest.mark.parametrize("check", [paths.read_bytes, paths.read_text, paths.read_json, paths.read_yaml, paths.open_regular,
                                   paths.output_file])
def test_a_pipe_socket_or_device_where_a_regular_file_belongs_is_refused_without_opening_it(tmp_path, check):
    """Opening a named pipe, to read or to write, waits for its other end, for ever when none
    comes; a device is no file to read a context file from, nor to replace with an output."""
    from cli_sweep import run_in_process

    for path, what in _special_files(tmp_path):
        problems = []

        def attempt(_):
            with pytest.raises(PathProblem) as err:
                check(path)
            problems.append(str(err.value))

        outcome = run_in_process(attempt, [], timeout_s=60)  # the pipe, opened, would never answer
        assert not outcome.hung and not outcome.escaped, outcome.escaped or f"{path}: no answer in 60 s"
        assert problems == [f"{path} is {what}, expected a regular file"]


@pytest.mark.parametrize("data, problem", [(b"a\0b", "binary data (a NUL byte at offset 1)"),
                                           (b"caf\xe9", "not UTF-8 text (byte 0xe9 at offset 3)")])
def test_text_that_is_not_utf8_text_is_refused_saying_where(tmp_path, data, problem):
    (tmp_path / "f").write_bytes(data)
    with pytest.raises(PathProblem, match=problem.replace("(", r"\(").replace(")", r"\)")):
        paths.read_text(tmp_path / "f")


def test_json_of_another_type_is_refused(tmp_path):
    (tmp_path / "f.json").write_text("[1]")
    with pytest.raises(PathProblem, match="must hold a JSON object, got list"):
        paths.read_json(tmp_path / "f.json")
    assert paths.read_json(tmp_path / "f.json", kind=list) == [1]


@pytest.mark.parametrize("text, where", [
    ('{"dev": {"a": 1}, "dev": {"a": 2}}', "its top-level object"),
    ('{"context": {"environments": {"dev": {}, "prod": {}, "dev": {"b": 1}}}}', "context.environments"),
    ('{"groups": [{"name": "p4d"}, {"name": "p5", "name": "p5"}]}', "groups[1]"),
    ('{"a b": {"dev": 1, "dev": 1}}', '["a b"]'),
])
def test_json_that_repeats_a_key_is_refused_naming_the_key_and_where(tmp_path, text, where):
    """JSON parsers (Python's, and Node's in the cdk CLI) keep the last of a repeated key and drop
    the first without a word; a repeated environment in cdk.json would vanish."""
    (tmp_path / "f.json").write_text(text)
    with pytest.raises(PathProblem) as err:
        paths.read_json(tmp_path / "f.json")
    key = "name" if "groups" in text else "dev"
    assert str(err.value) == (f"{tmp_path / 'f.json'} repeats the key {key!r} in {where} (JSON keeps only the "
                              "last one; remove or rename the other)")


def test_the_same_key_in_different_objects_is_no_repeat(tmp_path):
    (tmp_path / "f.json").write_text('{"a": {"name": 1}, "b": {"name": 2}, "c": [{"name": 3}, {"name": 4}]}')
    assert paths.read_json(tmp_path / "f.json")["c"][1] == {"name": 4}


def test_probing_an_output_file_leaves_nothing_behind(tmp_path):
    target = tmp_path / "new" / "metrics.jsonl"
    assert paths.output_file(target) == target
    assert list((tmp_path / "new").iterdir()) == []  # the directory was made, the probe removed


def test_a_creatable_directory_is_not_created(tmp_path):
    assert paths.creatable_dir(tmp_path / "a" / "b") == tmp_path / "a" / "b"
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(PathProblem, match="cannot create directory /proc/nope"):
        paths.creatable_dir("/proc/nope")


@pytest.mark.parametrize("check", [paths.output_dir, paths.creatable_dir, paths.output_file])
def test_outputs_under_a_regular_file_or_proc_cannot_be_created(tmp_path, check):
    (tmp_path / "file").write_text("")
    for path in (tmp_path / "file" / "out", "/proc/cli-paths-test"):
        with pytest.raises(PathProblem, match="cannot create"):
            check(path)


@pytest.mark.parametrize("check", [paths.exists, paths.is_file, paths.is_dir, paths.input_dir, paths.output_dir,
                                   paths.creatable_dir, paths.output_file])
def test_a_path_in_a_folder_this_user_may_not_enter_is_a_problem_not_an_exception(tmp_path, check):
    """Path.exists() raises PermissionError there (and os.path.exists() says False): the image runs
    as uid 1000 on FSx, where a folder of mode 000 is someone else's."""
    from cli_sweep import denied_as_a_user, unenterable

    locked = unenterable(tmp_path)
    for path in (locked / "inside", *([locked] if check in (paths.is_dir, paths.input_dir, paths.output_dir) else [])):
        with denied_as_a_user(), pytest.raises(PathProblem, match="Permission denied"):
            check(path)


@pytest.mark.parametrize("check", [paths.output_dir, paths.creatable_dir])
def test_a_folder_this_user_may_enter_but_not_write_is_refused_as_output(tmp_path, check):
    """Tried, not asked of os.access(): for root that answer comes from its permitted capabilities,
    so a folder of mode 500 passed even where writing into it then fails."""
    from cli_sweep import denied_as_a_user

    folder = tmp_path / "read-only"
    folder.mkdir(mode=0o500)
    with denied_as_a_user(), pytest.raises(PathProblem, match=f"{folder} is not writable by this user"):
        check(folder)
    assert list(folder.iterdir()) == []


def test_an_existing_output_file_this_user_may_not_write_is_refused(tmp_path):
    """Tried, not asked of os.access(): for root that answer comes from its permitted capabilities,
    so a file of mode 444 passed and the metrics file's open failed only after the model was built."""
    from cli_sweep import denied_as_a_user

    target = tmp_path / "metrics.jsonl"
    target.write_text("kept\n")
    target.chmod(0o444)
    with denied_as_a_user(), pytest.raises(PathProblem, match=f"{target} exists and is not writable by this user"):
        paths.output_file(target)
    assert target.read_text() == "kept\n"


@pytest.mark.parametrize("opening, closing", [("[", "]"), ('{"a": ', "}")])
def test_json_nested_past_the_parsers_depth_is_refused_in_one_line_not_a_recursion_error(tmp_path, opening, closing):
    """A crafted file on shared storage (a shard index, a model's config.json) of a few hundred KB
    of brackets: Python's parser raises RecursionError, which read_json's callers do not catch."""
    (tmp_path / "f.json").write_text(opening * 100_000 + "1" + closing * 100_000)
    with pytest.raises(PathProblem, match=r"f\.json nests arrays or objects more deeply than"):
        paths.read_json(tmp_path / "f.json")


@pytest.mark.parametrize("number", ["9" * 5000, "-" + "1" * 4301])
def test_json_holding_a_number_past_pythons_digit_limit_is_refused_in_one_line_not_a_value_error(tmp_path, number):
    """Python refuses to turn more than 4300 digits into an int (a guard against slow conversion)
    with a ValueError that is no JSONDecodeError; the CDK CLI's JSON.parse reads the same cdk.json
    as a float, so app.py, run by `cdk synth`, was the first to fail, with a traceback."""
    (tmp_path / "f.json").write_text('{"context": {"n": ' + number + "}}")
    with pytest.raises(PathProblem, match=r"f\.json holds a number of more than 4,300 digits"):
        paths.read_json(tmp_path / "f.json")


@pytest.mark.parametrize("text, problem", [
    ("x: " + "9" * 5000, r"holds a value Python cannot read \(Exceeds the limit \(4300 digits\)"),
    ("x: 2001-13-45", r"holds a value Python cannot read \(month must be in 1\.\.12\)"),
    ("x: " + "[" * 100_000 + "]" * 100_000, "nests sequences or mappings more deeply than"),
])
def test_yaml_past_pythons_digit_or_depth_limit_is_refused_in_one_line(tmp_path, text, problem):
    """A kubeconfig or a dist/ manifest: PyYAML's int() and datetime() raise a ValueError, and its
    composer a RecursionError, none a YAMLError, so `ops status --kubeconfig` reported a bug in ops."""
    (tmp_path / "f.yaml").write_text(text + "\n")
    with pytest.raises(PathProblem, match=rf"f\.yaml {problem}"):
        paths.read_yaml(tmp_path / "f.yaml")
