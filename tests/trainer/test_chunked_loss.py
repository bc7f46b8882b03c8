"""The chunked output layer + cross-entropy matches the plain path in value and gradients,
including labels of -100 (ignored: the mean is over the counted tokens)."""

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from config.models import MODELS
from trainer.chunked_loss import linear_cross_entropy
from trainer.model import Transformer, loss_fn


def reference(hidden, weight, labels):
    return F.cross_entropy((hidden @ weight.t()).float().flatten(0, 1), labels.flatten(0, 1), ignore_index=-100)


def value_and_grads(loss_of, hidden, weight):
    loss = loss_of(hidden, weight)
    return (loss, *torch.autograd.grad(loss * 3.0, (hidden, weight)))


def inputs(ignored=()):
    torch.manual_seed(0)
    hidden = torch.randn(2, 24, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 50, (2, 24))
    labels.view(-1)[list(ignored)] = -100
    return hidden, weight, labels


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


# Every third token ignored; and tokens 8..15 ignored, so with chunk 8 one chunk counts nothing.
@pytest.mark.parametrize("ignored", [range(0, 48, 3), range(8, 16)], ids=["scattered", "whole-chunk"])
@pytest.mark.parametrize("chunk", [1, 7, 8, 64])
def test_ignored_labels_count_for_nothing_in_loss_and_gradients(chunk, ignored):
    hidden, weight, labels = inputs(ignored)
    expected = value_and_grads(lambda h, w: reference(h, w, labels), hidden, weight)
    got = value_and_grads(lambda h, w: linear_cross_entropy(h, w, labels, chunk), hidden, weight)
    for g, e, what in zip(got, expected, ("loss", "grad hidden", "grad weight")):
        torch.testing.assert_close(g, e, msg=what)


@pytest.mark.parametrize("chunk", [None, 1, 7, 64], ids=["plain", "chunk1", "chunk7", "chunk64"])
def test_every_label_ignored_gives_zero_loss_and_zero_gradients_not_nan(chunk):
    # torch's own mean over zero tokens is NaN, which the optimizer would write into every weight.
    hidden, weight, labels = inputs(range(48))
    assert torch.isnan(reference(hidden, weight, labels))
    if chunk is None:
        loss_of = lambda h, w: loss_fn(h @ w.t(), labels)  # noqa: E731
    else:
        loss_of = lambda h, w: linear_cross_entropy(h, w, labels, chunk)  # noqa: E731
    loss, grad_h, grad_w = value_and_grads(loss_of, hidden, weight)
    assert loss.item() == 0.0
    assert torch.count_nonzero(grad_h) == 0 and torch.count_nonzero(grad_w) == 0


def test_plain_loss_ignores_labels_as_torch_does():
    hidden, weight, labels = inputs(range(0, 48, 3))
    torch.testing.assert_close(loss_fn(hidden @ weight.t(), labels), reference(hidden, weight, labels))


@pytest.mark.parametrize("tied", [False, True])
def test_model_forward_with_labels_equals_logits_then_loss(tied):
    torch.manual_seed(0)
    model = Transformer(replace(MODELS["tiny"], tie_embeddings=tied))
    model.init_weights()
    tokens = torch.randint(0, model.cfg.vocab_size, (2, 32))
    labels = tokens[:, 1:].clone()
    labels[0, :20] = -100  # more than one 16-token chunk ignored
    plain = loss_fn(model(tokens[:, :-1]), labels)
    plain.backward()
    plain_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model.loss_chunk_tokens = 16
    chunked = model(tokens[:, :-1], labels)
    chunked.backward()
    torch.testing.assert_close(chunked, plain)
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, plain_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_chunk_size_must_be_positive():
    with pytest.raises(ValueError, match="chunk_tokens must be at least 1"):
        linear_cross_entropy(torch.zeros(1, 2, 4), torch.zeros(3, 4), torch.zeros(1, 2, dtype=torch.long), 0)
