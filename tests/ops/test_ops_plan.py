"""plan: addresses, checkpoint time, cost and node limits on paper, from the config alone."""

from __future__ import annotations

import json
from datetime import date

import pytest

from config import ConfigError, load_environment
from config.instance_types import INSTANCE_TYPES
from ops import plan, prices
from ops.envconfig import load, read_environments
from ops_fakes import isolated_aws_env, run_ops


def limits(p: plan.Plan) -> dict[str, int | None]:
    return {lim.name: lim.max_nodes for lim in p.limits}


def section(p: plan.Plan, starts: str) -> list[str]:
    return next(lines for head, lines in p.sections if head.startswith(starts))


def test_prod_defaults_to_its_gpu_preset_at_max_size():
    p = plan.build(load("prod"))
    assert (p.preset.name, p.group.name, p.nodes) == ("llama3-8b-fsdp", "p5", 16)


def test_addresses_count_a_primary_ip_and_pod_ips_per_node_and_every_other_group():
    lines = section(plan.build(load("prod")), "Addresses")
    # p5: 1 + 51 pods (what card 0 leaves the VPC CNI; EFA-only interfaces carry no address);
    # system 6 x 59 and cpu 4 x 59 at maxSize.
    assert lines[0].endswith("= 832") and "32 EFA-only interfaces take none" in lines[0]
    assert lines[1].endswith("= 590")
    assert lines[2] == "total 1422 of 8187 (17%)"


def test_subnet_limit_is_the_largest_count_config_validation_still_accepts():
    p = plan.build(load("prod"))
    largest = limits(p)["subnet addresses"]
    assert largest == 146
    environments = read_environments()
    for size, ok in ((largest, True), (largest + 1, False)):
        changed = json.loads(json.dumps(environments))
        changed["prod"]["gpuNodegroups"][0]["maxSize"] = size
        if ok:
            load_environment(changed, "prod")
        else:
            with pytest.raises(ConfigError, match="vpcCidr"):
                load_environment(changed, "prod")


def test_checkpoint_time_is_model_state_over_fsx_throughput():
    lines = section(plan.build(load("prod")), "Checkpoint")
    # 8.03e9 params x 16 B = 128.5 GB; 4800 GiB x 500 MB/s/TiB = 2343.75 MB/s -> 54.8 s.
    assert "= 128.5 GB" in lines[0] and "x 16 bytes" in lines[0]
    assert lines[1].startswith("write at full FSx throughput: 55 s")
    assert "every 200 steps" in lines[2] and "stalls" in lines[2]


def test_hourly_cost_sums_the_dated_price_table():
    p = plan.build(load("prod"), nodes=4)
    head = next(h for h, _ in p.sections if h.startswith("Hourly cost"))
    assert prices.PRICES_AS_OF in head
    lines = section(p, "Hourly cost")
    assert lines[0].startswith("p5: 4 x p5.48xlarge") and lines[0].endswith("$    220.16")
    amounts = [float(line.rsplit("$", 1)[1].replace(",", "")) for line in lines[:-1]]
    assert amounts[-1] == pytest.approx(sum(amounts[:-1]), abs=0.011)


def test_plan_shows_what_the_environment_costs_idle():
    """prod idle: control plane, 3 NAT gateways, 4800 GiB of FSx at 500 MB/s/TiB, 2 system nodes."""
    hourly = (prices.EKS_CLUSTER_HOURLY_USD + 3 * prices.NAT_GATEWAY_HOURLY_USD
              + 4800 * prices.FSX_PERSISTENT_2_GB_MONTH_USD[500] / prices.HOURS_PER_MONTH
              + 2 * prices.INSTANCE_HOURLY_USD["m5.xlarge"])
    last = section(plan.build(load("prod")), "Hourly cost")[-1]
    assert last == (f"idle (no job, groups at minSize): ${hourly:,.2f}/hour, "
                    f"${hourly * prices.HOURS_PER_MONTH:,.2f}/month")


def test_a_vcpu_quota_becomes_a_named_limit_and_can_bind_first():
    p = plan.build(load("prod"), vcpu_quota=3072)
    assert limits(p)["On-Demand P vCPU quota"] == 16
    assert p.binding.name == "On-Demand P vCPU quota"
    assert "at most 16 nodes: On-Demand P vCPU quota binds first" in plan.render(p)


def test_without_a_quota_the_plan_says_what_it_does_not_know():
    text = plan.render(plan.build(load("prod")))
    assert "unknown offline: pass --vcpu-quota N" in text
    assert "reservation cr-0123456789abcdef0" in text
    assert "=> at most 146 nodes: subnet addresses binds first among the limits known offline" in text


