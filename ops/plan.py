"""plan: the scale plan on paper, from the config alone (no AWS calls).

For one job preset on its node group at N nodes: whether the model fits the devices' memory
(the estimate the trainer itself logs, config/memory.py), subnet addresses, checkpoint time on
FSx, hourly cost, and the largest N before each limit, named. The assumptions are constants here
and printed with the plan, so a reader can disagree with a number and see where it came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from config import ConfigError, Environment, Nodegroup
from config.memory import GIB, HEADROOM, estimate_memory, usable_device_bytes
from config.checkpoint_time import (
    ASSUMED_MFU, BYTES_PER_PARAM, STEPS_AFTER_SIGNAL, preset_model, ranks_per_node, save_estimate, stop_budget,
)
from config.presets import PRESETS, JobPreset, get_preset
from ops import cost, prices
from ops.errors import OpsError

# Throughput model for data reads: a GPU at config.checkpoint_time.ASSUMED_MFU reads each token
# from FSx as a 4-byte id.
TOKEN_BYTES = 4
# EKS "Nodes per managed node group" (L-BD136A63) default; preflight reads the applied value.
EKS_NODES_PER_NODEGROUP_DEFAULT = 450


@dataclass(frozen=True)
class Limit:
    name: str
    max_nodes: int | None  # None: not computable from what the plan knows
    detail: str


@dataclass
class Plan:
    env: Environment
    preset: JobPreset
    group: Nodegroup
    nodes: int
    sections: list[tuple[str, list[str]]] = field(default_factory=list)
    limits: list[Limit] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what does not fit, besides the limits

    @property
    def exceeded(self) -> list[str]:
        """Everything the plan is OVER: `ops plan` exits 1 when this is not empty."""
        over = [f"{lim.name} (at most {lim.max_nodes} nodes)" for lim in self.limits
                if lim.max_nodes is not None and self.nodes > lim.max_nodes]
        return self.problems + over

    @property
    def binding(self) -> Limit | None:
        known = [lim for lim in self.limits if lim.max_nodes is not None]
        return min(known, key=lambda lim: lim.max_nodes) if known else None


def choose_preset(env: Environment, name: str | None) -> JobPreset:
    if name:
        preset = get_preset(name, "--preset")
        _group_for(env, preset)
        return preset
    names = {g.name for g in env.training_nodegroups}
    gpu = [p for p in PRESETS.values() if p.nodegroup in {g.name for g in env.gpu_nodegroups}]
    fallback = [p for p in PRESETS.values() if p.nodegroup in names]
    if not (gpu or fallback):
        raise OpsError(f"no preset targets a node group of environment {env.name}; pass --preset")
    # Growth planning is about the GPU groups; the first GPU preset is the default subject.
    return (gpu or fallback)[0]


def _group_for(env: Environment, preset: JobPreset) -> Nodegroup:
    try:
        return env.nodegroup(preset.nodegroup)
    except KeyError:
        raise ConfigError("--preset", f"preset {preset.name} runs on node group {preset.nodegroup!r}, "
                                      f"which environment {env.name} does not define") from None


def build(env: Environment, preset_name: str | None = None, nodes: int | None = None,
          vcpu_quota: int | None = None) -> Plan:
    preset = choose_preset(env, preset_name)
    group = _group_for(env, preset)
    n = nodes if nodes is not None else group.max_size
    if n < 1:
        raise OpsError(f"--nodes must be at least 1, got {n}")
    plan = Plan(env, preset, group, n)
    _memory(plan)
    _addresses(plan)
    _checkpoint(plan)
    _cost(plan)
    _limits(plan, vcpu_quota)
    return plan


def _others_ips(env: Environment, group: Nodegroup) -> tuple[int, str]:
    """Addresses every other group takes at maxSize (the system group counted whole, as config does)."""
    total = env.training_subnet_ips_at_max() - group.max_size * group.instance_type.ips_per_node
    parts = [f"system {env.system_nodegroup.max_size} x {env.system_nodegroup.instance_type.ips_per_node}"]
    parts += [f"{g.name} {g.max_size} x {g.instance_type.ips_per_node}"
              for g in env.training_nodegroups if g.name != group.name]
    return total, ", ".join(parts)


def _addresses(plan: Plan) -> None:
    env, group, it = plan.env, plan.group, plan.group.instance_type
    per_node = it.ips_per_node
    others, others_text = _others_ips(env, group)
    need = others + plan.nodes * per_node
    capacity = env.private_subnet_capacity
    if need > capacity:
        plan.problems.append(f"training subnet addresses ({need} of {capacity})")
    # The primary interface is ENA; every EFA device is an EFA-only interface, which has no address.
    efa = f"; its {it.efa_interfaces} EFA-only interfaces take none" if it.efa_interfaces else ""
    plan.sections.append((
        f"Addresses: training subnet in {env.training_availability_zone}, /{env.private_subnet_mask}, "
        f"{capacity} usable", [
            f"{group.name}: {plan.nodes} nodes x {per_node} (1 primary + {it.max_pods} pod IPs{efa}) = "
            f"{plan.nodes * per_node}",
            f"other groups at maxSize ({others_text}) = {others}",
            f"total {need} of {capacity} ({need / capacity:.0%})" + ("  OVER" if need > capacity else ""),
        ]))


def memory_fit(preset: JobPreset, group: Nodegroup, nodes: int):
    """(estimate, usable bytes per rank) for `preset` on `nodes` nodes of `group`; None when the
    preset trains no model of the table."""
    found = preset_model(preset)
    if found is None:
        return None
    _, cfg = found
    w, it = preset.workload, group.instance_type
    ranks = ranks_per_node(preset, it)
    estimate = estimate_memory(cfg, shards=nodes * ranks, batch_size=w.batch_size, seq_len=w.seq_len,
                               activation_checkpointing=w.activation_checkpointing or "none",
                               mixed_precision=it.is_gpu, loss_chunk_tokens=w.loss_chunk_tokens or 0)
    return estimate, usable_device_bytes(it, ranks)


def needed_per_rank(estimate, it) -> float:
    """Bytes a rank needs of what usable_device_bytes gives it: on a CPU node the checkpoint
    stager's host copy comes out of the same memory as the training."""
    return estimate.total + (0.0 if it.is_gpu else estimate.host_staging)


