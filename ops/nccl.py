"""The NCCL verdict: nccl-tests' all_reduce_perf output judged where bandwidth is the bound, and a
pairwise sweep over a node group's nodes that names the slow node or link.

`ops validate` runs the sweep and judges each pair's launcher log; `ops doctor` reads the same logs
back and calls the same functions, so both always say the same thing. Pure Python on config/ only:
the validation runner carries ops and config and nothing else.

Why not nccl-tests' "Avg bus bandwidth": it averages every message size of the run, and below a few
MiB all-reduce is latency-bound (microseconds per call whatever the link), so a run from 8 B keeps
that mean far below what the network carries. The verdict takes the bus bandwidth of the rows at
BANDWIDTH_BOUND_BYTES and above, the lowest of them (out-of-place and in-place), against the
instance type's floor (config/instance_types.py cites the published figures it is set from).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from config.kubernetes import NCCL_GROUP_LABEL, NCCL_PAIR_ANNOTATION

GIB = 1 << 30
# Published two-node all-reduce figures climb to their plateau from 1 GiB on (config/instance_types.py).
BANDWIDTH_BOUND_BYTES = GIB

# One result row of all_reduce_perf (nccl-tests v2.16.9 src/common.cu TimeTest and BenchTime):
# "%12li  %12li  %8s  %6s  %6s" (size, count, type, redop, root), then per mode (out-of-place,
# in-place) "  %7s  %6.2f  %6.2f  %5g" (time, algbw, busbw, #wrong; "N/A" without -c 1).
# Under `mpirun --tag-output` each line starts with "[job,rank]<stdout>:".
_ROW = re.compile(
    r"^(?:\[\d+,\d+\]<stdout>:)?\s*(?P<size>\d+)\s+\d+\s+\w+\s+\w+\s+-?\d+"
    r"\s+\S+\s+[\d.]+\s+(?P<busbw_out>[\d.]+)\s+(?P<wrong_out>\S+)"
    r"\s+\S+\s+[\d.]+\s+(?P<busbw_in>[\d.]+)\s+(?P<wrong_in>\S+)\s*$")
# The summary nccl-tests prints after the last row ("# Out of bounds values : %d %s").
_SUMMARY = re.compile(r"# Out of bounds values\s*:\s*(?P<errors>\d+)")


@dataclass(frozen=True)
class Row:
    size: int
    busbw_out: float
    busbw_in: float
    wrong: int  # wrong elements over both modes; 0 when the run did not check (N/A)


@dataclass(frozen=True)
class Verdict:
    ok: bool
    line: str  # what happened, one line
    busbw: float | None = None  # the lowest bus bandwidth at >= BANDWIDTH_BOUND_BYTES, GB/s


def human_size(size: int) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def rows(text: str) -> list[Row]:
    found = []
    for line in text.splitlines():
        match = _ROW.match(line)
        if match:
            wrong = sum(int(float(w)) for w in (match["wrong_out"], match["wrong_in"]) if w != "N/A")
            found.append(Row(int(match["size"]), float(match["busbw_out"]), float(match["busbw_in"]), wrong))
    return found


def judge(text: str, floor: float) -> Verdict:
    """The verdict on one all_reduce_perf log against `floor` GB/s."""
    table = rows(text)
    summary = _SUMMARY.search(text)
    if not table:
        return Verdict(False, "no all_reduce_perf result rows in the log (the test did not run or its output is lost)")
    wrong = [r for r in table if r.wrong]
    if wrong or (summary and int(summary["errors"])):
        where = f" at {human_size(wrong[0].size)}" if wrong else ""
        count = wrong[0].wrong if wrong else int(summary["errors"])
        return Verdict(False, f"{count} wrong elements{where}: all-reduce returned corrupt data "
                              "(a faulty GPU, NVLink or network path)")
    if summary is None:
        return Verdict(False, f"the log ends mid-table after {human_size(table[-1].size)}: all_reduce_perf did not "
                              "finish (killed, timed out, or the log was cut)")
    bound = [r for r in table if r.size >= BANDWIDTH_BOUND_BYTES]
    if not bound:
        return Verdict(False, f"no message size of at least {human_size(BANDWIDTH_BOUND_BYTES)} ran (largest "
                              f"{human_size(table[-1].size)}): bus bandwidth is only judged where it is the bound")
    low = min(bound, key=lambda r: min(r.busbw_out, r.busbw_in))
    high = max(bound, key=lambda r: max(r.busbw_out, r.busbw_in))
    lowest, peak = min(low.busbw_out, low.busbw_in), max(high.busbw_out, high.busbw_in)
    sizes = f"{human_size(bound[0].size)} to {human_size(bound[-1].size)}"
    if lowest < floor:
        return Verdict(False, f"{lowest:g} GB/s at {human_size(low.size)}, below the floor of {floor:g} GB/s "
                              f"(bus bandwidth over {sizes}, peak {peak:g})", lowest)
    return Verdict(True, f"{lowest:g} GB/s lowest over {sizes} (peak {peak:g} at {human_size(high.size)}), "
                         f"floor {floor:g} GB/s", lowest)


# --- the pairwise sweep ---------------------------------------------------------------------------

def pairs_in_rounds(nodes: list[str]) -> list[list[tuple[str, str]]]:
    """Pairs of nodes, in rounds of disjoint pairs (each round's tests run at once). The nodes in
    name order form a ring and every ring edge is one pair, so each node is in two pairs: a node
    that is slow fails both of its pairs, a slow link one. Two nodes make one pair; one, none."""
    ring = sorted(set(nodes))
    n = len(ring)
    if n < 2:
        return []
    if n == 2:
        return [[(ring[0], ring[1])]]
    edges = [(ring[i], ring[(i + 1) % n]) for i in range(n)]
    first, second, closing = edges[0:n - 1:2], edges[1:n - 1:2], edges[n - 1]
    if n % 2 == 0:  # the closing pair (last, first node) shares no node with the second round
        return [first, second + [closing]]
    return [first, second, [closing]]


@dataclass(frozen=True)
class PairResult:
    nodes: tuple[str, str]
    verdict: Verdict


@dataclass(frozen=True)
class Sweep:
    ok: bool
    line: str
    slow_nodes: tuple[str, ...] = ()
    slow_links: tuple[tuple[str, str], ...] = ()


def sweep_verdict(results: list[PairResult]) -> Sweep:
    """One line for a group: every pair passed, or which node (every pair with it failed) or link
    (a failed pair whose nodes each passed with another node) is slow, with the pairs' reasons."""
    if not results:
        return Sweep(False, "no NCCL pair ran")
    failed = [r for r in results if not r.verdict.ok]
    if not failed:
        worst = min(results, key=lambda r: r.verdict.busbw if r.verdict.busbw is not None else float("inf"))
        return Sweep(True, f"{len(results)} pair(s) passed; lowest {worst.nodes[0]}<->{worst.nodes[1]}: "
                           f"{worst.verdict.line}")
    pairs_of: dict[str, list[PairResult]] = {}
    for result in results:
        for node in result.nodes:
            pairs_of.setdefault(node, []).append(result)
    nodes = tuple(sorted(n for n, rs in pairs_of.items() if len(rs) > 1 and all(not r.verdict.ok for r in rs)))
    links = tuple(r.nodes for r in failed if not set(r.nodes) & set(nodes))
    parts = []
    if nodes:
        parts.append(f"slow node {', '.join(nodes)} (every pair with it failed)")
    if len(results) == 1:
        parts.append(f"pair {failed[0].nodes[0]}<->{failed[0].nodes[1]} failed (with two nodes a slow node "
                     "cannot be told from a slow link)")
    elif links:
        parts.append(f"slow link {', '.join(f'{a}<->{b}' for a, b in links)} (both nodes passed with other nodes)")
    reasons = "; ".join(f"{r.nodes[0]}<->{r.nodes[1]}: {r.verdict.line}" for r in failed)
    return Sweep(False, f"{'; '.join(parts)}: {reasons}", nodes, links)


def pinned(template: dict, nodes: tuple[str, str], index: int, group: str) -> dict:
    """A copy of the group's NCCL MPIJob template (k8s/pods/validation.py) whose two workers run on
    `nodes`: named TEMPLATE-<index>, the MPIJob and its pods labelled with the group, the launcher
    annotated with the pair (what `ops doctor` reads back)."""
    job = json.loads(json.dumps(template))
    job["metadata"]["name"] = f"{template['metadata']['name']}-{index}"
    job["metadata"].setdefault("labels", {})[NCCL_GROUP_LABEL] = group
    replicas = job["spec"]["mpiReplicaSpecs"]
    launcher = replicas["Launcher"]["template"].setdefault("metadata", {})
    launcher.setdefault("labels", {})[NCCL_GROUP_LABEL] = group
    launcher.setdefault("annotations", {})[NCCL_PAIR_ANNOTATION] = " ".join(nodes)
    # The workers too: a NetworkPolicy can then select a sweep's pods by their group.
    replicas["Worker"]["template"].setdefault("metadata", {}).setdefault("labels", {})[NCCL_GROUP_LABEL] = group
    worker = replicas["Worker"]["template"]["spec"]
    required = worker.setdefault("affinity", {}).setdefault("nodeAffinity", {}).setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", {"nodeSelectorTerms": [{}]})
    for term in required["nodeSelectorTerms"]:
        # matchFields on the node's name: exactly these two nodes, whatever their labels.
        term.setdefault("matchFields", []).append({"key": "metadata.name", "operator": "In", "values": list(nodes)})
    return job


def pair_of(annotations: dict | None) -> tuple[str, str] | None:
    """The pair a launcher pod ran, from its annotation; None for a launcher of no sweep."""
    names = ((annotations or {}).get(NCCL_PAIR_ANNOTATION) or "").split()
    return (names[0], names[1]) if len(names) == 2 else None
