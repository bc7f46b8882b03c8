"""A strict reader for JSON-shaped configuration: typed fields, paths in errors, no unknown keys."""

from __future__ import annotations

import re
from typing import Any

from config.errors import ConfigError

_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false", list: "a list", dict: "an object"}


def type_name(t: type) -> str:
    return _TYPE_NAMES.get(t, t.__name__)


class ObjectReader:
    """Reads one JSON object at `path`; `finish()` rejects keys nobody asked for."""

    def __init__(self, raw: Any, path: str):
        if not isinstance(raw, dict):
            raise ConfigError(path, f"must be an object, got {_describe(raw)}")
        self.raw = raw
        self.path = path
        self._seen: set[str] = set()

    def at(self, key: str) -> str:
        return f"{self.path}.{key}"

    def required(self, key: str, kind: type) -> Any:
        self._seen.add(key)
        if key not in self.raw:
            raise ConfigError(self.at(key), f"is required ({type_name(kind)})")
        return check_type(self.raw[key], kind, self.at(key))

    def optional(self, key: str, kind: type, default: Any = None) -> Any:
        self._seen.add(key)
        if key not in self.raw or self.raw[key] is None:
            return default
        return check_type(self.raw[key], kind, self.at(key))

    def required_match(self, key: str, pattern: "re.Pattern[str]", what: str) -> str:
        """A required string that `pattern` matches whole; `what` says what is allowed."""
        value = self.required(key, str)
        if not pattern.fullmatch(value):
            raise ConfigError(self.at(key), f"must be {what}, got {value!r}")
        return value

    def finish(self) -> None:
        unknown = sorted(set(self.raw) - self._seen)
        if unknown:
            allowed = ", ".join(sorted(self._seen))
            raise ConfigError(self.at(unknown[0]), f"unknown key; allowed keys are {allowed}")


def check_type(value: Any, kind: type, path: str) -> Any:
    # bool is an int in Python; a JSON true must not pass for a node count.
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok:
        raise ConfigError(path, f"must be {type_name(kind)}, got {_describe(value)}")
    return value


def string_list(value: list, path: str) -> tuple[str, ...]:
    return tuple(check_type(item, str, f"{path}[{i}]") for i, item in enumerate(value))


def one_of(value: str, allowed: tuple[str, ...] | list[str], path: str) -> str:
    if value not in allowed:
        raise ConfigError(path, f"must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (dict, list)):
        return type_name(type(value))
    return repr(value)
