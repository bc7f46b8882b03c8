"""Initial weights depend on the seed only: one process and three FSDP2 ranks (uneven shards of
the tiny model's rows; the experts, which FSDP2 shards along their even rows, too) start from the
same full tensors, bit for bit."""

from __future__ import annotations

import hashlib
import json

from dataclasses import replace

import pytest
import torch

from config.models import MODELS
from trainer.initialise import init_parameters, parameter_seed, truncated_normal
from trainer.model import Transformer
from trainer_procs import run, torchrun_args

# FSDP2 shards expert weights along dim 1, which must divide evenly: dim 48 and ffn 96 do over 3.
MODELS_UNDER_TEST = {"tiny": MODELS["tiny"], "tiny-moe": replace(MODELS["tiny-moe"], dim=48)}

SCRIPT = r"""
import hashlib, json, sys
from config.models import ModelConfig
from trainer import dist as tdist
from trainer.parallel import build_decoder

rt = tdist.init()
digests = {}
for name, cfg in json.loads(sys.argv[2]).items():
    model = build_decoder(ModelConfig.from_dict(cfg), rt, seed=int(sys.argv[1]))
    for key, value in model.state_dict().items():
        full = value.full_tensor()
        digests[f"{name}/{key}"] = hashlib.sha256(full.numpy().tobytes()).hexdigest()
if rt.is_main:
    print("DIGESTS " + json.dumps(digests))
tdist.shutdown()
from trainer.cli import exit_without_finalization
exit_without_finalization(0)  # as the trainers end: no gloo thread meets a finalizing interpreter
"""


def _one_process_digests(seed: int) -> dict[str, str]:
    out = {}
    for name, cfg in MODELS_UNDER_TEST.items():
        with torch.device("meta"):
            model = Transformer(cfg)
        model.to_empty(device="cpu")
        model.init_weights(torch.device("cpu"), seed=seed)
        out.update({f"{name}/{k}": hashlib.sha256(v.numpy().tobytes()).hexdigest()
                    for k, v in model.state_dict().items()})
    return out


def test_three_sharded_ranks_start_from_the_weights_of_one_process(tmp_path):
    script = tmp_path / "digests.py"
    script.write_text(SCRIPT)
    argv = torchrun_args("trainer.llm", [], nproc=3)
    configs = json.dumps({name: cfg.to_dict() for name, cfg in MODELS_UNDER_TEST.items()})
    argv = argv[:argv.index("-m", 3)] + [str(script), "7", configs]  # the script instead of a module
    rc, out = run(argv, timeout=240)
    assert rc == 0, out
    sharded = json.loads(out.split("DIGESTS ", 1)[1].splitlines()[0])
    assert sharded == _one_process_digests(7)
    assert sharded != _one_process_digests(8)  # and the seed matters


def test_a_parameter_draws_from_its_own_seed_whatever_the_order():
    layer = torch.nn.Linear(4, 3)
    inits = {"weight": truncated_normal(0.02), "bias": truncated_normal(0.02)}
    init_parameters(layer, inits, seed=1)
    expected = torch.empty(3, 4)
    truncated_normal(0.02)(expected, torch.Generator().manual_seed(parameter_seed(1, "weight")))
    assert torch.equal(layer.weight, expected)
    torch.manual_seed(123)  # the global generator plays no part
    again = torch.nn.Linear(4, 3)
    init_parameters(again, dict(reversed(inits.items())), seed=1)
    assert torch.equal(again.weight, layer.weight) and torch.equal(again.bias, layer.bias)


def test_a_parameter_without_an_initialiser_is_an_error_not_left_as_allocated_bytes():
    with pytest.raises(ValueError, match="bias"):
        init_parameters(torch.nn.Linear(4, 3), {"weight": truncated_normal(0.02)})
