"""One row of a preflight table."""

from __future__ import annotations

from dataclasses import dataclass

PASS, WARN, FAIL = "pass", "warn", "fail"


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    reason: str
