"""`model: {config_uri}`: a Hugging Face config.json (made here by
transformers' own config classes, no download) resolved into the model's
fields at submit, and each thing Brigade's Llama cannot represent refused at
model.config_uri naming the key."""

from __future__ import annotations

import json

import pytest
import transformers

from service.intake.data_access import data_prefix
from service.intake.model_config import resolve_model
from workers.schema import JobSpec, SpecError
from workers.schema.hf_config import model_fields

SHAPE = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2)
EXPECTED = {"family": "llama", "n_layers": 2, "d_model": 64, "n_heads": 4, "n_kv_heads": 2,
            "ffn_dim": 96, "vocab_size": 300, "seq_len": 64}


def saved(config_class, **overrides) -> dict:
    """config.json as `save_pretrained` writes it."""
    return json.loads(config_class(**(SHAPE | overrides)).to_json_string())


@pytest.mark.parametrize("config_class, overrides, expected", [
    ("LlamaConfig", {}, {"qkv_bias": False, "tie_embeddings": False, "norm_eps": 1e-6}),
    ("LlamaConfig", {"tie_word_embeddings": True, "rms_norm_eps": 1e-5,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 5e5}},
     {"tie_embeddings": True, "norm_eps": 1e-5, "rope_theta": 5e5}),
    ("MistralConfig", {"sliding_window": None}, {"qkv_bias": False}),
    ("MistralConfig", {"sliding_window": 4096}, {"qkv_bias": False}),
    ("Qwen2Config", {}, {"qkv_bias": True}),
])
def test_llama_architectures_resolve_to_the_fields(config_class, overrides, expected):
    fields = model_fields(saved(getattr(transformers, config_class), **overrides), seq_len=64)
    assert fields == {**fields, **EXPECTED, **expected}
    assert JobSpec.model_validate({"model": fields, "train": {"steps": 1}}).model.num_params() > 0


def test_a_mistral_without_a_window_takes_any_seq_len():
    config = saved(transformers.MistralConfig, sliding_window=None)
    assert config["sliding_window"] is None
    assert model_fields(config, seq_len=8192)["seq_len"] == 8192
    with pytest.raises(SpecError, match="sliding_window 4096 is shorter"):
        model_fields({k: v for k, v in config.items() if k != "sliding_window"}, seq_len=8192)


@pytest.mark.parametrize("config, seq_len, message", [
    (saved(transformers.GPT2Config), 64, "model_type 'gpt2' is not one Brigade builds"),
    (saved(transformers.LlamaConfig, head_dim=32), 64, "head_dim 32 is not hidden_size"),
    (saved(transformers.LlamaConfig, rope_parameters={"rope_type": "linear", "factor": 2.0,
                                                      "rope_theta": 1e4}), 64, "rope_type"),
    (saved(transformers.LlamaConfig) | {"rope_scaling": {"type": "dynamic"}}, 64, "rope_scaling"),
    (saved(transformers.LlamaConfig, attention_bias=True), 64, "attention_bias puts a bias on o_proj"),
    (saved(transformers.LlamaConfig, mlp_bias=True), 64, "mlp_bias"),
    (saved(transformers.LlamaConfig, hidden_act="gelu"), 64, "hidden_act 'gelu'"),
    (saved(transformers.MistralConfig, sliding_window=32), 64, "sliding_window 32 is shorter"),
    (saved(transformers.Qwen2Config, use_sliding_window=True, sliding_window=16), 64,
     "sliding_window 16 is shorter"),
    (saved(transformers.LlamaConfig, max_position_embeddings=32), 64, "max_position_embeddings"),
    ({"model_type": "llama", "hidden_size": 64}, 64, "no integer 'num_hidden_layers'"),
])
def test_what_the_model_cannot_represent_is_refused_naming_it(config, seq_len, message):
    with pytest.raises(SpecError) as e:
        model_fields(config, seq_len)
    assert e.value.field == "model.config_uri"
    assert message in str(e.value)


@pytest.fixture
def data_root(tmp_path):
    return f"file://{tmp_path}/data-store"


def put(root: str, tenant: str, name: str, text: str) -> str:
    uri = data_prefix(root, tenant) + name
    path = uri.removeprefix("file://")
    import os

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return uri


def job(**model) -> JobSpec:
    return JobSpec.model_validate({"model": model, "train": {"steps": 1},
                                   "sharding": {"blocks_per_unit": 2}})


def test_submit_resolves_the_file_and_keeps_the_fields_not_the_uri(data_root, tmp_path):
    config = transformers.LlamaConfig(**SHAPE)
    config.save_pretrained(str(tmp_path / "hf"))  # what a tenant uploads
    uri = put(data_root, "acme", "llama/config.json", (tmp_path / "hf/config.json").read_text())
    resolved = resolve_model(job(config_uri=uri, seq_len=32), "acme", data_root)
    assert resolved.model.config_uri is None
    assert resolved.model.model_dump(include=set(EXPECTED)) == EXPECTED | {"seq_len": 32}
    assert resolved.to_json()["model"]["config_uri"] is None


def test_with_config_uri_only_seq_len_may_be_set():
    with pytest.raises(ValueError, match="model.d_model is read from model.config_uri"):
        job(config_uri="file:///x/config.json", d_model=128)


@pytest.mark.parametrize("where, text, message", [
    ("other-tenant", "{}", "must lie under this tenant's data prefix"),
    ("missing", None, "does not exist"),
    ("not-json", "{nope", "is not JSON"),
    ("a-list", "[1, 2]", "holds a JSON list, not an object"),
    ("small-model", json.dumps(saved(transformers.LlamaConfig, num_hidden_layers=1)),
     "sharding.blocks_per_unit must be in 1..model.n_layers (1)"),
])
def test_a_bad_config_uri_is_refused(data_root, where, text, message):
    if where == "other-tenant":
        uri = put(data_root, "other", "config.json", text)
    elif text is None:
        uri = data_prefix(data_root, "acme") + "nothing/config.json"
    else:
        uri = put(data_root, "acme", f"{where}/config.json", text)
    with pytest.raises(SpecError) as e:
        resolve_model(job(config_uri=uri), "acme", data_root)
    assert message in str(e.value)
    assert e.value.field in ("model.config_uri", "sharding.blocks_per_unit")
