"""A model spec as Hugging Face sees it: its tensors' names and shapes and
its `config.json`. Torch-free (the API checks an `init.uri` against a job's
model with it, from the safetensors headers alone).

Brigade's Llama names its parameters exactly as `LlamaForCausalLM` does
(workers/models/llama.py), so a name here is a name in both; a tied head
(`tie_word_embeddings`) has no `lm_head.weight` of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from workers.schema import ModelSpec

HF_ARCHITECTURE = {"llama": "LlamaForCausalLM"}
# Buffers some older Hugging Face files carry beside the weights: not parameters.
IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)
# A Llama block's parameters in the order of its shapes (workers/schema/families.py
# `_llama_shapes`): the q, k, v biases last, only where qkv_bias.
LLAMA_BLOCK_NAMES = (
    "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
    "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
    "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias")
# What of a GPT model fixes its tensors' shapes (its position table follows seq_len).
GPT_SHAPE_FIELDS = ("n_layers", "d_model", "seq_len", "vocab_size", "mlp_ratio")


class NoHuggingFaceArchitecture(ValueError):
    """A model with no Hugging Face architecture to import from or export to."""


def tensor_shapes(model: ModelSpec) -> dict[str, tuple[int, ...]]:
    """Every parameter of the model `model` builds, by its Hugging Face name."""
    if model.family not in HF_ARCHITECTURE:
        raise NoHuggingFaceArchitecture(
            f"model.family {model.family!r} has no Hugging Face architecture "
            f"(those that do: {', '.join(HF_ARCHITECTURE)})")
    count = model.family_spec.shapes
    assert count is not None, model.family  # every family with an architecture has its shapes
    shapes = count(model)  # the family's own count, named here
    embedding, norm, *head = shapes.rest
    named: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": embedding}
    for i in range(shapes.n_blocks):
        named |= {f"model.layers.{i}.{name}": shape for name, shape in zip(
            LLAMA_BLOCK_NAMES, shapes.block, strict=False)}  # the biases only with qkv_bias
    named["model.norm.weight"] = norm
    if head:  # untied
        named["lm_head.weight"] = head[0]
    return named


def weights_mismatch(model: ModelSpec, found: Mapping[str, Sequence[int]]) -> tuple[str, str] | None:
    """(tensor, why) the first way the tensors `found` (name -> shape) do
    not fit `model`; None if every parameter is there with its shape."""
    expected = tensor_shapes(model)
    for name, shape in expected.items():
        if name not in found:
            return name, f"tensor {name} is missing from the weights"
        if tuple(found[name]) != shape:
            return name, (f"tensor {name} has shape {list(found[name])} in the weights, "
                          f"the job's model has {list(shape)}")
    for name in sorted(found):
        if name in expected or name.endswith(IGNORED_SUFFIXES):
            continue
        if name == "lm_head.weight" and model.tie_embeddings:
            continue  # a tied head saved anyway: the embedding is the one read
        return name, f"tensor {name} of the weights is not a parameter of the job's model"
    return None


def model_mismatch(model: ModelSpec, source: ModelSpec) -> str | None:
    """Why the parameters of a job with model `source` cannot initialise `model`, or None."""
    if model.family != source.family:
        return f"model.family is {model.family!r}, the source job's is {source.family!r}"
    if model.family in HF_ARCHITECTURE:
        found = tensor_shapes(source)
        problem = weights_mismatch(model, found)
        return None if problem is None else problem[1].replace("the weights", "the source job")
    for name in GPT_SHAPE_FIELDS:
        if getattr(model, name) != getattr(source, name):
            return (f"model.{name} is {getattr(model, name)}, the source job's is "
                    f"{getattr(source, name)}")
    return None


def hf_config(model: ModelSpec, dtype: str) -> dict[str, Any]:
    """`config.json` of the model, for `transformers`' `from_pretrained`."""
    if model.family not in HF_ARCHITECTURE:
        tensor_shapes(model)  # raises, naming the family
    if model.qkv_bias:
        raise NoHuggingFaceArchitecture(
            "model.qkv_bias: LlamaForCausalLM's attention_bias also puts a bias on o_proj, "
            "which this model has not; no export for it yet")
    return {
        "architectures": [HF_ARCHITECTURE[model.family]],
        "model_type": model.family,
        "vocab_size": model.vocab_size,
        "hidden_size": model.d_model,
        "intermediate_size": model.ffn_width,
        "num_hidden_layers": model.n_layers,
        "num_attention_heads": model.n_heads,
        "num_key_value_heads": model.kv_heads,
        "head_dim": model.d_model // model.n_heads,
        "hidden_act": "silu",
        "max_position_embeddings": model.seq_len,
        "rms_norm_eps": model.norm_eps,
        "rope_parameters": {"rope_theta": model.rope_theta, "rope_type": "default"},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "tie_word_embeddings": model.tie_embeddings,
        "initializer_range": 0.02,
        "use_cache": True,
        "dtype": dtype,
    }


# The files of a Hugging Face model directory that are not its weights and that an export of a
# model fine-tuned from it carries over as they were: its tokenizer and its generation defaults.
CARRIED_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                 "added_tokens.json", "tokenizer.model", "vocab.json", "merges.txt",
                 "chat_template.jinja", "generation_config.json")


def exported_config(ours: Mapping[str, Any], base: Mapping[str, Any] | None) -> dict[str, Any]:
    """The config.json of an export. A model fine-tuned from Hugging Face files (`base`, their
    config.json) keeps that config: every field (token ids, `max_position_embeddings`, its
    dtype, fields Brigade does not read) as it was, but for what training changed: the shapes
    and the forward's constants are the job's (`ours`; intake refused a mismatch, so they agree)
    and a context the job trained past the base's is the job's. A model trained from scratch
    has `ours` alone."""
    if base is None:
        return dict(ours)
    kept = dict(base)
    for key in ("architectures", "model_type", "vocab_size", "hidden_size", "intermediate_size",
                "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "tie_word_embeddings", "rms_norm_eps"):
        kept[key] = ours[key]
    trained = ours["max_position_embeddings"]
    kept["max_position_embeddings"] = max(int(base.get("max_position_embeddings") or 0), trained)
    return kept


# config.json's keys that change the forward without changing a shape, and the spec's fields.
CONFIG_FIELDS = (("rope_theta", "rope_theta"), ("rms_norm_eps", "norm_eps"),
                 ("tie_word_embeddings", "tie_embeddings"))


def config_mismatch(model: ModelSpec, config: Mapping[str, Any]) -> tuple[str, str] | None:
    """(spec field, why) a Hugging Face config.json describes another model
    than `model` where the shapes cannot tell (rotary base, norm epsilon,
    tied head, activation); None if it agrees."""
    if config.get("hidden_act", "silu") != "silu":
        return "model.family", f"config.json's hidden_act is {config['hidden_act']!r}, not 'silu'"
    rope = config.get("rope_parameters") or {}  # transformers 5; before, rope_theta at the top
    if config.get("rope_scaling") or rope.get("rope_type", "default") != "default":
        return "model.rope_theta", ("config.json scales its rotary embeddings (rope_scaling / "
                                    "rope_type), which Brigade's Llama does not do")
    config = {**config, **({"rope_theta": rope["rope_theta"]} if "rope_theta" in rope else {})}
    for key, name in CONFIG_FIELDS:
        if key in config and config[key] != getattr(model, name):
            return f"model.{name}", (f"model.{name} is {getattr(model, name)!r}, the weights' "
                                     f"config.json says {key} {config[key]!r}")
    return None
