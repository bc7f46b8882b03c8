"""Memory one rank needs to train a model of the table: the one estimate `ops plan` prints and
the trainer logs at start-up (no torch here).

Per rank, with N parameters sharded over S ranks (FSDP2), c bytes per element of compute
(2 for bf16 mixed precision, 4 for fp32):
- parameters 4·N/S (fp32 master weights), gradients 4·N/S (fp32 reduction), AdamW 8·N/S;
- working copies: FSDP gathers a block's parameters in compute precision and its gradient
  before the reduce-scatter, two blocks at a time (one prefetched), plus the final norm and
  output layer, kept gathered from the end of forward through their backward, when activations
  peak (trainer/parallel.py; the embedding, its own unit, is gathered only at either end of the
  step; a tied output is that same matrix); unsharded mixed precision (one GPU, autocast) keeps
  a bf16 copy of every weight instead;
- activations saved for backward, per token and layer: 8·dim + 2·kv_dim + 4·ffn elements
  (norm inputs and outputs, q, k, v, attention output, residual, the SwiGLU's four ffn-wide
  tensors), for a mixture of experts the routed copies (2·top_k·dim) and top_k·4·ffn instead of
  4·ffn, plus the RMSNorms' fp32 copies (2·dim·4 bytes) under mixed precision. With selective
  activation checkpointing the matmul and attention outputs only: 5·dim + 2·kv_dim + 2·ffn
  elements (block input, q, k, v, attention output, o, the up and down projections; for a
  mixture of experts the router logits and top_k·(2·ffn + dim) routed rows instead of the
  feed-forward's 2·ffn + dim) plus the attention's fp32 log-sum-exp (4 bytes per head). With full checkpointing only each block's
  input. Both then hold one block's recomputed activations on top, in backward. Counted against
  what a forward really leaves alive for backward in tests/trainer/test_memory_estimate.py;
- the output layer: logits in compute precision, their fp32 log-softmax and its gradient
  (c + 8 bytes per token and vocabulary entry), or one chunk of them with --loss-chunk-tokens;
- the chunked loss's accumulator: with --loss-chunk-tokens the output weight's gradient is
  summed over the chunks in fp32 during forward, each chunk's product made in compute precision
  before it is added: (4 + c)·vocab·dim bytes (2.9 GiB for Llama 3) beside the activations. Its
  final compute-precision copy is the output layer's gradient, counted in the working copies
  (trainer/chunked_loss.py).
The peak is parameters + optimizer + working copies + the larger of the gradients and the
activations with the logits and the loss accumulator: the loop frees gradients after each step
(zero_grad to None), and backward releases a block's activations as it produces that block's
gradients.
Host memory, apart from the device's: an asynchronous checkpoint stages a copy of this rank's
shard of the fp32 weights and both AdamW moments, 12·N/S bytes, which the stager keeps for the
whole run (trainer/checkpoint.py; the issue measured +505 MiB for 44M parameters, 12.0 bytes
each). On a CPU node it shares the node's memory with everything else.
Activations are counted as eager autograd saves them; torch.compile's partitioner recomputes
cheap ops and saves less, so for --compile runs this is an upper bound (bench/RESULTS.md: an H100
measured 59.3 / 60.5 / 74.5 GiB where this says 82.5 / 77.5 / 95.5).
Not counted: the CUDA context, NCCL buffers and allocator fragmentation; `ops plan` keeps
HEADROOM of the device for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from config.instance_types import InstanceType
from config.models import ModelConfig

GIB = 2**30
# Activation checkpointing of each decoder block, cheapest in compute first (trainer/activation_checkpointing.py).
CHECKPOINTING_MODES = ("none", "selective", "full")
HEADROOM = 0.10  # of device memory, for the CUDA context, NCCL buffers and allocator fragmentation


@dataclass(frozen=True)
class MemoryEstimate:
    parameters: float  # bytes per rank
    gradients: float
    optimizer: float
    working: float
    activations: float
    logits: float
    loss_accumulator: float = 0.0
    host_staging: float = 0.0  # host memory, not the device's

    @property
    def total(self) -> float:
        """Device bytes at the peak."""
        return self.parameters + self.optimizer + self.working + max(
            self.gradients, self.activations + self.logits + self.loss_accumulator)

    def summary(self) -> str:
        names = ("parameters", "gradients", "optimizer", "working", "activations", "logits", "loss_accumulator")
        parts = ", ".join(f"{name.replace('_', ' ')} {getattr(self, name) / GIB:.2f}" for name in names)
        return (f"{self.total / GIB:.2f} GiB ({parts}); host memory for checkpoint staging "
                f"{self.host_staging / GIB:.2f} GiB")


def activation_bytes_per_token_layer(cfg: ModelConfig, compute_bytes: int, checkpointing: str = "none") -> float:
    """Bytes one token leaves for backward in one decoder block under `checkpointing`."""
    kv = cfg.n_kv_heads * cfg.head_dim
    k = cfg.experts_per_token
    if checkpointing == "full":
        return cfg.dim * compute_bytes
    if checkpointing == "selective":
        # Block input, q, k, v, attention output, o; the feed-forward's matmul outputs: the two up
        # projections and the down projection (for a mixture of experts: the router logits, the
        # routed rows' three, and the top-k weights (fp32) and indices (int64)).
        attention = 4 * cfg.dim + 2 * kv
        if cfg.is_moe:
            ffn, extra = cfg.n_experts + k * (2 * cfg.ffn_dim + cfg.dim), k * (4 + 8)
        else:
            ffn, extra = 2 * cfg.ffn_dim + cfg.dim, 0
        return (attention + ffn) * compute_bytes + 4 * cfg.n_heads + extra
    if checkpointing != "none":
        raise ValueError(f"checkpointing must be one of {', '.join(CHECKPOINTING_MODES)}, got {checkpointing!r}")
    if cfg.is_moe:
        ffn = 2 * k * cfg.dim + 4 * k * cfg.ffn_dim + cfg.n_experts
    else:
        ffn = 4 * cfg.ffn_dim
    elements = 8 * cfg.dim + 2 * kv + ffn
    fp32_norm_copies = 2 * cfg.dim * 4 if compute_bytes < 4 else 0
    return elements * compute_bytes + fp32_norm_copies


def estimate_memory(cfg: ModelConfig, *, shards: int, batch_size: int, seq_len: int,
                    activation_checkpointing: str, mixed_precision: bool, loss_chunk_tokens: int = 0,
                    async_checkpoints: bool = True) -> MemoryEstimate:
    """Peak bytes one rank holds while training `cfg` sharded over `shards` ranks (1: unsharded);
    `async_checkpoints`: the run stages asynchronous checkpoints in host memory."""
    c = 2 if mixed_precision else 4
    n = cfg.num_params()
    output_unit = cfg.vocab_size * cfg.dim + cfg.dim  # the output layer (or the tied embedding) and the final norm
    if shards > 1:
        working = c * (2 * cfg.block_params() + output_unit) * 2  # gathered weights and their unsharded gradients
    else:
        working = c * n if mixed_precision else 0
    tokens = batch_size * seq_len
    per_layer = tokens * activation_bytes_per_token_layer(cfg, c)
    kept = tokens * activation_bytes_per_token_layer(cfg, c, activation_checkpointing)
    # Backward recomputes one block at a time: what it dropped exists again for that block.
    activations = cfg.n_layers * kept + (per_layer - kept)
    if loss_chunk_tokens:
        logits = min(loss_chunk_tokens, tokens) * cfg.vocab_size * (c + 8) + tokens * cfg.dim * c
    else:
        logits = tokens * cfg.vocab_size * (c + 8)
    return MemoryEstimate(parameters=4 * n / shards, gradients=4 * n / shards, optimizer=8 * n / shards,
                          working=working, activations=activations, logits=logits,
                          loss_accumulator=(4 + c) * cfg.vocab_size * cfg.dim if loss_chunk_tokens else 0.0,
                          host_staging=12 * n / shards if async_checkpoints else 0.0)


def usable_device_bytes(it: InstanceType, ranks_per_node: int) -> float:
    """What one rank may plan to use: its GPU's memory, or a CPU node's memory shared by its ranks,
    less HEADROOM."""
    device_gib = it.gpu_memory_gib if it.is_gpu else it.memory_gib / ranks_per_node
    return device_gib * GIB * (1 - HEADROOM)


def cheapest_checkpointing(cfg: ModelConfig, *, usable_bytes: float, **shape) -> str | None:
    """The first of CHECKPOINTING_MODES (the least recompute first) whose estimate fits
    `usable_bytes`; None when not even full checkpointing fits. `shape`: estimate_memory's other
    arguments."""
    for mode in CHECKPOINTING_MODES:
        if estimate_memory(cfg, activation_checkpointing=mode, **shape).total <= usable_bytes:
            return mode
    return None
