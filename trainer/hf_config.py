"""Hugging Face `config.json` <-> ModelConfig, and the names of each tensor in both layouts.

Only what our decoder computes is accepted: a config asking for anything else (another rotary
scheme, biases, a different activation) is refused with the field named, rather than loaded and
silently computed differently. The rotary scaling's parameters are read from the config, in
either the `rope_scaling` + `rope_theta` form of the published checkpoints or the
`rope_parameters` form transformers 5 writes.
"""

from __future__ import annotations

from pathlib import Path

from config.models import FieldError, ModelConfig, RopeScaling
from config.paths import is_dir, read_json, read_text
from trainer.cli import UsageError, checked_path

ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "mixtral": "MixtralForCausalLM"}
# Files that make an exported directory usable for tokenizing and serving, copied along.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
                   "generation_config.json")


SPECIAL_TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")
# Published tokenizer.json files are tens of MB (Gemma 3's 262k vocabulary: 33 MB); the bound
# stops a huge or endless file before it is read into memory whole.
TOKENIZER_LIMIT_BYTES = 256 << 20

# ModelConfig's (and RopeScaling's) field -> the config.json key it comes from.
HF_KEYS = {"dim": "hidden_size", "n_layers": "num_hidden_layers", "n_heads": "num_attention_heads",
           "n_kv_heads": "num_key_value_heads", "vocab_size": "vocab_size", "ffn_dim": "intermediate_size",
           "norm_eps": "rms_norm_eps", "rope_theta": "rope_theta", "max_seq_len": "max_position_embeddings",
           "sliding_window": "sliding_window", "n_experts": "num_local_experts",
           "experts_per_token": "num_experts_per_tok", "router_aux_loss_coef": "router_aux_loss_coef",
           "factor": "rope_scaling.factor", "low_freq_factor": "rope_scaling.low_freq_factor",
           "high_freq_factor": "rope_scaling.high_freq_factor",
           "original_max_position": "rope_scaling.original_max_position_embeddings"}


def read_config(directory: Path, field: str = "--init-from-hf") -> dict:
    path = directory / "config.json"
    if not checked_path(field, is_dir, directory) or not path.is_file():
        raise UsageError(field, f"{directory} has no config.json (expected a Hugging Face model directory)")
    return checked_path(field, read_json, path)


def _is_token_id(value) -> bool:
    ids = value if isinstance(value, list) and value else [value]  # Llama 3.1 lists several eos ids
    return all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids)


def read_tokenizer(file: Path, field: str):
    """The tokenizers Tokenizer of a tokenizer.json, read through config.paths (at most
    TOKENIZER_LIMIT_BYTES, a regular file): Tokenizer.from_file reads the whole file into memory."""
    from tokenizers import Tokenizer

    text = checked_path(field, lambda path: read_text(path, TOKENIZER_LIMIT_BYTES), file)
    try:
        return Tokenizer.from_str(text)
    except Exception as exc:  # the tokenizers library raises its own untyped errors
        raise UsageError(field, f"{file} is not a tokenizer.json ({exc})") from None


def id_count(tokenizer) -> int:
    """One past the tokenizer's highest token id: the vocabulary a model needs for it. Not
    get_vocab_size, which counts the tokens, fewer than that where the ids have gaps."""
    return max(tokenizer.get_vocab(with_added_tokens=True).values(), default=-1) + 1


def special_token_ids(directory: Path, field: str) -> dict[str, int | list[int]]:
    """bos/eos/pad token ids of a Hugging Face directory: those its config.json sets, else the
    ids of the special tokens its tokenizer_config.json names, numbered by its tokenizer.json."""
    config = read_config(directory, field) if (directory / "config.json").is_file() else {}
    ids = {key: config[key] for key in SPECIAL_TOKEN_IDS if _is_token_id(config.get(key))}
    names_file, tokenizer_file = directory / "tokenizer_config.json", directory / "tokenizer.json"
    missing = [key for key in SPECIAL_TOKEN_IDS if key not in ids]
    if not missing or not (names_file.is_file() and tokenizer_file.is_file()):
        return ids
    names = checked_path(field, read_json, names_file)
    tokenizer = read_tokenizer(tokenizer_file, field)
    for key in missing:
        name = names.get(key.removesuffix("_id"))
        name = name.get("content") if isinstance(name, dict) else name  # AddedToken's serialised form
        token = tokenizer.token_to_id(name) if isinstance(name, str) else None
        if token is not None:
            ids[key] = token
    return ids


def _rope(data: dict, where: str) -> tuple[float, RopeScaling | None]:
    params = data.get("rope_parameters") if isinstance(data.get("rope_parameters"), dict) else None
    scaling = params if params is not None else data.get("rope_scaling")
    theta = (params or {}).get("rope_theta", data.get("rope_theta", 10000.0))
    if not scaling:
        return float(theta), None
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    key = "rope_parameters" if params is not None else "rope_scaling"
    if kind == "default":
        return float(theta), None
    if kind != "llama3":
        raise UsageError(where, f"{key}.rope_type {kind!r} is not supported (only 'default' and 'llama3')")
    try:
        return float(theta), RopeScaling(factor=float(scaling["factor"]),
                                         low_freq_factor=float(scaling["low_freq_factor"]),
                                         high_freq_factor=float(scaling["high_freq_factor"]),
                                         original_max_position=int(scaling["original_max_position_embeddings"]))
    except KeyError as exc:
        raise UsageError(where, f"{key} of rope_type 'llama3' lacks {exc.args[0]}") from None


