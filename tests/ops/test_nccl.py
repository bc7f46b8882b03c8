"""The NCCL verdict (ops/nccl.py) on all_reduce_perf logs in nccl-tests v2.16.9's exact table format
(tests/ops/fixtures/nccl/, written with src/common.cu's printf formats, as the launcher's
`mpirun --tag-output` prints them), and the pairwise sweep that names a slow node or link."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from config.instance_types import INSTANCE_TYPES
from ops import nccl

FIXTURES = Path(__file__).parent / "fixtures" / "nccl"
P5_FLOOR = INSTANCE_TYPES["p5.48xlarge"].nccl_busbw_floor_gbps


def log(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_a_healthy_two_node_p5_log_passes_on_its_lowest_bandwidth_bound_row():
    verdict = nccl.judge(log("p5-pass.log"), P5_FLOOR)
    assert verdict.ok and verdict.busbw == 441.3
    assert verdict.line == "441.3 GB/s lowest over 1 GiB to 16 GiB (peak 488.4 at 16 GiB), floor 350 GB/s"


def test_every_table_row_is_read_whatever_the_mpirun_tag():
    rows = nccl.rows(log("p5-pass.log"))
    assert [r.size for r in rows] == [1 << 30, 2 << 30, 4 << 30, 8 << 30, 16 << 30]
    untagged = "\n".join(line.split(":", 1)[1] for line in log("p5-pass.log").splitlines() if "]<stdout>:" in line)
    assert nccl.rows(untagged) == rows
    # Header, device and NCCL INFO lines are not rows.
    assert not nccl.rows("\n".join(line for line in log("p5-pass.log").splitlines() if "#" in line or "INFO" in line))


def test_tcp_sockets_instead_of_efa_fail_naming_the_bandwidth_and_the_floor():
    verdict = nccl.judge(log("p5-fail-sockets.log"), P5_FLOOR)
    assert not verdict.ok and verdict.busbw == 10.88
    assert verdict.line.startswith("10.88 GB/s at 1 GiB, below the floor of 350 GB/s")


def test_one_slow_size_fails_even_when_the_others_and_the_average_pass():
    text = log("p5-fail-one-size.log")
    average = float(re.search(r"Avg bus bandwidth\s*:\s*(\S+)", text).group(1))
    assert average > P5_FLOOR
    verdict = nccl.judge(text, P5_FLOOR)
    assert not verdict.ok and verdict.line.startswith("299.8 GB/s at 4 GiB, below the floor")


def test_the_average_over_latency_bound_sizes_is_not_what_is_judged():
    """The old check compared nccl-tests' "Avg bus bandwidth" (8 B to 2 GiB) with the floor: a
    healthy pair averages far below it. The verdict reads only the rows from 1 GiB on."""
    text = log("p5-old-range-pass.log")
    average = float(re.search(r"Avg bus bandwidth\s*:\s*(\S+)", text).group(1))
    assert average < P5_FLOOR / 3
    verdict = nccl.judge(text, P5_FLOOR)
    assert verdict.ok and verdict.line.startswith("438.1 GB/s lowest over 1 GiB to 2 GiB")


def test_a_log_cut_mid_table_fails_saying_the_test_did_not_finish():
    verdict = nccl.judge(log("p5-truncated.log"), P5_FLOOR)
    assert not verdict.ok
    assert verdict.line.startswith("the log ends mid-table after 2 GiB: all_reduce_perf did not finish")


def test_wrong_elements_fail_as_corrupt_data_whatever_the_bandwidth():
    verdict = nccl.judge(log("p5-wrong.log"), P5_FLOOR)
    assert not verdict.ok and verdict.line.startswith("12 wrong elements at 4 GiB: all-reduce returned corrupt data")


@pytest.mark.parametrize("text, words", [
    ("", "no all_reduce_perf result rows"),
    ("[1,0]<stdout>:# Collective test starting: all_reduce_perf\n--------\nmpirun noticed that process rank 3 "
     "exited on signal 9 (Killed).", "no all_reduce_perf result rows"),
])
def test_a_log_without_a_table_fails(text, words):
    verdict = nccl.judge(text, P5_FLOOR)
    assert not verdict.ok and words in verdict.line


def test_a_run_that_never_reached_a_bandwidth_bound_size_is_not_judged_on_small_ones():
    small = "\n".join(line for line in log("p5-old-range-pass.log").splitlines()
                      if not re.match(r"\[1,0\]<stdout>:\s+(1073741824|2147483648)\s", line))
    verdict = nccl.judge(small, P5_FLOOR)
    assert not verdict.ok and verdict.line.startswith("no message size of at least 1 GiB ran (largest 512 MiB)")


@pytest.mark.parametrize("count", range(1, 9))
def test_pairs_come_in_rounds_of_disjoint_pairs_and_put_every_node_in_two(count):
    nodes = [f"ip-10-0-1-{i}" for i in range(count)]
    rounds = nccl.pairs_in_rounds(list(reversed(nodes)))
    pairs = [p for r in rounds for p in r]
    for r in rounds:
        flat = [n for p in r for n in p]
        assert len(flat) == len(set(flat)), f"a round uses a node twice: {r}"
    if count < 2:
        assert rounds == []
    elif count == 2:
        assert pairs == [(nodes[0], nodes[1])]
    else:
        assert len(pairs) == count and len({frozenset(p) for p in pairs}) == count
        assert all(sum(n in p for p in pairs) == 2 for n in nodes)
        assert len(rounds) == (2 if count % 2 == 0 else 3)


def _results(slow_nodes=(), slow_links=(), count=4):
    nodes = [f"n{i}" for i in range(count)]
    out = []
    for pair in (p for r in nccl.pairs_in_rounds(nodes) for p in r):
        bad = set(pair) & set(slow_nodes) or frozenset(pair) in {frozenset(link) for link in slow_links}
        out.append(nccl.PairResult(pair, nccl.judge(log("p5-fail-sockets.log" if bad else "p5-pass.log"), P5_FLOOR)))
    return out


def test_the_sweep_names_the_node_in_every_slow_pair():
    sweep = nccl.sweep_verdict(_results(slow_nodes=("n2",)))
    assert not sweep.ok and sweep.slow_nodes == ("n2",) and sweep.slow_links == ()
    assert sweep.line.startswith("slow node n2 (every pair with it failed): ")
    assert "n1<->n2: 10.88 GB/s at 1 GiB" in sweep.line and "n2<->n3: 10.88 GB/s at 1 GiB" in sweep.line
    assert "n0<->n1" not in sweep.line and "n3<->n0" not in sweep.line


def test_the_sweep_names_a_slow_link_whose_nodes_pass_with_others():
    sweep = nccl.sweep_verdict(_results(slow_links=(("n1", "n2"),), count=5))
    assert not sweep.ok and sweep.slow_nodes == () and sweep.slow_links == (("n1", "n2"),)
    assert sweep.line.startswith("slow link n1<->n2 (both nodes passed with other nodes)")


def test_two_nodes_make_one_pair_and_a_failure_says_node_and_link_cannot_be_told_apart():
    sweep = nccl.sweep_verdict(_results(slow_nodes=("n0",), count=2))
    assert not sweep.ok and sweep.slow_nodes == ()
    assert sweep.line.startswith("pair n0<->n1 failed (with two nodes a slow node cannot be told from a slow link)")


def test_a_sweep_where_every_pair_passes_names_the_lowest_pair():
    sweep = nccl.sweep_verdict(_results(count=3))
    assert sweep.ok and sweep.line.startswith("3 pair(s) passed; lowest n0<->n1: 441.3 GB/s")
    assert not nccl.sweep_verdict([]).ok


def test_a_pinned_copy_runs_its_two_workers_on_exactly_that_pair_and_says_so():
    from config.kubernetes import NCCL_GROUP_LABEL, NCCL_PAIR_ANNOTATION
    from k8s.pods.validation import validation_objects
    from ops import envconfig

    [template] = [o for o in validation_objects(envconfig.load("dev")) if o["metadata"]["name"] == "nccl-allreduce-p5"]
    job = nccl.pinned(template, ("ip-a", "ip-b"), 3, "p5")
    assert job["metadata"]["name"] == "nccl-allreduce-p5-3" and job["metadata"]["labels"][NCCL_GROUP_LABEL] == "p5"
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"]
    assert launcher["labels"][NCCL_GROUP_LABEL] == "p5"
    assert nccl.pair_of(launcher["annotations"]) == ("ip-a", "ip-b") and NCCL_PAIR_ANNOTATION in launcher["annotations"]
    assert job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"][NCCL_GROUP_LABEL] == "p5"
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    [term] = worker["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["ip-a", "ip-b"]}]
    assert worker["nodeSelector"] == template["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"]
    assert "affinity" not in template["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"], "the template stays"
    # Still a valid pod template of the cluster's version (the operator would drop what is not).
    from k8s.pods.podspec import validate_pod_templates

    assert validate_pod_templates(job, "1.35")


def test_the_launcher_runs_all_reduce_perf_where_bandwidth_is_the_bound_and_judges_nothing_itself():
    from k8s.pods.validation import nccl_launcher_script
    from ops import envconfig

    dev = envconfig.load("dev")
    p5, p4d = dev.nodegroup("p5"), dev.nodegroup("p4d")
    assert "all_reduce_perf -b 1G -e 16G -f 2 -g 1 -c 1" in nccl_launcher_script(p5)
    assert "all_reduce_perf -b 1G -e 8G -f 2 -g 1 -c 1" in nccl_launcher_script(p4d), "three 8 GiB buffers fit 40 GB"
    assert "Avg bus bandwidth" not in nccl_launcher_script(p5) and "awk -v" not in nccl_launcher_script(p5)