def _memory(plan: Plan) -> None:
    preset, group, it = plan.preset, plan.group, plan.group.instance_type
    nodes = preset.nodes_min  # the fewest nodes the job runs on shard the least
    fit = memory_fit(preset, group, nodes)
    if fit is None:
        plan.sections.append(("Memory per rank", [f"{preset.name} trains no model of the table; no estimate"]))
        return
    estimate, usable = fit
    name, cfg = preset_model(preset)
    w = preset.workload
    ranks = ranks_per_node(preset, it)
    device = f"{it.gpu_model} {it.gpu_memory_gib} GiB" if it.is_gpu else f"{it.memory_gib} GiB / {ranks} ranks"
    margin = usable - needed_per_rank(estimate, it)
    if margin < 0:
        plan.problems.append(f"memory per rank ({-margin / GIB:.1f} GiB short on {nodes} nodes)")
    verdict = (f"fits {preset.name}'s node group {group.name}: {margin / GIB:.1f} GiB to spare" if margin >= 0 else
               f"does NOT fit node group {group.name}: {-margin / GIB:.1f} GiB short")
    host = ranks * estimate.host_staging
    if it.is_gpu:
        host_usable = it.memory_gib * GIB * (1 - HEADROOM)
        if host > host_usable:
            plan.problems.append(f"host memory for checkpoint staging ({host / GIB:.1f} of {host_usable / GIB:.1f} GiB)")
        staging = (f"host memory: checkpoint staging {ranks} ranks x {estimate.host_staging / GIB:.2f} GiB = "
                   f"{host / GIB:.1f} GiB of the node's {it.memory_gib} GiB less {HEADROOM:.0%}"
                   + ("  OVER" if host > host_usable else ""))
    else:
        staging = (f"host memory: checkpoint staging {estimate.host_staging / GIB:.2f} GiB per rank, counted in the "
                   "rank's share above (the node's memory is the device here)")
    plan.sections.append((
        f"Memory per rank: {name}, {cfg.num_params() / 1e9:.2f}e9 parameters "
        f"({cfg.num_params(active=True) / 1e9:.2f}e9 active), sharded over {nodes} x "
        f"{ranks} ranks, micro-batch {w.batch_size} x {w.seq_len}"
        + f", activation checkpointing {w.activation_checkpointing or 'none'}", [
            f"estimate {estimate.summary()}",
            f"usable {usable / GIB:.1f} GiB ({device}, less {HEADROOM:.0%} for the CUDA context, NCCL and "
            f"fragmentation)",
            verdict,
            staging,
        ]))


