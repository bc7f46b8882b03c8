"""Cross-entropy over a large vocabulary without the full logits tensor.

At seq 8192 with Llama 3's 128,256-token vocabulary the logits of one sequence take 2 GiB in
bf16 and 4 GiB more in fp32 for the softmax, with their gradient on top: about 10 GiB of
short-lived blocks that leave the allocator fragmented near full memory. This computes the output
projection and the loss a chunk of tokens at a time, and the gradients of the projection's input
and weight in the same pass, so only one chunk of logits ever exists. Same FLOPs as the plain
path (logits, their input gradient and their weight gradient are each computed once).
"""

from __future__ import annotations

import torch


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk: int):
        tokens = hidden.reshape(-1, hidden.shape[-1])
        targets = labels.reshape(-1)
        count = targets.numel()
        loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_hidden = torch.empty_like(tokens)
        # Accumulated in fp32 across chunks, cast once: a bf16 running sum would lose precision.
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        for start in range(0, count, chunk):
            h = tokens[start:start + chunk]
            y = targets[start:start + chunk, None]
            # Same numerics as the plain path: matmul in the parameter dtype, softmax in fp32.
            # One log-softmax serves the loss and, exponentiated in place, the gradient:
            # d(mean CE)/d(logits) = (softmax - one-hot) / count.
            grad = (h @ weight.t()).float().log_softmax(dim=-1)
            loss -= grad.gather(1, y).sum()
            grad.exp_().scatter_add_(1, y, grad.new_full(y.shape, -1.0))
            grad = grad.div_(count).to(weight.dtype)
            grad_hidden[start:start + chunk] = grad @ weight
            grad_weight.add_(grad.t() @ h)  # promotes into the fp32 sum without an fp32 copy
        ctx.save_for_backward(grad_hidden.view_as(hidden), grad_weight.to(weight.dtype))
        return loss / count

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        grad_hidden, grad_weight = ctx.saved_tensors
        # In place: the saved gradients are used once, and a copy would cost a weight-sized
        # buffer at the start of backward, when activations peak.
        return (grad_hidden.mul_(grad_loss.to(grad_hidden.dtype)), grad_weight.mul_(grad_loss.to(grad_weight.dtype)),
                None, None)


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                         chunk_tokens: int) -> torch.Tensor:
    """mean cross_entropy((hidden @ weight.T).float(), labels), `chunk_tokens` tokens at a time."""
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be at least 1, got {chunk_tokens}")
    return _LinearCrossEntropy.apply(hidden, weight, labels, chunk_tokens)
