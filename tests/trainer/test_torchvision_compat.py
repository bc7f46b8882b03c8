"""torchvision imports beside the CPU torch, and transformers, which imports it, still loads models."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trainer_procs import REPO, job_env

pytest.importorskip("torchvision", reason="torchvision is a pinned dependency")


def _fresh(code: str) -> subprocess.CompletedProcess:
    # A fresh interpreter: this one already ran the shim (tests/conftest.py).
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=job_env(), capture_output=True, text=True,
                          timeout=180)


def test_torchvision_models_build_and_train_after_the_shim():
    p = _fresh("from trainer.torchvision_compat import import_torchvision\n"
               "import torch\n"
               "tv = import_torchvision()\n"
               "m = tv.models.resnet18(num_classes=5)\n"
               "m(torch.randn(2, 3, 32, 32)).sum().backward()\n"
               "print('ok', tv.__version__, m.fc.weight.grad.shape)")
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith("ok 0.28.0") and "torch.Size([5, 512])" in p.stdout


def test_transformers_loads_a_model_after_the_shim():
    p = _fresh("from trainer.torchvision_compat import prepare\n"
               "prepare()\n"
               "import transformers\n"
               "cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,\n"
               "                               num_attention_heads=4, num_key_value_heads=4, vocab_size=64)\n"
               "print(type(transformers.LlamaForCausalLM(cfg)).__name__)")
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "LlamaForCausalLM"


def test_prepare_is_idempotent_and_reports_whether_the_operators_are_real():
    from trainer.torchvision_compat import prepare
    first = prepare()
    assert prepare() is first
    import torch
    if not first:  # the CPU torch beside PyPI's CUDA build: schemas only, no kernels
        with pytest.raises(NotImplementedError):
            torch.ops.torchvision.nms(torch.zeros(1, 4), torch.zeros(1), 0.5)
