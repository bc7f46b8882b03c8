"""Pass/warn/fail tables (preflight, doctor): one row type, one rendering, one verdict."""

from __future__ import annotations

from dataclasses import dataclass

PASS, WARN, FAIL = "pass", "warn", "fail"
# A row that does not apply where the command runs (preflight in the pipeline): shown with why, never a verdict.
SKIP = "skip"


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    reason: str


def failed(rows: list[Check]) -> bool:
    return any(r.status == FAIL for r in rows)


def render(rows: list[Check]) -> str:
    width = max(len(r.name) for r in rows)
    lines = [f"{'CHECK':<{width}}  STATUS  REASON"]
    lines += [f"{r.name:<{width}}  {r.status.upper():<6}  {r.reason}" for r in rows]
    counts = {s: sum(r.status == s for r in rows) for s in (PASS, WARN, FAIL, SKIP)}
    skipped = f", {counts[SKIP]} skipped" if counts[SKIP] else ""
    lines.append(f"{counts[PASS]} passed, {counts[WARN]} warned, {counts[FAIL]} failed{skipped}")
    return "\n".join(lines)


def report(rows: list[Check], *, as_json: bool, about: dict, title: str) -> int:
    """The table as text under `title`, or one JSON document with `about`; exit 1 when a row failed."""
    from ops.errors import EXIT_PROBLEM
    from ops.output import to_json

    if as_json:
        print(to_json({**about, "checks": rows, "failed": failed(rows)}))
    else:
        print(title)
        print(render(rows))
    return EXIT_PROBLEM if failed(rows) else 0
