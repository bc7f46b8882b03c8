"""The memory estimate `ops plan` prints and the trainer logs (config/memory.py), held against what
a forward of our model really leaves alive for backward (float32 on CPU)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from activations import bytes_held_for_backward
from config.memory import activation_bytes_per_token_layer, estimate_memory
from config.models import MODELS
from trainer.checkpoint import ModelAndOptimizer
from trainer.chunked_loss import linear_cross_entropy
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


class _PeakOutputs(TorchDispatchMode):
    """The most bytes that the outputs of ops run under it held at once, views of `inputs` aside."""

    def __init__(self, *inputs: torch.Tensor):
        super().__init__()
        self.inputs = {t.untyped_storage()._cdata for t in inputs}
        self.alive: list[tuple[StorageWeakRef, int]] = []
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.alive += [(StorageWeakRef(t.untyped_storage()), t.untyped_storage().nbytes())
                       for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        self.alive = [(ref, size) for ref, size in self.alive if not ref.expired()]
        held = {ref.cdata: size for ref, size in self.alive if ref.cdata not in self.inputs}
        self.peak = max(self.peak, sum(held.values()))
        return out


def chunked_loss_peak(vocab: int, dim: int = 256, tokens: int = 8) -> int:
    hidden = torch.randn(1, tokens, dim, requires_grad=True)
    weight = torch.randn(vocab, dim, requires_grad=True) * 0.02
    labels = torch.randint(vocab, (1, tokens))
    with _PeakOutputs(hidden, weight, labels) as outputs:
        linear_cross_entropy(hidden, weight, labels, chunk_tokens=1)
    return outputs.peak


def test_the_chunked_loss_accumulator_is_counted_as_measured():
    # Chunks of one token: the vocabulary-sized part of the peak is the fp32 weight gradient
    # summed over the chunks and one chunk's product being added into it (fp32 here, c bytes
    # under mixed precision), beside the activations.
    cfg = replace(MODELS["tiny"], dim=256)

    def estimate(vocab):
        return estimate_memory(replace(cfg, vocab_size=vocab), shards=1, batch_size=1, seq_len=8,
                               activation_checkpointing="none", mixed_precision=False, loss_chunk_tokens=1)

    measured = chunked_loss_peak(4096) - chunked_loss_peak(2048)
    counted = estimate(4096).loss_accumulator - estimate(2048).loss_accumulator
    assert counted == (4 + 4) * 256 * 2048
    assert measured == pytest.approx(counted, rel=0.03)
    assert estimate_memory(cfg, shards=1, batch_size=1, seq_len=8, activation_checkpointing="none",
                           mixed_precision=False).loss_accumulator == 0  # the plain loss has none


def test_the_checkpoint_stager_copies_twelve_bytes_per_parameter_of_the_rank():
    # What an asynchronous save stages is the app state's tensors: fp32 weights and AdamW's two
    # moments (plus one step counter per parameter tensor). bench/memory_terms.py measures the
    # stager's peak RSS against it.
    cfg = replace(MODELS["tiny"], vocab_size=512)
    model = Transformer(cfg)
    model.init_weights()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randint(512, (1, 8)), torch.randint(512, (1, 8))).backward()
    optimizer.step()
    staged = sum(t.numel() * t.element_size()
                 for t in tree_leaves(ModelAndOptimizer(model, optimizer).state_dict()) if isinstance(t, torch.Tensor))
    counted = estimate_memory(cfg, shards=1, batch_size=1, seq_len=8, activation_checkpointing="none",
                              mixed_precision=False).host_staging
    assert counted == 12 * cfg.num_params()
    assert staged == pytest.approx(counted, rel=0.001)
    assert estimate_memory(cfg, shards=4, batch_size=1, seq_len=8, activation_checkpointing="none",
                           mixed_precision=False, async_checkpoints=False).host_staging == 0


def test_the_device_total_counts_the_accumulator_but_not_the_host_copy():
    cfg = MODELS["llama3.1-8b"]
    plain = estimate_memory(cfg, shards=16, batch_size=2, seq_len=8192, activation_checkpointing="selective",
                            mixed_precision=True, loss_chunk_tokens=2048, async_checkpoints=False)
    staged = estimate_memory(cfg, shards=16, batch_size=2, seq_len=8192, activation_checkpointing="selective",
                             mixed_precision=True, loss_chunk_tokens=2048)
    assert staged.total == plain.total and staged.host_staging == pytest.approx(12 * cfg.num_params() / 16)
    assert plain.total == pytest.approx(plain.parameters + plain.optimizer + plain.working + plain.activations
                                        + plain.logits + plain.loss_accumulator)
    assert "loss accumulator 2.94" in plain.summary() and "host memory for checkpoint staging" in staged.summary()
