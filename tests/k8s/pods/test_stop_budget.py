"""Pods get the time their save needs: terminationGracePeriodSeconds and torchrun's shutdown timeout
from the preset's estimated save time on the environment's FSx (config/checkpoint_time.py), the
estimate `ops plan` prints; and GPU pods leave NCCL flight-recorder dumps in the job's folder."""

from __future__ import annotations

import mmap
from pathlib import Path

import pytest
import torch

from config.checkpoint_time import AGENT_EXIT_S, MIN_WORKER_STOP_S, STEPS_AFTER_SIGNAL, stop_budget
from config.presets import CLUSTER_CHECKPOINT_ROOT, get_preset
from k8s.pods.pytorchjob import FLIGHT_RECORDER_DIR
from preset_pods import rendered
from ops import plan

FLIGHT_RECORDER = ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_ENABLE_MONITORING",
                   "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")


def test_every_pod_waits_for_its_workers_save_and_torchruns_exit(environments):
    for env, preset, spec, env_vars in rendered(environments):
        budget = stop_budget(preset, env.nodegroup(preset.nodegroup).instance_type, env.fsx)
        assert int(env_vars["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"]) == budget.shutdown_timeout_s, preset.name
        assert spec["terminationGracePeriodSeconds"] == budget.shutdown_timeout_s + AGENT_EXIT_S, preset.name
        assert budget.shutdown_timeout_s >= MIN_WORKER_STOP_S
        est = budget.estimate
        if est is not None:  # at worst an asynchronous save in flight, then the blocking one
            assert budget.shutdown_timeout_s >= 2 * est.write_s + STEPS_AFTER_SIGNAL * (est.step_s or 0)


def test_the_70b_preset_on_prod_fsx_gets_minutes_not_the_default_30_seconds(prod):
    budget = stop_budget(get_preset("llama31-70b-fsdp"), prod.nodegroup("p5").instance_type, prod.fsx)
    # 1128.9 GB at 2344 MB/s = 482 s a write; two writes and three ~10 s steps.
    assert round(budget.estimate.write_s) == 482 and budget.grace_s == 1024


def test_plan_prints_the_grace_period_the_pods_get(prod):
    lines = [line for head, lines in plan.build(prod, "llama3-8b-fsdp").sections if head.startswith("Checkpoint")
             for line in lines]
    budget = stop_budget(get_preset("llama3-8b-fsdp"), prod.nodegroup("p5").instance_type, prod.fsx)
    assert any(f"terminationGracePeriodSeconds {budget.grace_s} s" in line
               and f"{budget.shutdown_timeout_s} s after SIGTERM" in line for line in lines), lines


def test_torchrun_takes_its_shutdown_timeout_from_the_variable_the_pods_set(monkeypatch):
    from torch.distributed.run import config_from_args, parse_args
    monkeypatch.setenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "1014")
    config, _, _ = config_from_args(parse_args(["--nnodes=1", "--nproc-per-node=1", "train.py"]))
    assert config.shutdown_timeout == 1014
    monkeypatch.delenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT")
    config, _, _ = config_from_args(parse_args(["--nnodes=1", "--nproc-per-node=1", "train.py"]))
    assert config.shutdown_timeout == 30  # what a pod without it would get


def test_gpu_pods_dump_the_nccl_flight_recorder_into_the_jobs_checkpoint_folder(environments):
    seen_gpu = False
    for env, preset, spec, env_vars in rendered(environments):
        if env.nodegroup(preset.nodegroup).instance_type.is_gpu:
            seen_gpu = True
            assert env_vars["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == \
                f"{preset.job_dir(CLUSTER_CHECKPOINT_ROOT)}/{FLIGHT_RECORDER_DIR}/rank-"
            assert int(env_vars["TORCH_NCCL_TRACE_BUFFER_SIZE"]) > 0
            assert env_vars["TORCH_NCCL_DUMP_ON_TIMEOUT"] == env_vars["TORCH_NCCL_ENABLE_MONITORING"] == "1"
        else:
            assert not set(FLIGHT_RECORDER) & set(env_vars), preset.name
    assert seen_gpu


@pytest.mark.parametrize("name", FLIGHT_RECORDER)
def test_the_flight_recorder_variables_are_read_by_the_installed_torch(name):
    """Their names in torch 2.13's c10d: the first three in ProcessGroupNCCL.hpp, the dump file's
    prefix only in the library (DebugInfoWriter)."""
    torch_dir = Path(torch.__file__).parent
    header = torch_dir / "include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp"
    if name in header.read_text():
        return
    with open(torch_dir / "lib" / "libtorch_cpu.so", "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert m.find(name.encode() + b"\0") >= 0, name
