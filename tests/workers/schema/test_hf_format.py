"""A model spec as Hugging Face sees it (torch-free): the tensors the
checks at submit compare a directory's headers with, the config.json an
export writes, and the `init` section of the spec."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from workers.schema.hf_format import (
    exported_config,
    NoHuggingFaceArchitecture,
    config_mismatch,
    hf_config,
    model_mismatch,
    tensor_shapes,
    weights_mismatch,
)
from workers.schema import JobSpec, ModelSpec

LLAMA = ModelSpec(family="llama", n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, ffn_dim=96,
                  vocab_size=300, seq_len=32)


def test_the_shapes_are_the_models_and_count_its_parameters():
    shapes = tensor_shapes(LLAMA)
    assert shapes["model.layers.1.self_attn.k_proj.weight"] == (32, 64)  # 2 kv heads of 16
    assert shapes["lm_head.weight"] == (300, 64)
    assert sum(math.prod(s) for s in shapes.values()) == LLAMA.num_params()
    tied = LLAMA.model_copy(update={"tie_embeddings": True})
    assert "lm_head.weight" not in tensor_shapes(tied)
    with pytest.raises(NoHuggingFaceArchitecture, match="'gpt' has no Hugging Face"):
        tensor_shapes(ModelSpec())


def test_a_mismatch_names_the_tensor():
    found = dict(tensor_shapes(LLAMA))
    assert weights_mismatch(LLAMA, found) is None
    assert weights_mismatch(LLAMA, {**found, "model.rotary_emb.inv_freq": (8,)}) is None
    del found["model.norm.weight"]
    assert weights_mismatch(LLAMA, found) == (
        "model.norm.weight", "tensor model.norm.weight is missing from the weights")
    found["model.norm.weight"] = (65,)
    assert "has shape [65] in the weights, the job's model has [64]" in weights_mismatch(
        LLAMA, found)[1]
    found = {**tensor_shapes(LLAMA), "model.layers.2.mlp.up_proj.weight": (96, 64)}
    assert weights_mismatch(LLAMA, found)[0] == "model.layers.2.mlp.up_proj.weight"
    assert "model.layers.2" in model_mismatch(LLAMA, LLAMA.model_copy(update={"n_layers": 3}))
    assert model_mismatch(ModelSpec(), ModelSpec(seq_len=128)) == (
        "model.seq_len is 64, the source job's is 128")


def test_config_json_must_agree_where_shapes_cannot_tell():
    config = hf_config(LLAMA, "bfloat16")
    assert config["architectures"] == ["LlamaForCausalLM"] and config["dtype"] == "bfloat16"
    assert config_mismatch(LLAMA, config) is None
    assert config_mismatch(LLAMA, {"rope_parameters": {"rope_theta": 5e5}}) == (
        "model.rope_theta", "model.rope_theta is 10000.0, the weights' config.json says "
                            "rope_theta 500000.0")
    assert config_mismatch(LLAMA, {"rope_scaling": {"type": "linear"}})[0] == "model.rope_theta"
    assert config_mismatch(LLAMA, {"hidden_act": "gelu"})[0] == "model.family"
    with pytest.raises(NoHuggingFaceArchitecture, match="qkv_bias"):
        hf_config(LLAMA.model_copy(update={"qkv_bias": True}), "float32")


def spec(**init) -> dict:
    return {"model": LLAMA.model_dump(), "train": {"steps": 1}, "init": init}


def test_init_takes_one_source_and_is_part_of_the_curve():
    plain = JobSpec.model_validate({"model": LLAMA.model_dump(), "train": {"steps": 1}})
    forked = JobSpec.model_validate(spec(job="j-1", step=10))
    assert plain.config_hash() != forked.config_hash()
    assert "init" not in plain.model_dump(include={"init"}, exclude_none=True)
    for bad, field in [({}, "init.uri"), ({"uri": "file:///a", "job": "b"}, "init.uri"),
                       ({"uri": "file:///a", "resume_optimizer": True}, "init.resume_optimizer"),
                       ({"job": "../x"}, "init.job")]:
        with pytest.raises(ValidationError) as refused:
            JobSpec.model_validate(spec(**bad))
        assert ".".join(map(str, refused.value.errors()[0]["loc"])) == field
    # (an empty model is no model: init.uri alone reads it from its config.json)
    with pytest.raises(ValidationError, match="needs model.family 'llama'"):
        JobSpec.model_validate({"model": {"family": "gpt"}, "train": {"steps": 1},
                                "init": {"uri": "file:///a"}})


def test_an_export_keeps_the_base_models_config_but_for_what_training_changed():
    model = ModelSpec.model_validate({"family": "llama", "n_layers": 2, "d_model": 64,
                                      "n_heads": 4, "n_kv_heads": 2, "ffn_dim": 96,
                                      "vocab_size": 256, "seq_len": 32, "norm_eps": 1e-6})
    ours = hf_config(model, "bfloat16")
    base = {**ours, "max_position_embeddings": 128, "bos_token_id": 1, "eos_token_id": 2,
            "torch_dtype": "float32", "pad_token_id": None, "custom_field": [1, 2]}
    del base["dtype"]
    kept = exported_config(ours, base)
    assert kept["max_position_embeddings"] == 128  # the base's context, not the job's seq_len
    for key in ("bos_token_id", "eos_token_id", "torch_dtype", "pad_token_id", "custom_field"):
        assert kept[key] == base[key], key
    assert "dtype" not in kept
    assert {k: kept[k] for k in ("hidden_size", "num_hidden_layers", "vocab_size")} == {
        "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 256}
    # a job that trained past the base's context exports its own
    assert exported_config(ours, {**base, "max_position_embeddings": 16})[
        "max_position_embeddings"] == 32
    # no base (random init): the job's own config
    assert exported_config(ours, None) == ours
