"""`-o table|json` for the commands that print tables: one flag, one JSON shape per table.

JSON goes to stdout as one document (a table becomes a list of objects keyed by its column
names in snake_case), so `python -m ops status -o json | jq` works as kubectl users expect.
Errors stay one line on stderr in both formats.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from typing import Any, Sequence

FORMATS = ("table", "json")


def add_output_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", choices=FORMATS, default="table",
                        help="table (default) or json: one JSON document on stdout")


def key(header: str) -> str:
    """'max nodes' -> 'max_nodes', 'IPs/node' -> 'ips_per_node', 'template KB' -> 'template_kb'."""
    return re.sub(r"[^a-z0-9]+", "_", header.lower().replace("/", " per ")).strip("_")


def records(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    keys = [key(h) for h in headers]
    return [dict(zip(keys, row)) for row in rows]


def to_json(data: Any) -> str:
    def default(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return dataclasses.asdict(value)
        return str(value)

    return json.dumps(data, indent=2, default=default)
