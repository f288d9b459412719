"""Submitting real models over HTTP: a Hugging Face config.json under the
tenant's data prefix becomes the stored model's fields; a family that is not
registered and a model too large for a worker are refused with the reason."""

from __future__ import annotations

import os

import pytest
import transformers

from service.intake.data_access import data_prefix

TRAIN = {"steps": 5}


@pytest.fixture
def config_uri(supervisor, tmp_path) -> str:
    transformers.Qwen2Config(vocab_size=300, hidden_size=64, intermediate_size=96,
                             num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2).save_pretrained(str(tmp_path))
    uri = data_prefix(supervisor.settings.resolved_data_uri_root, "admin") + "qwen/config.json"
    path = uri.removeprefix("file://")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(tmp_path / "config.json") as src, open(path, "w") as dst:
        dst.write(src.read())
    return uri


def test_a_config_uri_is_stored_as_the_models_fields(http, config_uri):
    response = http.post("/v1/jobs", json={"model": {"config_uri": config_uri, "seq_len": 32},
                                           "train": TRAIN})
    assert response.status_code == 201, response.text
    model = http.get(f"/v1/jobs/{response.json()['id']}").json()["spec"]["model"]
    assert model["config_uri"] is None  # the engine reads the fields, never the file
    assert {k: model[k] for k in ("family", "n_layers", "d_model", "n_heads", "n_kv_heads",
                                  "ffn_dim", "vocab_size", "seq_len", "qkv_bias")} == {
        "family": "llama", "n_layers": 2, "d_model": 64, "n_heads": 4, "n_kv_heads": 2,
        "ffn_dim": 96, "vocab_size": 300, "seq_len": 32, "qkv_bias": True}


@pytest.mark.parametrize("body, field, message", [
    ({"model": {"family": "mamba"}}, "model.family",
     "model.family 'mamba' is not a registered model family (registered: gpt, llama)"),
    ({"model": {"config_uri": "file:///etc/passwd"}}, "model.config_uri",
     "must lie under this tenant's data prefix"),
    ({"model": {"n_layers": 2}, "resources_per_worker": {"memory_gb": 0.001}},
     "resources_per_worker.memory_gb", "the model needs 0.00 GB per rank at 1 workers: sharded "
     "state 16 B x 135,808 params / 1"),
    # ~70B parameters: over a TB of state at one worker, more than any node of this cluster
    ({"model": {"family": "llama", "n_layers": 80, "d_model": 8192, "n_heads": 64,
                "n_kv_heads": 8, "ffn_dim": 28672, "vocab_size": 128256}}, "model",
     "a worker's share of the cluster's smallest node has"),
])
def test_refusals_name_the_reason(http, body, field, message):
    response = http.post("/v1/jobs", json={"train": TRAIN} | body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field
    assert message in error["message"]