def _checkpoint(plan: Plan) -> None:
    fsx = plan.env.fsx
    head = (f"Checkpoint on FSx: {fsx.storage_capacity_gib} GiB x {fsx.throughput_per_tib} MB/s/TiB = "
            f"{fsx.throughput_mbps:.0f} MB/s")
    budget = stop_budget(plan.preset, plan.group.instance_type, fsx)
    stop = (f"pods stop within terminationGracePeriodSeconds {budget.grace_s} s: torchrun gives its workers "
            f"{budget.shutdown_timeout_s} s after SIGTERM")
    est = budget.estimate
    if est is None:
        plan.sections.append((head, [f"model {plan.preset.name}: parameter count not in the plan's table; no "
                                     f"estimate", stop + " (the floor for presets without an estimate)"]))
        return
    lines = [f"{est.model}: {est.params / 1e9:.2f}e9 params x {BYTES_PER_PARAM} bytes (bf16 weights + fp32 master "
             f"weights and Adam moments, rounded up) = {est.bytes / 1e9:.1f} GB",
             f"write at full FSx throughput: {est.write_s:.0f} s; sharded, so it does not shrink with more nodes: "
             f"aggregate FSx throughput is the bound"]
    every = plan.preset.workload.checkpoint_every
    if est.step_s and every:
        interval = int(every) * est.step_s
        lines.append(f"every {every} steps of ~{est.step_s:.1f} s ({est.tokens_per_step:,} tokens: global batch "
                     f"{est.global_batch} x {plan.preset.workload.seq_len}, on {est.ranks} ranks at {ASSUMED_MFU:.0%} MFU) "
                     f"= {interval:.0f} s of training: a synchronous save stalls "
                     f"{est.write_s / (interval + est.write_s):.0%} of wall time")
    lines.append(f"{stop}: {STEPS_AFTER_SIGNAL} steps after the signal and, at worst, an asynchronous save in "
                 f"flight and the blocking one ({budget.worker_s:.0f} s)")
    plan.sections.append((head, lines))


def _cost(plan: Plan) -> None:
    env, group = plan.env, plan.group
    items: list[tuple[str, float | None]] = [
        (f"{group.name}: {plan.nodes} x {group.instance_type_name}", _times(plan.nodes, group.instance_type_name)),
        (f"system: {env.system_nodegroup.min_size} x {env.system_nodegroup.instance_type_name} (minSize)",
         _times(env.system_nodegroup.min_size, env.system_nodegroup.instance_type_name)),
    ]
    items += [(f"{g.name}: {g.desired_size} x {g.instance_type_name} (desiredSize)",
               _times(g.desired_size, g.instance_type_name))
              for g in env.training_nodegroups if g.name != group.name and g.desired_size]
    items += [("EKS control plane", prices.EKS_CLUSTER_HOURLY_USD),
              (f"NAT gateways: {len(env.availability_zones)}",
               len(env.availability_zones) * prices.NAT_GATEWAY_HOURLY_USD),
              (f"FSx {env.fsx.storage_capacity_gib} GiB PERSISTENT_2",
               prices.fsx_hourly(env.fsx.storage_capacity_gib, env.fsx.throughput_per_tib))]
    width = max(len(label) for label, _ in items)
    lines = [f"{label:<{width}}  " + (f"${value:>10,.2f}" if value is not None else "  no price in table")
             for label, value in items]
    known = sum(v for _, v in items if v is not None)
    partial = any(v is None for _, v in items)
    lines.append(f"{'total per hour' + (' (partial)' if partial else ''):<{width}}  ${known:>10,.2f}")
    idle = cost.idle(env)
    lines.append(f"idle (no job, groups at minSize): ${idle.hourly:,.2f}/hour, ${idle.monthly:,.2f}/month"
                 + (" (partial)" if idle.partial else ""))
    note = "" if env.region == prices.PRICES_REGION else f", {env.region} priced at {prices.PRICES_REGION} rates"
    plan.sections.append((f"Hourly cost: On-Demand list prices of {prices.PRICES_AS_OF}{note}", lines))


def _times(count: int, instance_type: str) -> float | None:
    price = prices.instance_hourly(instance_type)
    return None if price is None else count * price


