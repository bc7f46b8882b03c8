"""`dataSources` parsed into DataSource entries (config/data_sources.py describes the format)."""

from __future__ import annotations

import posixpath
import re

from config.data_sources import FSX_IMPORT_DIR, PREPARE_STEPS, DataSource
from config.environment import Fsx, Nodegroup
from config.errors import ConfigError
from config.kubernetes import FSX_MOUNT_PATH
from config.reader import ObjectReader, one_of

MAX_WORKERS = 256
# Job and ServiceAccount names are data-NAME: DNS labels.
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,38}[a-z0-9]$|^[a-z]$")
_S3_URI = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(?P<prefix>[^\s*?]*)$")


def linked_path(bucket: str, prefix: str, fsx: Fsx) -> str | None:
    """The FSx folder where an import association shows s3://bucket/prefix, or None."""
    if not fsx.s3_import_path:
        return None
    source = f"s3://{bucket}/{prefix}".rstrip("/")
    base = fsx.s3_import_path.rstrip("/")
    if source != base and not source.startswith(base + "/"):
        return None
    return f"{FSX_MOUNT_PATH}{FSX_IMPORT_DIR}{source[len(base):]}"


def _fsx_folder(value: str, path: str) -> str:
    normal = posixpath.normpath(value)
    if not value.startswith(FSX_MOUNT_PATH + "/") or normal != value.rstrip("/") or normal == FSX_MOUNT_PATH:
        raise ConfigError(path, f"must be a folder below {FSX_MOUNT_PATH}/ without '..' or '//', got {value!r}")
    return normal


def _overlap(a: str, b: str) -> bool:
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def parse_data_sources(raw: dict, path: str, *, fsx: Fsx, cpu_groups: tuple[Nodegroup, ...]
                       ) -> tuple[DataSource, ...]:
    sources: list[DataSource] = []
    for name, entry in raw.items():
        where = f"{path}.{name}"
        if not _NAME.fullmatch(name):
            raise ConfigError(where, "source names must be 1-40 lowercase letters, digits or '-', starting with "
                                     f"a letter (the Job is data-NAME), got {name!r}")
        sources.append(_parse_source(name, entry, where, fsx, cpu_groups))
    seen: dict[str, str] = {}
    for source in sources:
        for folder in {source.fsx_path, source.raw_path}:
            for other_folder, other in seen.items():
                if other != source.name and _overlap(folder, other_folder):
                    raise ConfigError(f"{path}.{source.name}.fsxPath",
                                      f"{folder} overlaps {other_folder} of source {other}; each source needs "
                                      f"its own folders")
            seen[folder] = source.name
    return tuple(sources)


def _parse_source(name: str, raw, where: str, fsx: Fsx, cpu_groups) -> DataSource:
    r = ObjectReader(raw, where)
    uri = r.required("s3Uri", str)
    match = _S3_URI.fullmatch(uri if uri.count("/") > 2 else uri + "/")
    if not match or ".." in match.group("bucket") or "//" in match.group("prefix"):
        raise ConfigError(r.at("s3Uri"), f"must be s3://BUCKET/PREFIX/ (no wildcards), got {uri!r}")
    bucket, prefix = match.group("bucket"), match.group("prefix")
    prefix = prefix if not prefix or prefix.endswith("/") else prefix + "/"
    fsx_path = _fsx_folder(r.optional("fsxPath", str, f"{FSX_MOUNT_PATH}/data/{name}"), r.at("fsxPath"))
    prepare = one_of(r.optional("prepare", str, "none"), PREPARE_STEPS, r.at("prepare"))
    tokenizer = r.optional("tokenizer", str)
    text_field = r.optional("textField", str, "text")
    if prepare == "tokens":
        if tokenizer is None:
            raise ConfigError(r.at("tokenizer"), "is required with prepare tokens (a tokenizer.json or a Hugging "
                                                 f"Face model directory below {FSX_MOUNT_PATH}/)")
        tokenizer = _fsx_folder(tokenizer, r.at("tokenizer"))
    elif tokenizer is not None or "textField" in raw:
        raise ConfigError(r.at("tokenizer" if tokenizer is not None else "textField"),
                          "is only allowed with prepare tokens")
    workers = r.optional("workers", int, 32)
    if not 1 <= workers <= MAX_WORKERS:
        raise ConfigError(r.at("workers"), f"must be between 1 and {MAX_WORKERS}, got {workers}")
    if not cpu_groups:
        raise ConfigError(r.at("nodegroup"), "the data Job runs on a CPU node group and this environment has none "
                                             "(add one under cpuNodegroups)")
    nodegroup = r.optional("nodegroup", str, cpu_groups[0].name)
    if nodegroup not in [g.name for g in cpu_groups]:
        raise ConfigError(r.at("nodegroup"), f"must be one of the CPU node groups "
                                             f"({', '.join(g.name for g in cpu_groups)}), got {nodegroup!r}")
    r.finish()
    linked = linked_path(bucket, prefix, fsx)
    if linked and prepare == "none":
        raise ConfigError(r.at("prepare"), f"FSx already shows {uri} at {linked} (fsx.s3ImportPath), so with "
                                           "prepare none there is nothing to do; drop the source or prepare it")
    if linked and _overlap(fsx_path, linked):
        raise ConfigError(r.at("fsxPath"), f"{fsx_path} overlaps {linked}, where FSx shows {uri} "
                                           "(fsx.s3ImportPath); put the prepared data elsewhere")
    return DataSource(name=name, bucket=bucket, prefix=prefix, fsx_path=fsx_path, prepare=prepare,
                      nodegroup=nodegroup, workers=workers, tokenizer=tokenizer, text_field=text_field,
                      linked_path=linked)
