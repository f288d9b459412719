"""Submitting real models over HTTP: a Hugging Face config.json under the
tenant's data prefix becomes the stored model's fields; a family that is not
registered and a model too large for a worker are refused with the reason; an
`init.adapter_uri` (a PEFT adapter made here by peft) is checked against the job's
`adapter` and refused at that field with the reason."""

from __future__ import annotations

import os
from pathlib import Path

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


def test_a_model_too_big_for_the_cluster_is_told_what_would_make_it_fit(http):
    """The figures, then the ways out, each with its own figure."""
    body = {"workers": 2, "model": {"n_layers": 8, "d_model": 1024, "n_heads": 8, "seq_len": 16},
            "resources_per_worker": {"memory_gb": 0.2}, "train": TRAIN}
    response = http.post("/v1/jobs", json=body)
    assert response.status_code == 422, response.text
    message = response.json()["error"]["message"]
    assert "the model needs 0.86 GB per rank at 2 workers" in message, message
    fix = message.split(". To fit: ", 1)[1]
    assert fix.startswith("at least 11 workers (workers.max, train.global_batch_size at least 11; "
                          "the cluster has room for 4 workers of this size: add nodes)"), fix
    for way in ("a model of at most about ", "resources_per_worker.memory_gb of at least 0.86",
                "sharding.param_dtype bfloat16", "sharding.cpu_offload would not help"):
        assert way in fix, (way, fix)


# -- fine-tuning in one line: `init: {uri: DIR}` and the model DIR holds ----------------------

@pytest.fixture(scope="module")
def hf_dir(supervisor, tmp_path_factory) -> str:
    """A tiny Llama (tests/workers/hf_ranks.py MODEL, with a context of 128) under the
    admin's prefix: its URI."""
    import json

    from tests.workers.hf_ranks import hf_llama

    uri = data_prefix(supervisor.settings.resolved_data_uri_root, "admin") + "models/tiny-llama"
    path = Path(uri.removeprefix("file://"))
    hf_llama(path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 128}))
    return uri


def stored_model(response) -> dict:
    assert response.status_code == 201, response.text
    return response.json()["spec"]["model"]


HF_MODEL = {"family": "llama", "n_layers": 2, "d_model": 64, "n_heads": 4, "n_kv_heads": 2,
            "ffn_dim": 96, "vocab_size": 256, "norm_eps": 1e-6, "config_uri": None}


@pytest.mark.parametrize("model, seq_len", [
    (None, 64),  # no model at all: every field from DIR/config.json, seq_len its default
    ({}, 64),
    ({"seq_len": 16}, 16),  # the one field a spec may add
    ({"config_uri": "CONFIG", "seq_len": 32}, 32),  # the config named, as before
])
def test_init_uri_alone_defines_the_model(http, hf_dir, model, seq_len):
    body: dict = {"init": {"uri": hf_dir}, "train": TRAIN}
    if model is not None:
        body["model"] = {k: f"{hf_dir}/config.json" if v == "CONFIG" else v
                         for k, v in model.items()}
    got = stored_model(http.post("/v1/jobs", json=body))
    assert {k: got[k] for k in HF_MODEL} == HF_MODEL
    assert got["seq_len"] == seq_len


def test_init_uri_alone_may_be_relative_to_the_prefix(http, hf_dir):
    response = http.post("/v1/jobs", json={"init": {"uri": "models/tiny-llama"}, "train": TRAIN})
    assert {k: stored_model(response)[k] for k in HF_MODEL} == HF_MODEL
    assert response.json()["spec"]["init"]["uri"] == hf_dir


def test_explicit_fields_with_init_uri_keep_their_meaning(http, hf_dir):
    from tests.workers.hf_ranks import MODEL

    got = stored_model(http.post("/v1/jobs", json={"model": MODEL, "init": {"uri": hf_dir},
                                                   "train": TRAIN}))
    assert {k: got[k] for k in MODEL} == MODEL
    # Fields that do not match the tensors are refused as they were: naming the tensor.
    r = http.post("/v1/jobs", json={"model": {**MODEL, "ffn_dim": 128}, "init": {"uri": hf_dir},
                                    "train": TRAIN})
    assert r.status_code == 422 and r.json()["error"]["field"] == "init.uri", r.text


