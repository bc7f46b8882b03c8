"""The memory estimate `ops plan` prints and the trainer logs (config/memory.py), held against the
tensors autograd really saves for backward in our model (float32 on CPU)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from config.memory import activation_bytes_per_token_layer, estimate_memory
from config.models import MODELS
from trainer.model import Transformer

TOKENS = (2, 128)


def saved_activation_bytes(cfg, activation_checkpointing: bool) -> int:
    """Bytes of the distinct storages autograd saves in one forward, parameters excluded."""
    torch.manual_seed(0)
    model = Transformer(cfg)
    model.init_weights()
    for block in model.layers.values():
        block.activation_checkpointing = activation_checkpointing
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    tokens = torch.randint(cfg.vocab_size, TOKENS)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(tokens, tokens)
    return sum(seen.values())


def per_layer_per_token(cfg, activation_checkpointing=False) -> float:
    two, four = (saved_activation_bytes(replace(cfg, n_layers=n), activation_checkpointing) for n in (2, 4))
    return (four - two) / 2 / (TOKENS[0] * TOKENS[1])


@pytest.mark.parametrize("dim, ffn", [(64, 192), (128, 192), (64, 384)])
def test_dense_activation_count_matches_what_autograd_saves(dim, ffn):
    cfg = replace(MODELS["tiny"], dim=dim, ffn_dim=ffn, vocab_size=256)
    assert per_layer_per_token(cfg) == pytest.approx(activation_bytes_per_token_layer(cfg, 4), rel=0.03)


def test_activation_checkpointing_keeps_only_each_blocks_input():
    cfg = replace(MODELS["tiny"], vocab_size=256)
    assert per_layer_per_token(cfg, activation_checkpointing=True) == cfg.dim * 4


def test_moe_activation_count_is_the_grouped_path_and_cpu_padding_adds_at_most_a_third():
    # On CPU in float32 the experts run as one batched matmul over groups padded to the largest;
    # the estimate counts the grouped kernel's (GPU, bf16) unpadded tensors.
    cfg = replace(MODELS["tiny-moe"], vocab_size=256)
    estimate = activation_bytes_per_token_layer(cfg, 4)
    assert estimate <= per_layer_per_token(cfg) <= 1.34 * estimate


def test_state_is_sixteen_bytes_per_parameter_split_over_the_shards():
    cfg = MODELS["llama3.1-8b"]
    one = estimate_memory(cfg, shards=16, batch_size=1, seq_len=8192, activation_checkpointing=True,
                          mixed_precision=True)
    assert one.parameters + one.gradients + one.optimizer == pytest.approx(16 * cfg.num_params() / 16)
    without = estimate_memory(cfg, shards=16, batch_size=1, seq_len=8192, activation_checkpointing=False,
                              mixed_precision=True)
    assert without.activations > 10 * one.activations
    chunked = estimate_memory(cfg, shards=16, batch_size=1, seq_len=8192, activation_checkpointing=True,
                              mixed_precision=True, loss_chunk_tokens=1024)
    assert chunked.logits < one.logits / 4
