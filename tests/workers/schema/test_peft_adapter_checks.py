"""What an `init.adapter_uri` must hold, checked without torch
(workers/schema/peft_format.py): adapter_config.json the job's adapter, and
every adapter tensor of the job's model at its shape, and nothing else."""

from __future__ import annotations

import json

from workers.schema import ModelSpec
from workers.schema.adapter import AdapterSpec
from workers.schema.peft_format import (
    adapter_config_mismatch,
    adapter_tensor_shapes,
    peft_key,
    adapter_weights_mismatch,
    peft_config,
)

MODEL = ModelSpec.model_validate({"family": "llama", "n_layers": 2, "d_model": 64, "n_heads": 4,
                                  "n_kv_heads": 2, "ffn_dim": 96, "vocab_size": 256,
                                  "seq_len": 32})
ADAPTER = AdapterSpec(rank=4, alpha=8, targets=("q_proj", "k_proj", "down_proj"))
Q_A = "base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight"


def test_the_adapter_tensors_are_a_and_b_of_every_target_in_every_block():
    shapes = {peft_key(n): s for n, s in adapter_tensor_shapes(MODEL, ADAPTER).items()}
    assert len(shapes) == 2 * 3 * 2
    assert shapes[Q_A] == (4, 64)
    assert shapes["base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight"] == (32, 4)
    assert shapes["base_model.model.model.layers.0.mlp.down_proj.lora_A.weight"] == (4, 96)


def test_weights_that_are_not_the_adapters_are_named():
    shapes = {peft_key(n): s for n, s in adapter_tensor_shapes(MODEL, ADAPTER).items()}
    assert adapter_weights_mismatch(MODEL, ADAPTER, shapes) is None
    missing = {k: v for k, v in shapes.items() if k != Q_A}
    assert f"tensor {Q_A} is missing" in (adapter_weights_mismatch(MODEL, ADAPTER, missing) or "")
    wrong = shapes | {Q_A: (8, 64)}
    assert "has shape [8, 64]" in (adapter_weights_mismatch(MODEL, ADAPTER, wrong) or "")
    extra = shapes | {"base_model.model.lm_head.lora_A.weight": (4, 64)}
    assert "lm_head.lora_A.weight" in (adapter_weights_mismatch(MODEL, ADAPTER, extra) or "")


def test_a_config_must_be_the_jobs_adapter():
    ours = json.dumps(peft_config(ADAPTER)).encode()
    assert adapter_config_mismatch(ours, ADAPTER) is None
    assert adapter_config_mismatch(ours, AdapterSpec(rank=4, alpha=8, dropout=0.1,
                                                     targets=ADAPTER.targets)) is None
    assert "adapter.rank is 8" in (adapter_config_mismatch(
        ours, AdapterSpec(rank=8, alpha=8, targets=ADAPTER.targets)) or "")
    assert "not JSON" in (adapter_config_mismatch(b"{", ADAPTER) or "")
    dora = json.dumps(peft_config(ADAPTER) | {"use_dora": True}).encode()
    assert "use_dora" in (adapter_config_mismatch(dora, ADAPTER) or "")
