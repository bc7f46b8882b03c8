"""The chunked output layer + cross-entropy matches the plain path in value and gradients."""

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from trainer.chunked_loss import linear_cross_entropy
from trainer.model import MODEL_PRESETS, Transformer, loss_fn


def reference(hidden, weight, labels):
    return F.cross_entropy((hidden @ weight.t()).float().flatten(0, 1), labels.flatten(0, 1))


@pytest.mark.parametrize("chunk", [1, 7, 64, 10_000])
def test_loss_and_gradients_match_the_full_logits_path(chunk):
    torch.manual_seed(0)
    hidden = torch.randn(2, 24, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 50, (2, 24))
    expected = reference(hidden, weight, labels)
    (grad_h, grad_w) = torch.autograd.grad(expected * 3.0, (hidden, weight))
    got = linear_cross_entropy(hidden, weight, labels, chunk)
    (got_h, got_w) = torch.autograd.grad(got * 3.0, (hidden, weight))
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_h, grad_h)
    torch.testing.assert_close(got_w, grad_w)


@pytest.mark.parametrize("tied", [False, True])
def test_model_forward_with_labels_equals_logits_then_loss(tied):
    torch.manual_seed(0)
    model = Transformer(replace(MODEL_PRESETS["tiny"], tie_embeddings=tied))
    model.init_weights()
    tokens = torch.randint(0, model.cfg.vocab_size, (2, 32))
    plain = loss_fn(model(tokens[:, :-1]), tokens[:, 1:])
    plain.backward()
    plain_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model.loss_chunk_tokens = 16
    chunked = model(tokens[:, :-1], tokens[:, 1:])
    chunked.backward()
    torch.testing.assert_close(chunked, plain)
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, plain_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_chunk_size_must_be_positive():
    with pytest.raises(ValueError, match="chunk_tokens must be at least 1"):
        linear_cross_entropy(torch.zeros(1, 2, 4), torch.zeros(3, 4), torch.zeros(1, 2, dtype=torch.long), 0)