def test_nodes_past_a_limit_are_flagged():
    text = plan.render(plan.build(load("prod"), nodes=160))
    assert "total 8910 of 8187 (109%)  OVER" in text
    subnet = next(line for line in text.splitlines() if line.strip().startswith("subnet addresses"))
    assert subnet.endswith("EXCEEDED")


def test_a_cpu_preset_has_no_throughput_model_and_says_so():
    p = plan.build(load("dev"), "cpu-ddp")
    assert limits(p)["FSx throughput (data reads)"] is None
    assert "no estimate" in section(p, "Checkpoint")[0]


def test_a_preset_on_a_group_the_environment_lacks_is_a_config_error():
    with pytest.raises(ConfigError, match="node group 'p4d'"):
        plan.build(load("prod"), "llama2-7b-fsdp")


def test_price_table_is_dated_and_covers_the_configured_types():
    date.fromisoformat(prices.PRICES_AS_OF)
    for env_name in ("dev", "prod"):
        env = load(env_name)
        for group in (env.system_nodegroup, *env.training_nodegroups):
            assert prices.instance_hourly(group.instance_type_name) is not None, group.instance_type_name
    assert all(price > 0 for price in prices.INSTANCE_HOURLY_USD.values())
    # A priced type the instance table does not know would be a typo nobody notices.
    assert set(prices.INSTANCE_HOURLY_USD) <= set(INSTANCE_TYPES)
    assert set(prices.FSX_PERSISTENT_2_GB_MONTH_USD) == {125, 250, 500, 1000}


def test_plan_command_prints_the_plan(tmp_path):
    result = run_ops(["plan", "--env", "prod", "--nodes", "8"], isolated_aws_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Scale plan: environment prod, preset llama3-8b-fsdp on node group p5")
    assert "8 nodes" in result.stdout.splitlines()[0]


def test_the_plan_says_whether_a_preset_fits_its_node_group_and_by_how_much():
    from config.memory import estimate_memory
    from config.models import MODELS
    p = plan.build(load("prod"), "llama31-70b-fsdp")
    lines = section(p, "Memory per rank")
    # The trainer logs the same function's summary at start-up.
    expected = estimate_memory(MODELS["llama3.1-70b"], shards=4 * 8, batch_size=1, seq_len=8192,
                               activation_checkpointing="full", mixed_precision=True, loss_chunk_tokens=2048)
    assert lines[0] == f"estimate {expected.summary()}"
    assert lines[1].startswith("usable 72.0 GiB (H100 80 GiB")
    assert lines[2].startswith("fits llama31-70b-fsdp's node group p5: ") and "GiB to spare" in lines[2]


def test_the_plan_shows_the_chunked_loss_accumulator_and_the_checkpoint_stagers_host_copy(monkeypatch):
    from dataclasses import replace
    from config.models import MODELS
    lines = section(plan.build(load("prod"), "llama3-8b-fsdp"), "Memory per rank")
    cfg = MODELS["llama3.1-8b"]
    assert "activation checkpointing selective" in section_head(plan.build(load("prod"), "llama3-8b-fsdp"))
    assert f"loss accumulator {6 * cfg.vocab_size * cfg.dim / 2**30:.2f}" in lines[0]  # fp32 sum + a bf16 chunk
    per_rank = 12 * cfg.num_params() / 16 / 2**30  # fp32 weights and two AdamW moments of 1/16 of the model
    assert lines[3] == (f"host memory: checkpoint staging 8 ranks x {per_rank:.2f} GiB = {8 * per_rank:.1f} GiB of "
                        "the node's 2048 GiB less 10%")
    # A node with too little host memory for the copies is over.
    monkeypatch.setitem(INSTANCE_TYPES, "p5.48xlarge", replace(INSTANCE_TYPES["p5.48xlarge"], memory_gib=40))
    p = plan.build(load("prod"), "llama3-8b-fsdp")
    assert section(p, "Memory per rank")[3].endswith("  OVER")
    assert p.exceeded[0].startswith("host memory for checkpoint staging (44.9 of 36.0 GiB)")


def section_head(p: plan.Plan) -> str:
    return next(head for head, _ in p.sections if head.startswith("Memory per rank"))


def test_a_preset_on_too_few_nodes_is_reported_short():
    from dataclasses import replace
    from config.presets import get_preset
    group = load("prod").nodegroup("p5")
    estimate, usable = plan.memory_fit(replace(get_preset("llama31-70b-fsdp"), nodes_min=1), group, 1)
    assert estimate.total > usable


@pytest.mark.parametrize("env_name", ["dev", "prod"])
def test_every_llm_preset_fits_its_node_group_wherever_it_is_rendered(env_name):
    from k8s.pods.pytorchjob import presets_for
    env = load(env_name)
    for preset in presets_for(env):
        fit = plan.memory_fit(preset, env.nodegroup(preset.nodegroup), preset.nodes_min)
        if fit is not None:
            estimate, usable = fit
            needed = plan.needed_per_rank(estimate, env.nodegroup(preset.nodegroup).instance_type)
            assert needed <= usable, (preset.name, estimate.summary(), usable / 2**30)


def test_plan_has_no_parameter_table_of_its_own():
    assert not hasattr(plan, "MODEL_PARAMETERS")


def test_plan_within_every_limit_exits_0_and_its_json_says_nothing_is_over(tmp_path):
    result = run_ops(["plan", "--env", "prod", "--nodes", "8", "-o", "json"], isolated_aws_env(tmp_path))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["preset"], data["nodegroup"], data["nodes"], data["exceeded"]) == ("llama3-8b-fsdp", "p5", 8, [])
    limits_by_name = {lim["name"]: lim for lim in data["limits"]}
    assert limits_by_name["subnet addresses"] == {
        "name": "subnet addresses", "max_nodes": 146, "exceeded": False,
        "detail": limits_by_name["subnet addresses"]["detail"]}
    assert data["binding"] == "subnet addresses"
    assert any(s["title"].startswith("Addresses") for s in data["sections"])


