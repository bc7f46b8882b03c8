"""config.workloads: a preset's workload is checked against its trainer's declarations when it is
made, reads the trainer's defaults for what it leaves out, and asks for its values in the
trainer's order, then for the outputs in the job's folder."""

from __future__ import annotations

import pytest

from config import ConfigError
from config.options import leaves
from config.workloads.ddp import DdpJobConfig, DdpWorkload
from config.workloads.llm import LlmJobConfig, LlmWorkload
from config.workloads.vision import VisionJobConfig, VisionWorkload


def test_an_unknown_option_or_a_value_the_trainer_refuses_is_a_config_error_naming_the_flag():
    with pytest.raises(ConfigError, match=r"^trainer.llm spteps: not an option of trainer.llm"):
        LlmWorkload(spteps=10)
    with pytest.raises(ConfigError) as err:
        LlmWorkload(steps=0)
    assert err.value.line() == "config error: trainer.llm --steps: must be a positive integer, got 0"
    with pytest.raises(ConfigError, match=r"--model: must be one of .*got 'llama-9000'"):
        LlmWorkload(model="llama-9000")
    with pytest.raises(ConfigError, match=r"--label-smoothing: must be in \[0, 1\), got 1.0"):
        VisionWorkload(label_smoothing=1.0)


def test_a_workload_reads_its_values_and_the_trainers_defaults_for_the_rest():
    w = LlmWorkload(steps=30, model="tiny", lr=1e-3, activation_checkpointing="selective")
    assert (w.steps, w.model, w.lr, w.activation_checkpointing) == (30, "tiny", 1e-3, "selective")
    assert (w.seq_len, w.loss_chunk_tokens, w.init_from_hf, w.compile) == (128, 0, None, False)
    assert getattr(VisionWorkload(), "init_from_hf", None) is None  # not an option of trainer.vision
    assert w.trainer_config.optimizer.lr == 1e-3 and w.trainer_config.batch.seq_len == 128
    assert w == LlmWorkload(steps=30, model="tiny", lr=1e-3, activation_checkpointing="selective") and hash(w)


def test_argv_follows_the_trainers_order_then_the_job_folder():
    w = LlmWorkload(compile=True, model="tiny", steps=30, lr=0.001)
    assert w.argv("/ck/job") == ["--steps", "30", "--model", "tiny", "--lr", "0.001", "--compile",
                                 "--checkpoint-dir", "/ck/job", "--metrics-file", "/ck/job/metrics.jsonl"]
    assert DdpWorkload(epochs=3).argv("/ck/d") == ["--epochs", "3", "--snapshot-path", "/ck/d/snapshot.pt"]


@pytest.mark.parametrize("config", [LlmJobConfig, VisionJobConfig, DdpJobConfig])
def test_every_trainer_flag_is_declared_once_with_its_help(config):
    found = leaves(config)  # refuses a flag declared twice
    assert all(item.help and item.flag.startswith("--") for item in found)
    assert config.module.startswith("trainer.")