@pytest.fixture(scope="module")
def mismatched_dir(hf_dir) -> str:
    """The tiny Llama's tensors under a config.json that says a wider MLP."""
    import json
    import shutil

    source = Path(hf_dir.removeprefix("file://"))
    target = source.parent / "mismatched"
    shutil.copytree(source, target)
    config = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**config, "intermediate_size": 128}))
    return f"file://{target}"


@pytest.mark.parametrize("case, field, words", [
    ("mismatched", "init.uri", ["model.layers.0.mlp.gate_proj.weight", "[96, 64]", "[128, 64]"]),
    ("no-config", "init.uri", ["config.json", "does not exist"]),
    ("family", "model.family", ["read from model.config_uri"]),
    ("no-model", "model", ["Field required"]),
])
def test_init_uri_alone_refusals_name_the_field(http, hf_dir, mismatched_dir, case, field, words):
    body: dict = {"init": {"uri": hf_dir}, "train": TRAIN}
    if case == "mismatched":
        body["init"]["uri"] = mismatched_dir
    elif case == "no-config":
        body["init"]["uri"] = hf_dir.replace("tiny-llama", "nothing-here")
    elif case == "family":  # the family is the config's model_type's
        body["model"] = {"config_uri": f"{hf_dir}/config.json", "family": "llama"}
    else:
        body = {"train": TRAIN}
    r = http.post("/v1/jobs", json=body)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["field"] == field, error
    for word in words:
        assert word in error["message"], error


# -- continuing from a PEFT adapter: `init: {uri: DIR, adapter_uri: PEFT_DIR}` ----------------

ADAPTER = {"rank": 4, "alpha": 8, "targets": ["q_proj", "v_proj", "down_proj"]}


@pytest.fixture(scope="module")
def adapter_dir(hf_dir, tmp_path_factory) -> str:
    """A LoRA adapter of the tiny Llama, saved by peft under the admin's prefix: its URI."""
    from tests.workers.hf_ranks import hf_llama
    from tests.workers.peft_dirs import peft_adapter

    uri = hf_dir.replace("tiny-llama", "tiny-lora")
    peft_adapter(hf_llama(tmp_path_factory.mktemp("base")), Path(uri.removeprefix("file://")),
                 rank=ADAPTER["rank"], alpha=ADAPTER["alpha"], targets=ADAPTER["targets"])
    return uri


def test_an_adapter_uri_may_be_relative_to_the_prefix(http, hf_dir, adapter_dir):
    r = http.post("/v1/jobs", json={"init": {"uri": hf_dir, "adapter_uri": "models/tiny-lora"},
                                    "adapter": ADAPTER, "train": TRAIN})
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["init"]["adapter_uri"] == adapter_dir


@pytest.fixture(scope="module")
def dora_dir(adapter_dir) -> str:
    """The adapter under a config that says DoRA."""
    import json
    import shutil

    source = Path(adapter_dir.removeprefix("file://"))
    target = source.parent / "tiny-dora"
    shutil.copytree(source, target)
    config = json.loads((target / "adapter_config.json").read_text())
    (target / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    return f"file://{target}"


@pytest.mark.parametrize("case, words", [
    ("missing", ["tiny-nothing", "has no adapter_config.json"]),
    ("rank", ["adapter.rank is 8, the adapter at init.adapter_uri has 4"]),
    ("dora", ["use_dora is True"]),
    ("base", ["has no adapter_config.json"]),  # a model directory is not an adapter's
    ("outside", ["must lie under this tenant's data prefix"]),
    ("traversal", ["must not contain '.' or '..' path segments"]),
])
def test_adapter_uri_refusals_name_the_field(http, hf_dir, adapter_dir, dora_dir, case, words):
    adapter, uri = dict(ADAPTER), adapter_dir
    if case == "missing":
        uri = adapter_dir.replace("tiny-lora", "tiny-nothing")
    elif case == "rank":
        adapter["rank"] = 8
    elif case == "dora":
        uri = dora_dir
    elif case == "base":
        uri = hf_dir
    elif case == "outside":
        uri = "file:///tmp"
    else:
        uri = "models/tiny-lora/../../../../other/data/models/tiny-lora"
    r = http.post("/v1/jobs", json={"init": {"uri": hf_dir, "adapter_uri": uri},
                                    "adapter": adapter, "train": TRAIN})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["field"] == "init.adapter_uri", error
    for word in words:
        assert word in error["message"], error
