"""A Hugging Face `config.json` as a `ModelSpec`: what `model: {config_uri}`
resolves to (service/intake/model_config.py reads the file at submit). Pure and
torch-free.

The same code (workers/models/llama.py) covers three `model_type`s:

    llama     LlamaForCausalLM
    mistral   MistralForCausalLM: a Llama with grouped-query attention;
              its sliding window must be unset or cover the job's seq_len
              (then every token sees the whole causal context, as here)
    qwen2     Qwen2ForCausalLM: a Llama with biases on q, k and v
              (qkv_bias); likewise no sliding window shorter than seq_len

What the model cannot represent is refused, naming the key: another
`model_type`, a head_dim other than hidden_size / num_attention_heads,
rope scaling (`rope_scaling`, a `rope_type` other than "default"),
`attention_bias` (Llama's puts a bias on o_proj too), `mlp_bias`, an
activation other than silu, a sliding window shorter than seq_len.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from workers.schema import JobSpec, SpecError

FIELD = "model.config_uri"
MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few KB
MODEL_TYPES = ("llama", "mistral", "qwen2")
# What transformers assumes of a key that a config.json leaves out, by model_type.
DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False,
              "max_position_embeddings": 2048},
    "mistral": {"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False,
                "max_position_embeddings": 4096 * 32, "sliding_window": 4096},
    "qwen2": {"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False,
              "max_position_embeddings": 32768},
}
REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
            "vocab_size")


def _refused(why: str) -> SpecError:
    return SpecError(FIELD, f"{FIELD}: {why}")


def model_fields(config: Mapping[str, Any], seq_len: int) -> dict[str, Any]:
    """The `ModelSpec` fields (family llama) of the model `config` describes,
    trained at `seq_len`; `SpecError` at model.config_uri naming the key
    that cannot be represented."""
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise _refused(f"model_type {str(model_type)[:40]!r} is not one Brigade builds "
                       f"(it builds {', '.join(MODEL_TYPES)})")
    missing = [key for key in REQUIRED if not isinstance(config.get(key), int)]
    if missing:
        raise _refused(f"config.json has no integer {missing[0]!r}")
    c = {**DEFAULTS[model_type], **{k: v for k, v in config.items() if v is not None}}
    d, heads = c["hidden_size"], c["num_attention_heads"]
    if c.get("hidden_act", "silu") != "silu":
        raise _refused(f"hidden_act {c['hidden_act']!r} is not supported (only 'silu')")
    if "head_dim" in c and heads and c["head_dim"] * heads != d:
        raise _refused(f"head_dim {c['head_dim']} is not hidden_size / num_attention_heads "
                       f"({d} / {heads}), which Brigade's Llama assumes")
    rope = c.get("rope_parameters") or {}  # transformers 5; before it, rope_theta at the top
    if c.get("rope_scaling") or rope.get("rope_type", "default") != "default":
        raise _refused("rope_scaling / rope_type other than 'default' is not supported")
    if model_type == "llama" and c.get("attention_bias"):
        raise _refused("attention_bias puts a bias on o_proj too, which Brigade's Llama has "
                       "not (Qwen2-style q, k, v biases: model_type qwen2)")
    if c.get("mlp_bias"):
        raise _refused("mlp_bias is not supported")
    # An explicit null window is none at all (the default applies only where the key is absent).
    window = config.get("sliding_window", c.get("sliding_window")) \
        if model_type == "mistral" or c.get("use_sliding_window") else None
    if window is not None and window < seq_len:
        raise _refused(f"sliding_window {window} is shorter than model.seq_len ({seq_len}): "
                       "sliding-window attention is not supported")
    if seq_len > c["max_position_embeddings"]:
        raise _refused(f"model.seq_len ({seq_len}) is longer than max_position_embeddings "
                       f"({c['max_position_embeddings']})")
    return {
        "family": "llama",
        "n_layers": c["num_hidden_layers"],
        "d_model": d,
        "n_heads": heads,
        "n_kv_heads": c.get("num_key_value_heads", heads),
        "ffn_dim": c["intermediate_size"],
        "vocab_size": c["vocab_size"],
        "seq_len": seq_len,
        "rope_theta": float(rope.get("rope_theta", c["rope_theta"])),
        "norm_eps": float(c["rms_norm_eps"]),
        "tie_embeddings": bool(c["tie_word_embeddings"]),
        "qkv_bias": model_type == "qwen2",
    }


def resolve_config_uri(spec: JobSpec, uri: str, storage_options: dict | None = None) -> JobSpec:
    """`spec` with its model's fields read from the config.json at `uri`
    (checked by the caller: the service, against the tenant's data prefix),
    and the URI gone; the resolved model is then checked like any other."""
    raw = spec.to_json()
    raw["model"] = model_fields(read_config(uri, storage_options), spec.model.seq_len)
    try:
        return JobSpec.model_validate(raw)
    except ValidationError as e:
        error = e.errors()[0]
        field = ".".join(str(p) for p in error["loc"]) or FIELD
        raise SpecError(field, f"{field}: {error['msg']} (the model of {FIELD})") from None


def read_config(uri: str, storage_options: dict | None = None) -> dict:
    """The JSON object at `uri`, through fsspec (SpecError at model.config_uri if it is not one)."""
    import fsspec

    try:
        with fsspec.open(uri, "rb", **(storage_options or {})) as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise _refused(f"{uri} does not exist") from None
    except (OSError, ValueError) as e:
        raise _refused(f"{uri} could not be read ({type(e).__name__})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise _refused(f"{uri} is over {MAX_CONFIG_BYTES} bytes: not a config.json")
    try:
        config = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise _refused(f"{uri} is not JSON") from None
    if not isinstance(config, dict):
        raise _refused(f"{uri} holds a JSON {type(config).__name__}, not an object")
    return config
