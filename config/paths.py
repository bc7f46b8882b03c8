"""Paths from the command line, checked before any work: one message that says what is wrong.

ops and the trainer both take files and folders from users (context files, kubeconfigs, token
files, checkpoint and output folders). A directory where a file belongs, a binary or non-UTF-8
file, or an output that cannot be created must end the command with one line naming the
argument, not with a traceback halfway through. These helpers raise PathProblem with the
reason; the caller adds the argument's name and raises its own error type (OpsError,
UsageError).
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

TEXT_LIMIT_BYTES = 16 << 20  # a context file or kubeconfig is kilobytes; /dev/zero is endless
LINE_LIMIT_BYTES = 1 << 20  # a line of a log read line by line (a metrics line is a few hundred bytes)


class PathProblem(ValueError):
    """What is wrong with a path, in words that start with the path."""


def _reason(err: OSError) -> str:
    return err.strerror or type(err).__name__


def _special(mode: int) -> str | None:
    """What a file of this mode is when it is neither a regular file nor a directory."""
    for test, what in ((stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return what
    return None


def file_status(path: str | Path) -> os.stat_result | None:
    """The status of a path where a regular file belongs (a directory is the caller's to judge),
    None when nothing is there. A named pipe, a socket or a device is a PathProblem: opening a pipe
    to read or to write waits for its other end, for ever when none comes, and an output written
    under a temporary name and renamed would replace a device (/dev/null, for root) machine-wide."""
    found = _stat(path)
    if found is not None and (what := _special(found.st_mode)):
        raise PathProblem(f"{path} is {what}, expected a regular file")
    return found


def open_regular(path: str | Path) -> BinaryIO:
    """A regular file opened to read, for a caller that tells what open() raises (a missing file,
    a directory, an I/O error: the OSError) from a named pipe, socket or device there (a
    PathProblem): a checkpoint's metadata is damaged when missing, not when the volume fails.
    O_NONBLOCK lets opening a pipe return at once instead of waiting for a writer for ever, and
    the open file's own status is judged, so nothing can replace it between a check and the open."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:  # a socket file cannot be opened at all (ENXIO)
        if err.errno == errno.ENXIO and (what := _special(os.stat(path).st_mode)):
            raise PathProblem(f"{path} is {what}, expected a regular file") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if what := _special(mode):
            raise PathProblem(f"{path} is {what}, expected a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def is_plain_name(name: object) -> bool:
    """Whether `name`, read from a file (an index of shards or weights), is a plain file name: one
    that joined to the file's folder stays in it. Such files sit on shared storage, and a name
    with a '/' or '..' reaches another user's files."""
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\0" not in name


def read_bytes(path: str | Path, limit: int = TEXT_LIMIT_BYTES, pipes: bool = False) -> bytes:
    """The content of a regular file, at most `limit` bytes. With pipes=True, for an argument that
    reads a pipe on purpose (`--from-file <(pass show hf)`), a pipe or a device is read too."""
    path = Path(path)
    if not pipes:
        file_status(path)
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as err:
        raise _read_problem(path, err) from None
    if len(data) > limit:
        raise PathProblem(f"{path} is larger than {limit:,} bytes")
    return data


def _read_problem(path: Path, err: OSError) -> PathProblem:
    if isinstance(err, IsADirectoryError):
        return PathProblem(f"{path} is a directory, expected a file")
    if isinstance(err, FileNotFoundError):
        return PathProblem(f"{path} not found")
    return PathProblem(f"cannot read {path} ({_reason(err)})")


def read_lines(path: str | Path, line_limit: int = LINE_LIMIT_BYTES) -> Iterator[tuple[int, str]]:
    """The lines of a UTF-8 text file of any length, numbered from 1, each read alone and at most
    `line_limit` bytes: a log that grows with the run (a metrics file) costs the memory of what the
    caller keeps, not of the file. A longer line, binary data or invalid UTF-8 is a PathProblem
    naming its line, found without reading further."""
    path = Path(path)
    file_status(path)
    number = 0
    try:
        with open(path, "rb") as f:
            while line := f.readline(line_limit + 1):
                number += 1
                if b"\0" in line:
                    raise PathProblem(f"{path}:{number} holds binary data (a NUL byte), expected text")
                if len(line) > line_limit:
                    raise PathProblem(f"{path}:{number} is longer than {line_limit:,} bytes")
                try:
                    text = line.decode("utf-8")
                except UnicodeDecodeError as err:
                    raise PathProblem(f"{path}:{number} is not UTF-8 text (byte 0x{line[err.start]:02x})") from None
                yield number, text
    except OSError as err:
        raise _read_problem(path, err) from None


def read_text(path: str | Path, limit: int = TEXT_LIMIT_BYTES, pipes: bool = False) -> str:
    """A UTF-8 text file; binary content (a NUL byte, invalid UTF-8) is refused."""
    data = read_bytes(path, limit, pipes)
    nul = data.find(b"\0")
    if nul >= 0:
        raise PathProblem(f"{path} holds binary data (a NUL byte at offset {nul}), expected text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise PathProblem(f"{path} is not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start})") from None


class _Repeated(dict):
    """A JSON object that held `key` more than once (the parser keeps the last)."""

    def __init__(self, pairs: dict, key: str) -> None:
        super().__init__(pairs)
        self.key = key


def _object(pairs: list[tuple[str, Any]]) -> dict:
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    seen: set[str] = set()
    return _Repeated(obj, next(k for k, _ in pairs if k in seen or seen.add(k)))


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _first_repeat(value: Any, where: str = "") -> tuple[str, str] | None:
    """(where, key) of the outermost, first object in document order that repeats a key."""
    if isinstance(value, _Repeated):
        return where, value.key
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, int):
            step = f"[{key}]"
        elif _PLAIN_KEY.fullmatch(key):
            step = f".{key}" if where else key
        else:
            step = f"[{json.dumps(key)}]"
        if found := _first_repeat(item, where + step):
            return found
    return None


