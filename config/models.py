"""The model table: shapes and parameter counts of every model the presets train (no torch).

The trainer builds its modules from these entries, `ops plan` sizes checkpoints, throughput and
memory from the same entries, and `trainer.hf` maps them to and from Hugging Face configs.
Dimensions are the published ones: Meta's params.json for Llama 2 / 3.1 / 3.2, and the
`config.json` of mistralai/Mistral-7B-v0.3, mistralai/Mathstral-7B-v0.1 and
mistralai/Mixtral-8x7B-v0.1 (which transformers' MistralConfig / MixtralConfig docstrings
also describe). `tiny` and `tiny-moe` exist for tests and local runs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace

FAMILIES = ("llama", "mistral", "mixtral")  # Hugging Face model_type each entry exports as


class FieldError(ValueError):
    """A field of a model configuration with a value no model can have; `field` is its name here,
    which a reader of another format (trainer/hf_config.py) says in that format's words."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field} {problem}")
        self.field, self.problem = field, problem


def _check_positive(owner, ints: tuple[str, ...], floats: tuple[str, ...]) -> None:
    for name in ints:
        value = getattr(owner, name)
        if type(value) is not int or value < 1:
            raise FieldError(name, f"must be a positive integer, got {value!r}")
    for name in floats:
        value = getattr(owner, name)
        if type(value) not in (int, float) or not (math.isfinite(value) and value > 0):
            raise FieldError(name, f"must be a finite number above 0, got {value!r}")


@dataclass(frozen=True)
class RopeScaling:
    """Llama 3.1's rotary frequency scaling ("rope_type": "llama3" in a Hugging Face config):
    wavelengths longer than original_max_position / low_freq_factor are slowed by `factor`,
    those shorter than original_max_position / high_freq_factor are kept, the band between
    blends. The values always come from the checkpoint's config; these defaults are Llama 3.1's."""
    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192

    def __post_init__(self):
        _check_positive(self, ("original_max_position",), ("factor", "low_freq_factor", "high_freq_factor"))