def _limits(plan: Plan, vcpu_quota: int | None) -> None:
    env, group, it = plan.env, plan.group, plan.group.instance_type
    others, _ = _others_ips(env, group)
    limits = [Limit("subnet addresses", (env.private_subnet_capacity - others) // it.ips_per_node,
                    f"({env.private_subnet_capacity} - {others} for other groups) // {it.ips_per_node} per node")]
    same_class = sum(g.max_size * g.instance_type.vcpus for g in env.training_nodegroups
                     if g.name != group.name and g.instance_type.quota_class == it.quota_class)
    if env.system_nodegroup.instance_type.quota_class == it.quota_class:
        same_class += env.system_nodegroup.max_size * env.system_nodegroup.instance_type.vcpus
    if vcpu_quota is not None:
        limits.append(Limit(f"On-Demand {it.quota_class} vCPU quota", max(0, vcpu_quota - same_class) // it.vcpus,
                            f"({vcpu_quota} - {same_class} for other groups) // {it.vcpus} vCPUs per node"))
    else:
        limits.append(Limit(f"On-Demand {it.quota_class} vCPU quota", None,
                            "unknown offline: pass --vcpu-quota N (preflight prints the account's value)"))
    if group.capacity.is_reserved:
        limits.append(Limit(f"reservation {group.capacity.reservation_id}", None,
                            "its instance count is in the account: preflight checks it against maxSize"))
    limits.append(Limit("EKS nodes per managed node group", EKS_NODES_PER_NODEGROUP_DEFAULT,
                        "AWS default quota L-BD136A63"))
    est = save_estimate(plan.preset, it, env.fsx)
    rate, model = (est.tokens_per_s, est.model) if est else (None, plan.preset.name)
    if rate:
        per_node = it.gpus * rate * TOKEN_BYTES / 1e6
        limits.append(Limit("FSx throughput (data reads)", int(env.fsx.throughput_mbps // per_node),
                            f"{env.fsx.throughput_mbps:.0f} MB/s // {per_node:.3f} MB/s per node "
                            f"({it.gpus} GPUs x {rate:,.0f} tokens/s x {TOKEN_BYTES} B at {ASSUMED_MFU:.0%} MFU)"))
    else:
        limits.append(Limit("FSx throughput (data reads)", None, f"no throughput model for {model} on {it.name}"))
    plan.limits = limits


def render(plan: Plan) -> str:
    g = plan.group
    out = [f"Scale plan: environment {plan.env.name}, preset {plan.preset.name} on node group {g.name} "
           f"({g.instance_type_name}, maxSize {g.max_size}), {plan.nodes} nodes"]
    for head, lines in plan.sections:
        out.append("")
        out.append(head)
        out += [f"  {line}" for line in lines]
    out.append("")
    out.append(f"Largest node count for {g.name} before each limit")
    width = max(len(lim.name) for lim in plan.limits)
    for lim in plan.limits:
        value = "?" if lim.max_nodes is None else str(lim.max_nodes)
        flag = "  EXCEEDED" if lim.max_nodes is not None and plan.nodes > lim.max_nodes else ""
        out.append(f"  {lim.name:<{width}}  {value:>6}  {lim.detail}{flag}")
    binding = plan.binding
    if binding:
        out.append(f"  => at most {binding.max_nodes} nodes: {binding.name} binds first"
                   + ("" if all(lim.max_nodes is not None for lim in plan.limits)
                      else " among the limits known offline"))
    if plan.exceeded:
        out += ["", f"OVER: {'; '.join(plan.exceeded)}"]
    return "\n".join(out)


def as_data(plan: Plan) -> dict:
    """`ops plan -o json`: the same plan as one JSON object."""
    g = plan.group
    return {"environment": plan.env.name, "preset": plan.preset.name, "nodegroup": g.name,
            "instance_type": g.instance_type_name, "max_size": g.max_size, "nodes": plan.nodes,
            "sections": [{"title": head, "lines": lines} for head, lines in plan.sections],
            "limits": [{"name": lim.name, "max_nodes": lim.max_nodes, "detail": lim.detail,
                        "exceeded": lim.max_nodes is not None and plan.nodes > lim.max_nodes} for lim in plan.limits],
            "binding": plan.binding.name if plan.binding else None, "exceeded": plan.exceeded,
            "step": _step_data(plan)}


def _step_data(plan: Plan) -> dict | None:
    """One optimizer step of the preset on its fewest ranks, as the checkpoint section prints it."""
    est = save_estimate(plan.preset, plan.group.instance_type, plan.env.fsx)
    if est is None:
        return None
    return {"global_batch": est.global_batch,
            "seq_len": plan.preset.workload.seq_len, "tokens_per_step": est.tokens_per_step, "ranks": est.ranks,
            "step_s": est.step_s}
