"""How long a preset's checkpoint takes to write to FSx, and so how long its pods get to stop.

One estimate serves `ops plan` (which prints it) and the PyTorchJob (k8s/pods/pytorchjob.py), whose pods get
terminationGracePeriodSeconds and torchrun's shutdown timeout from stop_budget() below.

On SIGTERM torchrun forwards the signal to its workers and SIGKILLs those still running after its
shutdown timeout: 30 s unless TORCH_ELASTIC_SHUTDOWN_TIMEOUT says otherwise (torch 2.13,
torch/distributed/launcher/api.py LaunchConfig.__post_init__; tests/k8s/pods/test_stop_budget.py
checks the installed torch reads it). A worker stops STEPS_AFTER_SIGNAL steps after the signal
(trainer/preemption.py), then waits for an asynchronous save still in flight
and writes its blocking one: at worst two full writes. The kubelet SIGKILLs the container at the
end of the grace period, so the grace period covers torchrun's timeout and torchrun's own exit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from config.environment import Fsx
from config.instance_types import InstanceType
from config.models import MODELS, ModelConfig
from config.presets import JobPreset, LlmWorkload

# Checkpoint bytes per parameter: bf16 weights (2) + fp32 master weights (4) + fp32 Adam first
# and second moments (4 + 4) = 14, rounded up to 16 for the sharded files' metadata and slack.
BYTES_PER_PARAM = 16
# A GPU at this MFU processes peak*MFU/(FLOPs per token) tokens/s (config.models: 6 x active
# parameters plus attention).
ASSUMED_MFU = 0.40
# Steps a worker may run after SIGTERM reaches it: the one in flight, and the two more until the
# agreement to stop is read (trainer/late_read.py LAG_STEPS: it is read two steps late, so the host
# never waits for the device).
STEPS_AFTER_SIGNAL = 3
# The least a worker gets: presets without an estimate (the vision models, the CPU smoke jobs)
# need seconds to save, but also finish a validation pass or a DataLoader's teardown.
MIN_WORKER_STOP_S = 120
# torchrun's own exit after its workers have: its rendezvous and process teardown.
AGENT_EXIT_S = 30


def preset_model(preset: JobPreset) -> tuple[str, ModelConfig] | None:
    """The model a preset trains, from the model table (None: not an LLM preset)."""
    w = preset.workload
    if not isinstance(w, LlmWorkload) or not w.model:
        return None
    return w.model, MODELS[w.model]


def ranks_per_node(preset: JobPreset, instance: InstanceType) -> int:
    """torchrun's processes on each node: the preset's number, else one per GPU (one on a CPU type)."""
    return preset.nproc_per_node or (instance.gpus if instance.is_gpu else 1)


def global_batch(preset: JobPreset, ranks: int) -> int:
    """Sequences per optimizer step over all ranks: the preset's --global-batch-size, else what the
    trainer then takes (trainer/batching.py): ranks x --batch-size."""
    w = preset.workload
    return w.global_batch_size or ranks * w.batch_size


@dataclass(frozen=True)
class SaveEstimate:
    model: str
    params: float
    bytes: float
    write_s: float  # at the file system's full aggregate throughput: sharded, so no faster with more nodes
    tokens_per_s: float | None  # per GPU at ASSUMED_MFU; None without a peak FLOPs figure
    step_s: float | None  # one optimizer step at that rate, on the preset's fewest ranks
    ranks: int  # the preset's fewest: nodes_min x ranks per node; an elastic job's longest step
    global_batch: int  # sequences per optimizer step over all ranks, whatever their number
    tokens_per_step: int  # global batch x sequence length


def save_estimate(preset: JobPreset, instance: InstanceType, fsx: Fsx) -> SaveEstimate | None:
    found = preset_model(preset)
    if found is None:
        return None
    name, cfg = found
    params = cfg.num_params()
    size = params * BYTES_PER_PARAM
    w = preset.workload
    ranks = preset.nodes_min * ranks_per_node(preset, instance)
    sequences = global_batch(preset, ranks)
    tokens = sequences * w.seq_len
    peak = instance.peak_bf16_flops
    rate = ASSUMED_MFU * peak / cfg.flops_per_token(w.seq_len) if peak else None
    # Each rank trains its share of the global batch every step, in global / (ranks x micro-batch)
    # micro-batches: the step takes that share's tokens at the per-GPU rate.
    step = tokens / ranks / rate if rate else None
    return SaveEstimate(name, params, size, size / (fsx.throughput_mbps * 1e6), rate, step, ranks, sequences, tokens)


@dataclass(frozen=True)
class StopBudget:
    worker_s: float  # the worst case for a worker to stop: steps after the signal plus two writes
    shutdown_timeout_s: int  # TORCH_ELASTIC_SHUTDOWN_TIMEOUT: torchrun's wait before SIGKILL
    grace_s: int  # terminationGracePeriodSeconds
    estimate: SaveEstimate | None


def stop_budget(preset: JobPreset, instance: InstanceType, fsx: Fsx) -> StopBudget:
    estimate = save_estimate(preset, instance, fsx)
    worker = 0.0
    if estimate is not None:
        worker = STEPS_AFTER_SIGNAL * (estimate.step_s or 0.0) + 2 * estimate.write_s
    shutdown = math.ceil(max(worker, MIN_WORKER_STOP_S))
    return StopBudget(worker, shutdown, shutdown + AGENT_EXIT_S, estimate)