@dataclass(frozen=True)
class ModelConfig:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    ffn_dim: int  # per expert for a mixture of experts
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None  # None: the plain frequencies
    tie_embeddings: bool = False  # Llama 3.2 1B/3B share the input embedding with the output layer
    max_seq_len: int = 8192
    # Mistral 7B v0.1 attends to the last 4096 tokens only; None: full causal attention.
    sliding_window: int | None = None
    n_experts: int = 0  # 0: a dense SwiGLU feed-forward; else a sparse mixture of this many experts
    experts_per_token: int = 0  # top-k routing
    router_aux_loss_coef: float = 0.0  # weight of the load-balancing loss added to the training loss
    family: str = "llama"

    # What decides the parameters' shapes: a checkpoint written with other values cannot load.
    SHAPE_FIELDS = ("dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "ffn_dim", "tie_embeddings",
                    "n_experts", "experts_per_token")

    def __post_init__(self):
        # A model of 0 layers trains and ignores every layer's weights on disk; a NaN rope_theta
        # makes every step non-finite; an infinite norm_eps zeroes the gradient.
        _check_positive(self, ("dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "ffn_dim", "max_seq_len"),
                        ("norm_eps", "rope_theta"))
        if self.sliding_window is not None:
            _check_positive(self, ("sliding_window",), ())
        if type(self.router_aux_loss_coef) not in (int, float) or not (
                math.isfinite(self.router_aux_loss_coef) and self.router_aux_loss_coef >= 0):
            raise FieldError("router_aux_loss_coef", f"must be a finite number of at least 0, got "
                                                     f"{self.router_aux_loss_coef!r}")
        if self.dim % self.n_heads or self.n_heads % self.n_kv_heads:
            raise ValueError(f"dim {self.dim}, n_heads {self.n_heads}, n_kv_heads {self.n_kv_heads}: heads must "
                             "divide dim and kv heads must divide heads")
        if self.n_experts and not 0 < self.experts_per_token <= self.n_experts:
            raise ValueError(f"experts_per_token must be 1..{self.n_experts}, got {self.experts_per_token}")
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {self.family!r}")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    def shape(self) -> dict:
        return {name: getattr(self, name) for name in self.SHAPE_FIELDS}

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ModelConfig:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if values.get("rope_scaling"):
            values["rope_scaling"] = RopeScaling(**values["rope_scaling"])
        return cls(**values)

    def block_params(self, *, active: bool = False) -> int:
        """Parameters of one decoder block; `active`: only the experts a token is routed to."""
        kv = self.n_kv_heads * self.head_dim
        attn = 2 * self.dim * self.dim + 2 * self.dim * kv
        expert = 3 * self.dim * self.ffn_dim
        if self.is_moe:
            ffn = (self.experts_per_token if active else self.n_experts) * expert + self.n_experts * self.dim
        else:
            ffn = expert
        return attn + ffn + 2 * self.dim

    def num_params(self, *, embedding: bool = True, active: bool = False) -> int:
        """All parameters; `active`: those one token uses (a mixture of experts' top-k)."""
        out = 0 if self.tie_embeddings else self.vocab_size * self.dim
        emb = self.vocab_size * self.dim if embedding else 0
        # A tied model's one matrix still does the output projection's matmul, so it counts
        # towards the FLOPs even when the embedding lookup (no matmul) is left out.
        if self.tie_embeddings and not embedding:
            out = self.vocab_size * self.dim
        return emb + self.n_layers * self.block_params(active=active) + self.dim + out

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token: 6·N for the matmuls (forward 2, backward 4), N the active
        parameters without the embedding lookup, plus the attention scores and their weighted
        sum, 12·layers·heads·head_dim·seq (the PaLM paper's count, which torchtitan also reports;
        it ignores the causal mask's saving). A sliding window bounds the attended span."""
        n = self.num_params(embedding=False, active=True)
        span = min(seq_len, self.sliding_window) if self.sliding_window else seq_len
        return 6 * n + 12 * self.n_layers * self.n_heads * self.head_dim * span


_LLAMA31 = RopeScaling(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position=8192)
_LLAMA32 = RopeScaling(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position=8192)

MODELS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=1024, ffn_dim=192, max_seq_len=512),
    "tiny-moe": ModelConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=1024, ffn_dim=96, max_seq_len=512,
                            n_experts=4, experts_per_token=2, router_aux_loss_coef=0.02, family="mixtral"),
    "llama2-7b": ModelConfig(4096, 32, 32, 32, 32000, 11008, max_seq_len=4096),
    "llama2-13b": ModelConfig(5120, 40, 40, 40, 32000, 13824, max_seq_len=4096),
    "llama2-70b": ModelConfig(8192, 80, 64, 8, 32000, 28672, max_seq_len=4096),
    "llama3.1-8b": ModelConfig(4096, 32, 32, 8, 128256, 14336, rope_theta=500000.0, rope_scaling=_LLAMA31,
                               max_seq_len=131072),
    "llama3.1-70b": ModelConfig(8192, 80, 64, 8, 128256, 28672, rope_theta=500000.0, rope_scaling=_LLAMA31,
                                max_seq_len=131072),
    "llama3.2-1b": ModelConfig(2048, 16, 32, 8, 128256, 8192, rope_theta=500000.0, rope_scaling=_LLAMA32,
                               tie_embeddings=True, max_seq_len=131072),
    "llama3.2-3b": ModelConfig(3072, 28, 24, 8, 128256, 8192, rope_theta=500000.0, rope_scaling=_LLAMA32,
                               tie_embeddings=True, max_seq_len=131072),
    # v0.3: the 32768-token vocabulary, rope_theta 1e6, no sliding window (v0.1 had 4096).
    "mistral-7b": ModelConfig(4096, 32, 32, 8, 32768, 14336, rope_theta=1e6, max_seq_len=32768, family="mistral"),
    "mathstral-7b": ModelConfig(4096, 32, 32, 8, 32768, 14336, rope_theta=1e6, max_seq_len=32768, family="mistral"),
    "mixtral-8x7b": ModelConfig(4096, 32, 32, 8, 32000, 14336, rope_theta=1e6, max_seq_len=32768, n_experts=8,
                                experts_per_token=2, router_aux_loss_coef=0.02, family="mixtral"),
}


def model_config(name: str, *, n_layers: int | None = None) -> ModelConfig:
    cfg = MODELS[name]
    return replace(cfg, n_layers=n_layers) if n_layers else cfg


def expert_rows_problem(cfg: ModelConfig, world_size: int) -> str | None:
    """Why `world_size` ranks cannot shard `cfg`'s expert weights, or None. FSDP2 shards them along
    their rows (trainer/parallel.py: w1 and w3 have ffn_dim of them, w2 dim) and splits a dim other
    than 0 only evenly. The trainer stops on it before its process group, and the job renderer
    refuses a node range that reaches it (k8s/pods/pytorchjob.py): one rule for both."""
    rows = (cfg.ffn_dim, cfg.dim)
    if not cfg.is_moe or not any(n % world_size for n in rows):
        return None
    return (f"shards its expert weights along rows of {rows[0]} and {rows[1]}, which {world_size} ranks do not "
            f"divide (FSDP2 shards them evenly); run it on a number of ranks that divides {math.gcd(*rows)}")


def shape_difference(saved: dict, current: ModelConfig) -> str | None:
    """The first shape field in which `saved` (ModelConfig.shape() of a checkpoint) differs."""
    for name in ModelConfig.SHAPE_FIELDS:
        if name in saved and saved[name] != getattr(current, name):
            return f"{name} is {saved[name]} in the checkpoints but {getattr(current, name)} in this run"
    return None
