"""The memory estimate `ops plan` prints and the trainer logs (config/memory.py), held against what
a forward of our model really leaves alive for backward (float32 on CPU)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from activations import bytes_held_for_backward
from config.memory import activation_bytes_per_token_layer, estimate_memory
from config.models import MODELS
from trainer.model import Transformer

TOKENS = (2, 128)


def saved_activation_bytes(cfg, checkpointing: str) -> int:
    torch.manual_seed(0)
    model = Transformer(cfg)
    model.init_weights()
    for block in model.layers.values():
        block.activation_checkpointing = checkpointing
    return bytes_held_for_backward(model, torch.randint(cfg.vocab_size, TOKENS))


def per_layer_per_token(cfg, checkpointing="none") -> float:
    two, four = (saved_activation_bytes(replace(cfg, n_layers=n), checkpointing) for n in (2, 4))
    return (four - two) / 2 / (TOKENS[0] * TOKENS[1])


@pytest.mark.parametrize("dim, ffn", [(64, 192), (128, 192), (64, 384)])
def test_dense_activation_count_matches_what_autograd_saves(dim, ffn):
    cfg = replace(MODELS["tiny"], dim=dim, ffn_dim=ffn, vocab_size=256)
    assert per_layer_per_token(cfg) == pytest.approx(activation_bytes_per_token_layer(cfg, 4), rel=0.03)


def test_full_activation_checkpointing_keeps_only_each_blocks_input():
    cfg = replace(MODELS["tiny"], vocab_size=256)
    assert per_layer_per_token(cfg, "full") == cfg.dim * 4 == activation_bytes_per_token_layer(cfg, 4, "full")


@pytest.mark.parametrize("dim, ffn", [(64, 192), (128, 192), (64, 384)])
def test_selective_activation_checkpointing_keeps_the_matmul_and_attention_outputs_as_counted(dim, ffn):
    cfg = replace(MODELS["tiny"], dim=dim, ffn_dim=ffn, vocab_size=256)
    assert per_layer_per_token(cfg, "selective") == activation_bytes_per_token_layer(cfg, 4, "selective")


def test_selective_moe_count_is_the_grouped_path_and_cpu_padding_adds_at_most_a_tenth():
    cfg = replace(MODELS["tiny-moe"], vocab_size=256)
    estimate = activation_bytes_per_token_layer(cfg, 4, "selective")
    assert estimate <= per_layer_per_token(cfg, "selective") <= 1.1 * estimate


def test_moe_activation_count_is_the_grouped_path_and_cpu_padding_adds_at_most_a_third():
    # On CPU in float32 the experts run as one batched matmul over groups padded to the largest;
    # the estimate counts the grouped kernel's (GPU, bf16) unpadded tensors.
    cfg = replace(MODELS["tiny-moe"], vocab_size=256)
    estimate = activation_bytes_per_token_layer(cfg, 4)
    assert estimate <= per_layer_per_token(cfg) <= 1.34 * estimate


def test_state_is_sixteen_bytes_per_parameter_split_over_the_shards():
    cfg = MODELS["llama3.1-8b"]
    one = estimate_memory(cfg, shards=16, batch_size=1, seq_len=8192, activation_checkpointing="full",
                          mixed_precision=True)
    assert one.parameters + one.gradients + one.optimizer == pytest.approx(16 * cfg.num_params() / 16)
    without = estimate_memory(cfg, shards=16, batch_size=1, seq_len=8192, activation_checkpointing="none",
                              mixed_precision=True)
    assert without.activations > 10 * one.activations
    chunked = estimate_memory(cfg, shards=16, batch_size=1, seq_len=8192, activation_checkpointing="full",
                              mixed_precision=True, loss_chunk_tokens=1024)
    assert chunked.logits < one.logits / 4