def read_json(path: str | Path, kind: type = dict, limit: int = TEXT_LIMIT_BYTES) -> Any:
    """A JSON document of the given top-level type. An object that repeats a key is refused: the
    parser would keep the last and silently drop the first (a whole environment of cdk.json)."""
    text = read_text(path, limit)
    try:
        value = json.loads(text, object_pairs_hook=_object)
        found = _first_repeat(value)
    except json.JSONDecodeError as err:
        raise PathProblem(f"{path} is not valid JSON (line {err.lineno}: {err.msg})") from None
    except RecursionError:  # both recurse per level: a few hundred KB of brackets reach Python's limit
        raise PathProblem(f"{path} nests arrays or objects more deeply than Python's parser allows (about "
                          f"{sys.getrecursionlimit()} levels)") from None
    except ValueError:  # not a JSONDecodeError: int() refuses a number past sys.get_int_max_str_digits()
        raise PathProblem(f"{path} holds a number of more than {sys.get_int_max_str_digits():,} digits, more "
                          "than Python reads") from None
    if found:
        where, key = found
        raise PathProblem(f"{path} repeats the key {key!r} in {where or 'its top-level object'} (JSON keeps only "
                          "the last one; remove or rename the other)")
    if not isinstance(value, kind):
        raise PathProblem(f"{path} must hold a JSON {'object' if kind is dict else kind.__name__}, "
                          f"got {type(value).__name__}")
    return value


def read_yaml(path: str | Path, limit: int = TEXT_LIMIT_BYTES) -> list[Any]:
    """Every document of a YAML file (a kubeconfig, rendered manifests), None for empty ones."""
    import yaml  # ops has it; the trainer image need not

    text = read_text(path, limit)
    try:
        return list(yaml.safe_load_all(text))
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        raise PathProblem(f"{path} is not YAML" + (f" (line {where.line + 1})" if where else "")) from None
    except RecursionError:  # PyYAML's composer recurses per level, as json does
        raise PathProblem(f"{path} nests sequences or mappings more deeply than Python's parser allows (about "
                          f"{sys.getrecursionlimit()} levels)") from None
    except ValueError as err:  # not a YAMLError: a number past sys.get_int_max_str_digits(), a date 2001-13-45
        raise PathProblem(f"{path} holds a value Python cannot read ({str(err).split(';')[0]})") from None


def _stat(path: str | Path, follow_symlinks: bool = True) -> os.stat_result | None:
    """The path's status, None when nothing is there. Path.exists() and is_dir() raise
    PermissionError for a path inside a folder this user may not enter (mode 000 on FSx, where the
    image runs as uid 1000), and os.path.exists() says False; that is a problem to name, not an
    answer."""
    try:
        return os.stat(path, follow_symlinks=follow_symlinks)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as err:
        raise PathProblem(f"cannot reach {path} ({_reason(err)})") from None


def exists(path: str | Path, follow_symlinks: bool = True) -> bool:
    return _stat(path, follow_symlinks) is not None


def is_file(path: str | Path) -> bool:
    found = _stat(path)
    return found is not None and stat.S_ISREG(found.st_mode)


