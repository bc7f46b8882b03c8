"""Cross-entropy over a large vocabulary without the full logits tensor.

At seq 8192 with Llama 3's 128,256-token vocabulary the logits of one sequence take 2 GiB in
bf16 and 4 GiB more in fp32 for the softmax, with their gradient on top: about 10 GiB of
short-lived blocks that leave the allocator fragmented near full memory. This computes the output
projection and the loss a chunk of tokens at a time, and the gradients of the projection's input
and weight in the same pass, so only one chunk of logits ever exists. Same FLOPs as the plain
path (logits, their input gradient and their weight gradient are each computed once).

Labels equal to IGNORE_INDEX (-100, PyTorch's default) count for nothing: the loss is the mean
over the counted tokens, as `F.cross_entropy(..., ignore_index=-100)`. When no token counts,
the loss is 0 with zero gradients (torch would return NaN, which poisons every weight at the
optimizer step), so a micro-batch that is all padding leaves the step unchanged.
"""

from __future__ import annotations

import torch

IGNORE_INDEX = -100


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk: int):
        tokens = hidden.reshape(-1, hidden.shape[-1])
        targets = labels.reshape(-1)
        counted = targets != IGNORE_INDEX
        # A tensor, not a Python int: reading the count would stall the GPU stream once per step.
        count = counted.sum().clamp(min=1).float()
        loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_hidden = torch.empty_like(tokens)
        # Accumulated in fp32 across chunks, cast once: a bf16 running sum would lose precision.
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        for start in range(0, targets.numel(), chunk):
            h = tokens[start:start + chunk]
            keep = counted[start:start + chunk, None]
            # An ignored label gathers and scatters at class 0; its row is zeroed by `scale`.
            y = torch.where(keep, targets[start:start + chunk, None], 0)
            scale = keep / count  # 1/count for a counted token, 0 for an ignored one
            # Same numerics as the plain path: matmul in the parameter dtype, softmax in fp32.
            # One log-softmax serves the loss and, exponentiated in place, the gradient:
            # d(mean CE)/d(logits) = (softmax - one-hot) / count, per counted token.
            grad = (h @ weight.t()).float().log_softmax(dim=-1)
            loss -= (grad.gather(1, y) * keep).sum()
            grad.exp_().scatter_add_(1, y, grad.new_full(y.shape, -1.0))
            grad = grad.mul_(scale).to(weight.dtype)
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
    """cross_entropy((hidden @ weight.T).float(), labels), mean over the labels that are not
    IGNORE_INDEX, `chunk_tokens` tokens at a time; 0 when every label is ignored."""
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be at least 1, got {chunk_tokens}")
    return _LinearCrossEntropy.apply(hidden, weight, labels, chunk_tokens)


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The plain path with the same rule: mean over counted labels, 0 when none counts."""
    logits, labels = logits.flatten(0, -2).float(), labels.flatten()
    total = torch.nn.functional.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX, reduction="sum")
    return total / (labels != IGNORE_INDEX).sum().clamp(min=1)