def test_plan_over_a_limit_exits_1_and_names_what_is_over(tmp_path):
    result = run_ops(["plan", "--env", "prod", "--nodes", "160"], isolated_aws_env(tmp_path))
    assert result.returncode == 1, result.stderr
    assert result.stderr == ""
    last = result.stdout.strip().splitlines()[-1]
    assert last == ("OVER: training subnet addresses (8910 of 8187); subnet addresses (at most 146 nodes)")
    as_json = run_ops(["plan", "--env", "prod", "--nodes", "160", "-o", "json"], isolated_aws_env(tmp_path))
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["exceeded"] == ["training subnet addresses (8910 of 8187)",
                                                      "subnet addresses (at most 146 nodes)"]


def test_a_model_that_does_not_fit_its_ranks_is_over(monkeypatch):
    from dataclasses import replace
    from config.presets import PRESETS
    short = replace(PRESETS["llama31-70b-fsdp"], name="llama31-70b-one-node", nodes_min=1)
    monkeypatch.setitem(PRESETS, short.name, short)
    p = plan.build(load("prod"), short.name, nodes=1)
    [problem] = p.exceeded
    assert problem.startswith("memory per rank (") and "GiB short on 1 nodes)" in problem


def _with_workload(monkeypatch, name: str, **changes):
    """The preset `name` with its workload changed, under a name of its own that `ops plan` finds."""
    from dataclasses import replace
    from config.presets import PRESETS
    base = PRESETS[name]
    changed = replace(base, name=f"{name}-probe", workload=type(base.workload)(**{**base.workload.values, **changes}))
    monkeypatch.setitem(PRESETS, changed.name, changed)
    return changed


def step(p: plan.Plan) -> dict:
    return plan.as_data(p)["step"]


def test_doubling_the_global_batch_doubles_the_step_time_and_its_tokens(monkeypatch):
    """Issue 19: a step trains the global batch over all ranks (each accumulating micro-batches),
    so its time follows the global batch, not the per-rank micro-batch."""
    prod = load("prod")
    base = plan.build(prod, "llama3-8b-fsdp")
    doubled = _with_workload(monkeypatch, "llama3-8b-fsdp", global_batch_size=64)
    twice = plan.build(prod, doubled.name)
    assert step(twice)["tokens_per_step"] == 2 * step(base)["tokens_per_step"]
    assert step(twice)["step_s"] == pytest.approx(2 * step(base)["step_s"])
    assert "every 200 steps of ~4.8 s (524,288 tokens: global batch 64 x 8192, on 16 ranks" in \
        section(twice, "Checkpoint")[2]


def test_the_micro_batch_alone_does_not_change_the_step_time(monkeypatch):
    prod = load("prod")
    smaller = _with_workload(monkeypatch, "llama3-8b-fsdp", batch_size=1)  # 2 micro-batches of 1 a step
    assert step(plan.build(prod, smaller.name)) == step(plan.build(prod, "llama3-8b-fsdp"))


@pytest.mark.parametrize("env_name", ["dev", "prod"])
def test_every_llm_presets_tokens_per_step_is_its_global_batch_times_its_sequence_length(env_name):
    from k8s.pods.pytorchjob import presets_for
    env = load(env_name)
    checked = 0
    for preset in presets_for(env):
        data = step(plan.build(env, preset.name))
        if data is None:
            continue
        w = preset.workload
        assert (data["global_batch"], data["tokens_per_step"]) == (w.global_batch_size,
                                                                  w.global_batch_size * w.seq_len), preset.name
        checked += 1
    assert checked or env_name == "dev"
