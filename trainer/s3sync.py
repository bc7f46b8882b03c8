"""`python -m trainer.s3sync --src s3://BUCKET/PREFIX/ --dest DIR`: copy an S3 prefix to a folder.

What the data-preparation Job runs to put a dataset onto FSx. Objects download in parallel
(--workers threads); each goes to a temporary name beside its target (`.NAME.s3sync-partial`) and
is renamed into place only once complete, so an interrupted run never leaves a partial file
under a final name. The download asks S3 for exactly the listed version (If-Match on the
listed ETag), so an object replaced mid-copy fails that file rather than mixing versions.

Resumable: after each file lands, its key, size and ETag are appended to a journal
(DEST/.s3sync-journal.jsonl). A later run skips an object whose journal entry has the same size
and ETag and whose file is still there with that size; an object changed in S3 (new ETag or
size) is copied again. Progress goes to the log as plain lines (files, bytes, rate) at most every
--progress-seconds, readable in `kubectl logs` where a carriage-return bar is not.

Exit status: 0 all copied, 1 some objects failed (each named on one line), 2 bad arguments or
no access to the listing.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from config.options import positive_int
from config.paths import creatable_dir
from trainer.cli import Parser, UsageError, checked_path, run_main

JOURNAL = ".s3sync-journal.jsonl"
PARTIAL_SUFFIX = ".s3sync-partial"
CHUNK_BYTES = 8 << 20
_S3_URI = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(?P<prefix>.*)$")


@dataclass(frozen=True)
class S3Object:
    key: str
    size: int
    etag: str


def parse_uri(uri: str) -> tuple[str, str]:
    match = _S3_URI.match(uri)
    if not match:
        raise UsageError("--src", f"must be s3://BUCKET/PREFIX/ (a bucket, optionally a prefix), got {uri!r}")
    prefix = match.group("prefix")
    return match.group("bucket"), prefix if not prefix or prefix.endswith("/") else prefix + "/"


def relative_path(key: str, prefix: str) -> PurePosixPath | None:
    """Where `key` lands under the destination; None for folder markers. A key that would escape
    the destination ('..', absolute) is refused."""
    rest = key[len(prefix):]
    if not rest or rest.endswith("/"):
        return None
    path = PurePosixPath(rest)
    if path.is_absolute() or ".." in path.parts or any(p in ("", ".") for p in rest.split("/")):
        raise UsageError("--src", f"object key {key!r} does not map to a file below --dest")
    return path


def list_objects(client, bucket: str, prefix: str) -> list[S3Object]:
    objects = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            objects.append(S3Object(item["Key"], item["Size"], item["ETag"]))
    return objects


class Journal:
    """key -> (size, ETag) of every file a run finished; appended line by line, the last entry of
    a key wins, and a torn last line (a run killed while writing it) is ignored."""

    def __init__(self, path: Path):
        self.path = path
        self.done: dict[str, tuple[int, str]] = {}
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                    self.done[entry["key"]] = (entry["size"], entry["etag"])
                except (ValueError, KeyError, TypeError):
                    continue
        self._lock = threading.Lock()
        self._file = None

    def is_done(self, obj: S3Object, target: Path) -> bool:
        if self.done.get(obj.key) != (obj.size, obj.etag):
            return False
        try:
            return target.stat().st_size == obj.size
        except FileNotFoundError:
            return False

    def record(self, obj: S3Object) -> None:
        with self._lock:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("a", encoding="utf-8")
            self._file.write(json.dumps({"key": obj.key, "size": obj.size, "etag": obj.etag}) + "\n")
            self._file.flush()
            self.done[obj.key] = (obj.size, obj.etag)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def download(client, bucket: str, obj: S3Object, target: Path) -> None:
    """Stream `obj` (exactly the listed version) to a temporary name, then rename it into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}{PARTIAL_SUFFIX}")
    try:
        body = client.get_object(Bucket=bucket, Key=obj.key, IfMatch=obj.etag)["Body"]
        written = 0
        with partial.open("wb") as f:
            for chunk in body.iter_chunks(CHUNK_BYTES):
                f.write(chunk)
                written += len(chunk)
        if written != obj.size:
            raise OSError(f"got {written} of {obj.size} bytes")
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


