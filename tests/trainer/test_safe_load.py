"""Checkpoints on shared storage never run code: DCP's own loader unpickles a checkpoint's metadata
and its non-tensor values in full (the tests show a marker file appearing); trainer.safe_load
loads what the trainers write, bit for bit, and refuses a crafted file before any of it runs."""

from __future__ import annotations

import pickle
import warnings

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict

from config.models import MODELS
from crafted import CreatesMarker
from trainer import safe_load
from trainer.model import Transformer

warnings.filterwarnings("ignore", message="torch.distributed is disabled")


def trained_state():
    torch.manual_seed(0)
    model = Transformer(MODELS["tiny"])
    model.init_weights()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    tokens = torch.randint(0, model.cfg.vocab_size, (2, 9))
    model(tokens[:, :-1], tokens[:, 1:]).backward()
    optimizer.step()
    model_sd, optim_sd = get_state_dict(model, optimizer)
    # Non-tensor values of the kinds the trainers keep beside the weights: ints, floats, tuples, None.
    return {"app": {"model": model_sd, "optim": optim_sd},
            "train": {"step": 7, "tokens_seen": 12345, "rng": torch.get_rng_state(), "window": (3, 0.5, None)}}


def fresh_like(state):
    """Same structure with every tensor zeroed and every plain value blanked, to be filled by a load."""
    if isinstance(state, dict):
        return {k: fresh_like(v) for k, v in state.items()}
    if isinstance(state, list):  # DCP flattens lists as it does dicts (an optimizer's param_groups)
        return [fresh_like(v) for v in state]
    if isinstance(state, torch.Tensor):
        return torch.zeros_like(state)
    return None


def assert_same(a, b, where="state"):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}.{i}")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    else:
        assert a == b, where


def test_what_the_trainers_write_loads_bit_for_bit(tmp_path):
    state = trained_state()
    dcp.save(state, checkpoint_id=str(tmp_path), no_dist=True)
    loaded = fresh_like(state)
    safe_load.load(loaded, str(tmp_path), no_dist=True)
    assert_same(state, loaded)


def load_error(fn) -> str:
    try:
        fn()
    except (Exception, CheckpointException) as exc:  # DCP wraps the reader's error
        return str(exc)
    raise AssertionError("the crafted checkpoint loaded")


def test_a_crafted_metadata_file_is_refused_and_never_runs(tmp_path):
    state = {"w": torch.ones(3)}
    dcp.save(state, checkpoint_id=str(tmp_path / "ckpt"), no_dist=True)
    marker = tmp_path / "marker"
    (tmp_path / "ckpt" / ".metadata").write_bytes(pickle.dumps(CreatesMarker(marker)))
    error = load_error(lambda: safe_load.load({"w": torch.zeros(3)}, str(tmp_path / "ckpt"), no_dist=True))
    assert "unsafe checkpoint: its metadata refers to io.open" in error or \
        "unsafe checkpoint: its metadata refers to builtins.open" in error, error
    assert not marker.exists()
    # DCP's own loader runs it: the reason this module exists.
    load_error(lambda: dcp.load({"w": torch.zeros(3)}, checkpoint_id=str(tmp_path / "ckpt"), no_dist=True))
    assert marker.exists()


def test_a_crafted_value_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "marker"
    dcp.save({"w": torch.ones(3), "extra": CreatesMarker(marker)}, checkpoint_id=str(tmp_path / "ckpt"), no_dist=True)
    assert not marker.exists()
    error = load_error(lambda: safe_load.load({"w": torch.zeros(3), "extra": None}, str(tmp_path / "ckpt"),
                                             no_dist=True))
    assert "unsafe checkpoint: its value extra: it refers to io.open, which is neither a tensor nor plain data" \
        in error, error
    assert not marker.exists()
    dcp.load({"w": torch.zeros(3), "extra": None}, checkpoint_id=str(tmp_path / "ckpt"), no_dist=True)
    assert marker.exists()


@pytest.mark.parametrize("payload", [b"not a pickle", pickle.dumps({"a": 1}), b""])
def test_metadata_that_is_not_dcps_is_an_error_not_a_crash(tmp_path, payload):
    dcp.save({"w": torch.ones(3)}, checkpoint_id=str(tmp_path), no_dist=True)
    (tmp_path / ".metadata").write_bytes(payload)
    error = load_error(lambda: safe_load.load({"w": torch.zeros(3)}, str(tmp_path), no_dist=True))
    assert "metadata" in error
