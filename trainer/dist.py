"""Process-group set-up at the edge of every workload: backend, device, and bounded waits.

Restarted gloo workers were seen hanging inside init_process_group under torchrun (NOTES.md).
Every group here is created with an explicit timeout, so a stuck rendezvous or collective
raises, the worker dies, and the elastic agent restarts the group instead of waiting forever.

Two bounds: start-up (joining the group, loading a checkpoint or Hugging Face weights, the first
step with its torch.compile warm-up) takes minutes at scale and gets a generous one; once the
first step is done, end_startup() shortens the group's timeout to the steady-state one, so a hang
in training is found in about a minute. ProcessGroup.set_timeout changes the bound of later
collectives of every backend of the group (ProcessGroupNCCL::setTimeout and gloo's set the
options' timeout that each new collective takes; tested for gloo in tests/trainer/test_dist.py).
Checkpoint collectives, saves and loads, run on their own gloo group with the start-up bound.
On GPU pods NCCL's flight recorder writes each rank's last collectives when one times out
(k8s/pods/pytorchjob.py sets TORCH_NCCL_DEBUG_INFO_TEMP_FILE); init creates the folder it points into.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from config.workloads.common import DistConfig
from trainer import nccl_net
from trainer.cli import UsageError
from trainer.log import warn


@dataclass(frozen=True)
class Runtime:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str
    checkpoint_group: dist.ProcessGroup | None = None
    timeout_s: float = DistConfig.timeout_s  # the steady-state bound end_startup() sets
    startup_timeout_s: float = DistConfig.startup_timeout_s  # the bound until then, and of checkpoint_group

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _per_attempt_store(timeout: timedelta) -> dist.Store | None:
    """Under torchrun's c10d rendezvous the workers share the agent's TCPStore, the same server in
    every restart round, and torch reads it without a per-round prefix. A restarted worker can
    then read the address a killed worker published in the previous round, and gloo's connect
    fails ("Connection refused") or hangs until the timeout, round after round; seen here in
    about half of the SIGKILL runs. Keying the round's keys by the restart count fixes that.
    The count is the same for all workers only when one agent started them all (one node). The
    etcd-v2 rendezvous shares rank 0's agent store across rounds in the same way, so the training
    pods turn the sharing off (k8s/pods/torchrun_env.py AGENT_ENV) and get no agent store here.
    """
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or os.environ.get("GROUP_WORLD_SIZE", "1") != "1":
        return None
    client = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                           int(os.environ["WORLD_SIZE"]), is_master=False, timeout=timeout)
    return dist.PrefixStore(f"/trainer/attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", client)


# What names a process's place in a job: torchrun sets all five; init sets the first three itself
# for a one-process job. A child started with a copy of this environment takes them for a job to join.
JOB_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_ONE_PROCESS = False  # init made this process a one-process job: RANK, WORLD_SIZE and LOCAL_RANK are its own


def init(cfg: DistConfig = DistConfig(), *, checkpoint_group: bool = False) -> Runtime:
    """Join the job torchrun described in the environment, or make a one-process job when run
    directly (benchmarks, single-GPU runs), so workloads need no special case for either."""
    # Outside torchrun, or again in a process an earlier call made a one-process job of (tests,
    # notebooks): RANK is then this module's.
    global _ONE_PROCESS
    lone = _ONE_PROCESS = _ONE_PROCESS or "RANK" not in os.environ
    if lone:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    elif missing := [k for k in ("WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]:
        # RANK left in a shell or a pod spec by hand: torch would fail deep in its rendezvous.
        raise UsageError("RANK", f"RANK={os.environ['RANK']} is set but {', '.join(missing)} "
                                 f"{'is' if len(missing) == 1 else 'are'} not; run under torchrun, which sets "
                                 "them all, or unset RANK for a one-process run")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    timeout = timedelta(seconds=cfg.startup_timeout_s)
    kwargs = {"device_id": device} if backend == "nccl" else {}
    # A one-process job rendezvouses with itself in memory. It used to pick a free port and
    # bind it later, and another process took the port in between (EADDRINUSE, seen in CI).
    store = dist.HashStore() if lone else _per_attempt_store(timeout)
    if store is not None:
        kwargs.update(store=store, rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    _prepare_flight_recorder(os.environ)
    # On an EFA node group NCCL must run over aws-ofi-nccl's EFA provider (trainer/nccl_net.py).
    nccl_log = nccl_net.prepare(os.environ) if backend == "nccl" else None
    try:
        dist.init_process_group(backend=backend, timeout=timeout, **kwargs)
    except Exception as err:
        if nccl_log is not None:
            nccl_net.confirm(nccl_log, os.environ, init_error=err)  # NotOnEfa when NCCL's log says why
        raise
    if nccl_log is not None:
        print(nccl_net.confirm(nccl_log, os.environ,
                               force=lambda: dist.all_reduce(torch.zeros(1, device=device))), flush=True)
    ckpt_pg = None
    if checkpoint_group:
        # Asynchronous checkpoint saves run collectives from a background thread; on their own
        # gloo group they never interleave with the training collectives, and they keep the
        # start-up bound because reading or writing a large model's state takes minutes.
        ckpt_pg = dist.new_group(backend="gloo", timeout=timeout)
    return Runtime(dist.get_rank(), dist.get_world_size(), local_rank, device, backend, ckpt_pg, cfg.timeout_s,
                   cfg.startup_timeout_s)


def end_startup(rt: Runtime) -> None:
    """After the first step on every rank: later training collectives get the steady-state bound."""
    if dist.is_initialized():
        dist.group.WORLD.set_timeout(timedelta(seconds=rt.timeout_s))


def _prepare_flight_recorder(env) -> None:
    """NCCL's flight recorder writes <prefix><rank> when a collective times out; the prefix's
    folder (in the job's checkpoint folder on FSx) must exist, and nothing else creates it."""
    prefix = env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
    if prefix:
        try:
            os.makedirs(os.path.dirname(prefix) or ".", exist_ok=True)
        except OSError as exc:
            warn(f"NCCL flight recorder folder {os.path.dirname(prefix)}: {exc.strerror or exc}; "
                 "a collective timeout will leave no trace")


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_mean(value: float, rt: Runtime) -> float:
    if rt.world_size == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64 if rt.device.type == "cpu" else torch.float32,
                     device=rt.device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.item() / rt.world_size


def same_buffers(module: torch.nn.Module) -> None:
    """Rank 0's buffers (BatchNorm's running statistics) on every rank of a replicated model. Each
    rank's last moved with its own micro-batch, and DDP broadcasts rank 0's only before the next
    training forward; what is evaluated or saved must be one model, whatever the world size."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        for buffer in module.buffers():
            dist.broadcast(buffer, 0)


def lowest_ranks(problem: str | None) -> str | None:
    """The problem (a line) of the lowest rank that has one, None where none has: the same on every
    rank, so that all stop with the same line. One collective, made only when the ranks stop or
    start, never per step."""
    problems = [problem]
    if dist.is_initialized():
        problems = [None] * dist.get_world_size()
        dist.all_gather_object(problems, problem)
    return next((p for p in problems if p is not None), None)