class Progress:
    def __init__(self, files: int, size: int, every: float, echo=print):
        self.files, self.size, self.every, self.echo = files, size, every, echo
        self.done_files = self.done_bytes = 0
        self.start = self.last = time.monotonic()

    def add(self, size: int, force: bool = False) -> None:
        self.done_files += 1
        self.done_bytes += size
        now = time.monotonic()
        if force or now - self.last >= self.every:
            self.last = now
            rate = self.done_bytes / max(now - self.start, 1e-9) / 2**20
            self.echo(f"s3sync: {self.done_files:,}/{self.files:,} files, {_gib(self.done_bytes)}/{_gib(self.size)} "
                      f"GiB, {rate:.1f} MiB/s")


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f}"


def sync(client, uri: str, dest: Path, *, workers: int = 16, progress_seconds: float = 30.0, echo=print) -> int:
    """Copy what is missing or changed; returns how many objects failed (each echoed)."""
    bucket, prefix = parse_uri(uri)
    objects = list_objects(client, bucket, prefix)
    journal = Journal(dest / JOURNAL)
    todo, skipped = [], 0
    for obj in objects:
        rel = relative_path(obj.key, prefix)
        if rel is None:
            continue
        target = dest.joinpath(*rel.parts)
        if journal.is_done(obj, target):
            skipped += 1
        else:
            todo.append((obj, target))
    total = sum(o.size for o, _ in todo)
    echo(f"s3sync: s3://{bucket}/{prefix} -> {dest}: {len(todo):,} objects to copy ({_gib(total)} GiB), "
         f"{skipped:,} already copied")
    progress = Progress(len(todo), total, progress_seconds, echo)
    failed = 0
    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(download, client, bucket, obj, target): obj for obj, target in todo}
            for future in as_completed(futures):
                obj = futures[future]
                error = future.exception()
                if error is not None:
                    failed += 1
                    echo(f"s3sync: failed s3://{bucket}/{obj.key}: {' '.join(str(error).split())[:200]}")
                    continue
                journal.record(obj)
                progress.add(obj.size)
    finally:
        journal.close()
    echo(f"s3sync: done: {progress.done_files:,} copied, {skipped:,} already there, {failed:,} failed "
         f"({_gib(progress.done_bytes)} GiB in {time.monotonic() - progress.start:.0f} s)")
    return failed


def s3_client(region: str | None, workers: int):
    import boto3
    from botocore.config import Config

    return boto3.client("s3", region_name=region, config=Config(
        max_pool_connections=workers, retries={"max_attempts": 10, "mode": "adaptive"}))


def main(argv=None) -> int:
    p = Parser(prog="python -m trainer.s3sync", description="Copy an S3 prefix to a folder, resumably.")
    p.add_argument("--src", required=True, help="s3://BUCKET/PREFIX/")
    p.add_argument("--dest", required=True, help="folder to copy into")
    p.add_argument("--region", default=None, help="the bucket's region (default: the environment's)")
    p.add_argument("--workers", type=positive_int, default=16, help="parallel downloads")
    p.add_argument("--progress-seconds", type=float, default=30.0, help="seconds between progress lines")
    args = p.parse_args(argv)
    parse_uri(args.src)
    checked_path("--dest", creatable_dir, args.dest)  # before listing what may be millions of objects
    from botocore.exceptions import BotoCoreError, ClientError

    client = s3_client(args.region, args.workers)
    try:
        failed = sync(client, args.src, Path(args.dest), workers=args.workers,
                      progress_seconds=args.progress_seconds)
    except (ClientError, BotoCoreError) as err:
        raise UsageError("--src", f"cannot list {args.src}: {' '.join(str(err).split())[:200]}") from None
    return 1 if failed else 0


if __name__ == "__main__":
    run_main(main)
