"""config.workloads: a preset's workload is checked against its trainer's declarations when it is
made, reads the trainer's defaults for what it leaves out, and asks for its values in the
trainer's order, then for the outputs in the job's folder."""

from __future__ import annotations

import argparse

import pytest

from config import ConfigError
from config.options import leaf, leaves
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


NOT_A_USABLE_NUMBER = ["inf", "-inf", "nan", "1e400", "-1"]
PAST_64_BITS = [str(2**63), str(10**30)]  # for counts: no tensor size, index or seed holds them


@pytest.mark.parametrize("config", [LlmJobConfig, VisionJobConfig, DdpJobConfig])
def test_every_numeric_flag_refuses_infinite_nan_negative_and_past_64_bit_values(config):
    """Before, --dist-timeout inf, --seed 2**64, --batch-size 10**20 and --lr inf were accepted and
    ended in an OverflowError traceback or a run of NaN weights."""
    numeric = [item for item in leaves(config) if item.option.parse is not None]
    assert len(numeric) >= 7
    accepted = []
    for item in numeric:
        counts = item.option.parse.__name__.endswith("_int")
        for text in NOT_A_USABLE_NUMBER + (PAST_64_BITS if counts else []):
            try:
                item.typed(text)
            except (ValueError, argparse.ArgumentTypeError):
                continue
            accepted.append(f"{item.flag} {text}")
    assert not accepted


def test_timeouts_are_bounded_and_seeds_fit_the_generators():
    for dest in ("dist_timeout", "startup_timeout"):
        for text in ("1e13", str(7 * 24 * 3600 + 1)):  # 1e13 s: gloo's "Invalid timeout" traceback before
            with pytest.raises(argparse.ArgumentTypeError, match="at most 604800 seconds"):
                leaf(LlmJobConfig, dest).typed(text)
        assert leaf(DdpJobConfig, dest).typed("604800") == 604800.0
    assert leaf(VisionJobConfig, "seed").typed(str(2**32 - 1)) == 2**32 - 1
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be in \[0, 4294967295\]"):
        leaf(VisionJobConfig, "seed").typed(str(2**32))
