"""The Llama decoder, its data and its schedule, in-process (no process group needed)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from config.models import MODELS
from trainer.metrics import peak_flops
from trainer.model import Attention, Transformer, apply_rope, loss_fn, rope_frequencies


def _tiny_initialised() -> Transformer:
    with torch.device("meta"):
        model = Transformer(MODELS["tiny"])
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    model.init_weights(torch.device("cpu"))
    return model


def test_weights_built_on_meta_are_initialised_explicitly_no_nan_and_a_sane_std():
    model = _tiny_initialised()
    for name, p in model.named_parameters():
        assert torch.isfinite(p).all(), name
        if name.endswith("norm.weight"):
            assert torch.equal(p, torch.ones_like(p)), name
        elif p.dim() == 2 and "tok_embeddings" not in name:
            assert 0.002 < p.std().item() < 0.2, (name, p.std().item())
    assert torch.isfinite(model.freqs).all()
    loss = loss_fn(model(torch.randint(1024, (2, 16))), torch.randint(1024, (2, 16)))
    # An untrained model is near-uniform over the vocabulary: loss close to log(V).
    assert abs(loss.item() - math.log(1024)) < 1.0


@pytest.mark.parametrize("name, billions", [("llama2-7b", 6.74), ("llama2-13b", 13.0), ("llama2-70b", 69.0),
                                            ("llama3.1-8b", 8.03), ("llama3.1-70b", 70.6),
                                            ("llama3.2-1b", 1.24), ("llama3.2-3b", 3.21),
                                            ("mistral-7b", 7.25), ("mathstral-7b", 7.25), ("mixtral-8x7b", 46.7)])
def test_presets_have_the_published_parameter_counts(name, billions):
    assert MODELS[name].num_params() / 1e9 == pytest.approx(billions, rel=0.01)


def test_flops_per_token_is_six_n_plus_attention():
    cfg = MODELS["llama3.1-8b"]
    n = cfg.num_params(embedding=False)
    assert cfg.flops_per_token(8192) == 6 * n + 12 * 32 * 32 * 128 * 8192


def test_a_mixture_of_experts_counts_only_the_routed_experts_towards_flops():
    cfg = MODELS["mixtral-8x7b"]
    # Mixtral's paper: 47B parameters, 13B used per token.
    assert cfg.num_params(active=True) / 1e9 == pytest.approx(12.9, rel=0.01)
    assert cfg.flops_per_token(4096) == 6 * cfg.num_params(embedding=False, active=True) + 12 * 32 * 32 * 128 * 4096


def test_grouped_query_attention_matches_repeated_key_value_heads():
    cfg = MODELS["tiny"]
    attn = Attention(cfg)
    x = torch.randn(2, 10, cfg.dim)
    freqs = rope_frequencies(cfg, torch.device("cpu"))
    b, t = 2, 10
    q = apply_rope(attn.wq(x).view(b, t, cfg.n_heads, cfg.head_dim), freqs).transpose(1, 2)
    k = apply_rope(attn.wk(x).view(b, t, cfg.n_kv_heads, cfg.head_dim), freqs).transpose(1, 2)
    v = attn.wv(x).view(b, t, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)
    rep = cfg.n_heads // cfg.n_kv_heads
    ref = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), is_causal=True)
    expected = attn.wo(ref.transpose(1, 2).reshape(b, t, -1))
    torch.testing.assert_close(attn(x, freqs), expected)


def test_rope_preserves_norms_and_is_relative():
    cfg = MODELS["tiny"]
    freqs = rope_frequencies(cfg, torch.device("cpu"))
    q, k = torch.randn(1, 1, 1, cfg.head_dim), torch.randn(1, 1, 1, cfg.head_dim)
    at = lambda x, pos: apply_rope(x.expand(1, pos + 1, 1, -1).contiguous(), freqs)[0, pos, 0]  # noqa: E731
    torch.testing.assert_close(at(q, 5).norm(), q.norm())
    # The score depends on the distance between positions only.
    torch.testing.assert_close(at(q, 7) @ at(k, 4), at(q, 3) @ at(k, 0), rtol=1e-4, atol=1e-4)


def test_llama3_rope_scaling_slows_only_the_low_frequencies():
    cfg = replace(MODELS["llama3.1-8b"], max_seq_len=8192)
    plain = rope_frequencies(replace(cfg, rope_scaling=None), torch.device("cpu"))
    scaled = rope_frequencies(cfg, torch.device("cpu"))
    torch.testing.assert_close(scaled[:, 0], plain[:, 0])  # highest frequency untouched
    assert not torch.allclose(scaled[:, -1], plain[:, -1])


def test_mfu_has_no_peak_on_cpu():
    assert peak_flops(torch.device("cpu")) is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_peak_comes_from_the_instance_table():
    assert peak_flops(torch.device("cuda", 0)) is not None


def test_tied_embeddings_stay_tied_when_one_process_skips_fsdp():
    from types import SimpleNamespace

    from trainer.parallel import build_decoder
    cfg = replace(MODELS["tiny"], tie_embeddings=True)
    model = build_decoder(cfg, SimpleNamespace(world_size=1, device=torch.device("cpu")), rope_length=16)
    assert model.output.weight is model.tok_embeddings.weight
    assert "output.weight" not in dict(model.named_parameters())