def from_hf_config(data: dict, where: str = "config.json") -> ModelConfig:
    """The ModelConfig a Hugging Face config describes; UsageError naming the field otherwise."""
    model_type = data.get("model_type")
    if model_type not in ARCHITECTURES:
        raise UsageError(where, f"model_type {model_type!r} is not supported ({', '.join(ARCHITECTURES)})")
    for name, allowed in (("hidden_act", "silu"), ("attention_bias", False), ("mlp_bias", False)):
        if data.get(name, allowed) != allowed:
            raise UsageError(where, f"{name} {data[name]!r} is not supported (only {allowed!r})")
    try:
        dim, heads = int(data["hidden_size"]), int(data["num_attention_heads"])
        if data.get("head_dim") not in (None, dim // heads):
            raise UsageError(where, f"head_dim {data['head_dim']} is not hidden_size / num_attention_heads "
                                    f"({dim // heads}); not supported")
        theta, scaling = _rope(data, where)
        moe = model_type == "mixtral"
        return ModelConfig(
            dim=dim, n_layers=int(data["num_hidden_layers"]), n_heads=heads,
            n_kv_heads=int(data.get("num_key_value_heads") or heads), vocab_size=int(data["vocab_size"]),
            ffn_dim=int(data["intermediate_size"]), norm_eps=float(data.get("rms_norm_eps", 1e-6)),
            rope_theta=theta, rope_scaling=scaling, tie_embeddings=bool(data.get("tie_word_embeddings", False)),
            max_seq_len=int(data.get("max_position_embeddings", 4096)),
            sliding_window=int(data["sliding_window"]) if data.get("sliding_window") else None,
            n_experts=int(data["num_local_experts"]) if moe else 0,
            experts_per_token=int(data["num_experts_per_tok"]) if moe else 0,
            router_aux_loss_coef=float(data.get("router_aux_loss_coef", 0.001)) if moe else 0.0,
            family=model_type)
    except KeyError as exc:
        raise UsageError(where, f"lacks {exc.args[0]}") from None
    except FieldError as exc:
        raise UsageError(where, f"{HF_KEYS.get(exc.field, exc.field)} {exc.problem}") from None
    except (TypeError, ValueError) as exc:
        raise UsageError(where, str(exc)) from None


def to_hf_config(cfg: ModelConfig, dtype: str, token_ids: dict | None = None) -> dict:
    """config.json for `cfg` in the published checkpoints' form, which transformers 4 and 5 and
    the serving engines read; `token_ids` (special_token_ids) where known."""
    data = {
        "architectures": [ARCHITECTURES[cfg.family]], "model_type": cfg.family,
        "hidden_size": cfg.dim, "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim, "vocab_size": cfg.vocab_size,
        "intermediate_size": cfg.ffn_dim, "rms_norm_eps": cfg.norm_eps, "hidden_act": "silu",
        "max_position_embeddings": cfg.max_seq_len, "rope_theta": cfg.rope_theta,
        "rope_scaling": None, "tie_word_embeddings": cfg.tie_embeddings, "attention_bias": False,
        "initializer_range": 0.02, "use_cache": True, "torch_dtype": dtype, **(token_ids or {}),
    }
    if cfg.rope_scaling:
        s = cfg.rope_scaling
        data["rope_scaling"] = {"rope_type": "llama3", "factor": s.factor, "low_freq_factor": s.low_freq_factor,
                                "high_freq_factor": s.high_freq_factor,
                                "original_max_position_embeddings": s.original_max_position}
    if cfg.family == "llama":
        data["mlp_bias"] = False
    else:
        data["sliding_window"] = cfg.sliding_window
    if cfg.is_moe:
        data.update(num_local_experts=cfg.n_experts, num_experts_per_tok=cfg.experts_per_token,
                    router_aux_loss_coef=cfg.router_aux_loss_coef, output_router_logits=False)
    return data


def hf_names(cfg: ModelConfig) -> dict[str, list[str]]:
    """Our parameter name -> the Hugging Face tensor(s) it holds. A stacked expert weight
    (experts, out, in) holds one tensor per expert, in expert order; everything else is one
    tensor of the same shape (the rotary layouts agree, so q and k need no permutation)."""
    names = {"tok_embeddings.weight": ["model.embed_tokens.weight"], "norm.weight": ["model.norm.weight"]}
    if not cfg.tie_embeddings:
        names["output.weight"] = ["lm_head.weight"]
    for i in range(cfg.n_layers):
        ours, theirs = f"layers.{i}.", f"model.layers.{i}."
        names.update({
            ours + "attention_norm.weight": [theirs + "input_layernorm.weight"],
            ours + "ffn_norm.weight": [theirs + "post_attention_layernorm.weight"],
            **{ours + f"attention.w{x}.weight": [theirs + f"self_attn.{x}_proj.weight"] for x in "qkvo"},
        })
        if cfg.is_moe:
            moe = theirs + "block_sparse_moe."
            names[ours + "feed_forward.router.weight"] = [moe + "gate.weight"]
            for w in ("w1", "w2", "w3"):
                names[ours + f"feed_forward.{w}"] = [moe + f"experts.{e}.{w}.weight" for e in range(cfg.n_experts)]
        else:
            for w, proj in (("w1", "gate_proj"), ("w2", "down_proj"), ("w3", "up_proj")):
                names[ours + f"feed_forward.{w}.weight"] = [theirs + f"mlp.{proj}.weight"]
    return names