def is_dir(path: str | Path) -> bool:
    """Whether path is a directory; one this user may not enter is a PathProblem, so that looking
    up a name inside it later cannot fail. Tried, not asked of os.access(): root's answer there
    comes from its capabilities, not the mode."""
    found = _stat(path)
    if found is None or not stat.S_ISDIR(found.st_mode):
        return False
    try:
        os.stat(os.path.join(path, "."))  # resolving "." needs search (x) permission on path
    except OSError as err:
        raise PathProblem(f"cannot enter {path} ({_reason(err)})") from None
    return True


def input_dir(path: str | Path) -> Path:
    """A directory this user can enter and list."""
    path = Path(path)
    if not exists(path):
        raise PathProblem(f"{path} not found")
    if not is_dir(path):
        raise PathProblem(f"{path} is not a directory")
    try:
        with os.scandir(path) as entries:
            next(entries, None)
    except OSError as err:
        raise PathProblem(f"cannot list {path} ({_reason(err)})") from None
    return path


def walk(path: str | Path, follow_symlinks: bool = False) -> Iterator[tuple[str, list[str], list[str]]]:
    """os.walk(path), but a folder below it that this user may not enter or list is a PathProblem:
    os.walk, Path.rglob and torchvision's ImageFolder pass over it without a word, and its files
    silently drop out of the data."""
    def refuse(err: OSError) -> None:
        raise PathProblem(f"cannot list {err.filename} ({_reason(err)})")

    return os.walk(path, onerror=refuse, followlinks=follow_symlinks)


def refuse_dangling_link(path: str | Path) -> None:
    """A symbolic link to nothing where an output goes is a PathProblem: creating the output there
    fails (EEXIST), and an output built beside it and renamed onto it fails (ENOTDIR) only once the
    work is done (a download, an export)."""
    if os.path.islink(path) and not exists(path):
        raise PathProblem(f"{path} is a symbolic link to {os.readlink(path)}, which does not exist")


def output_dir(path: str | Path) -> Path:
    """The directory, created with its parents if needed, and writable by this user."""
    path = Path(path)
    refuse_dangling_link(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise PathProblem(f"{path} exists and is not a directory") from None
    except OSError as err:
        raise PathProblem(f"cannot create directory {path} ({_reason(err)})") from None
    is_dir(path)
    return writable_dir(path)


def _make_and_remove_a_folder(folder: str | Path) -> None:
    """Tried, not asked of os.access(): root's answer there comes from its permitted capabilities,
    not the mode, so a folder of mode 500 passes where creating in it then fails."""
    os.rmdir(tempfile.mkdtemp(prefix=".probe-", dir=folder))


def writable_dir(path: str | Path) -> Path:
    """An existing directory in which this user can create files and folders."""
    try:
        _make_and_remove_a_folder(path)
    except OSError:
        raise PathProblem(f"{path} is not writable by this user (uid {os.getuid()})") from None
    return Path(path)


def creatable_dir(path: str | Path) -> Path:
    """Like output_dir, but creates nothing: for a command that must leave no trace when it then
    fails on another argument. A missing directory is probed by making (and removing) a
    temporary one in its nearest existing ancestor."""
    path = Path(path)
    refuse_dangling_link(path)
    if exists(path):
        return output_dir(path)
    ancestor = path.parent
    while not exists(ancestor) and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not is_dir(ancestor):
        raise PathProblem(f"cannot create directory {path} ({ancestor} is not a directory)")
    try:
        _make_and_remove_a_folder(ancestor)
    except OSError as err:
        raise PathProblem(f"cannot create directory {path} ({_reason(err)})") from None
    return path


def output_file(path: str | Path) -> Path:
    """A file this user can create or replace; its directory is created if needed. Probed by
    creating a file of another name beside it and removing it again (several ranks may check one
    path at once), because root passes every access() check on a file system that still refuses
    new files (/proc, a read-only mount)."""
    path = Path(path)
    found = file_status(path)
    if found is not None and stat.S_ISDIR(found.st_mode):
        raise PathProblem(f"{path} is a directory, expected a file")
    if path.name in ("", ".", ".."):
        raise PathProblem(f"{path} does not name a file")
    try:
        output_dir(path.parent)
    except PathProblem as problem:
        raise PathProblem(f"cannot create {path}: {problem}") from None
    if found is not None:
        try:  # opened to append, not asked of os.access(): nothing is created, truncated or written
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC))
        except OSError:
            raise PathProblem(f"{path} exists and is not writable by this user (uid {os.getuid()})") from None
        return path
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as err:
        raise PathProblem(f"cannot create {path} ({_reason(err)})") from None
    os.close(fd)
    os.unlink(probe)
    return path
