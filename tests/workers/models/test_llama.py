"""The Llama family against Hugging Face's own `LlamaForCausalLM`: the same
parameter names and shapes, and the same logits from the same weights."""

from __future__ import annotations

import pytest
import torch
import transformers

from workers.models import build_model
from workers.schema import ModelSpec

CASES = {
    "mha": dict(n_layers=2, d_model=64, n_heads=4, vocab_size=300, seq_len=32),
    "gqa": dict(n_layers=2, d_model=64, n_heads=8, n_kv_heads=2, ffn_dim=96, vocab_size=300,
                seq_len=32, rope_theta=500000.0),
    "tied": dict(n_layers=1, d_model=32, n_heads=2, vocab_size=257, seq_len=16,
                 tie_embeddings=True, norm_eps=1e-6),
}


def hf_config(spec: ModelSpec):
    return transformers.LlamaConfig(
        vocab_size=spec.vocab_size, hidden_size=spec.d_model, intermediate_size=spec.ffn_width,
        num_hidden_layers=spec.n_layers, num_attention_heads=spec.n_heads,
        num_key_value_heads=spec.kv_heads, max_position_embeddings=spec.seq_len,
        rope_theta=spec.rope_theta, rms_norm_eps=spec.norm_eps,
        tie_word_embeddings=spec.tie_embeddings, attention_bias=False,
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_equal_transformers_from_the_same_weights(case):
    spec = ModelSpec(family="llama", **CASES[case])
    torch.manual_seed(0)
    theirs = transformers.LlamaForCausalLM(hf_config(spec)).eval()
    ours = build_model(spec).eval()
    their_state = theirs.state_dict()
    our_state = ours.state_dict()
    assert sorted(our_state) == sorted(their_state)
    assert {k: v.shape for k, v in our_state.items()} == {k: v.shape for k, v in their_state.items()}
    ours.load_state_dict(their_state)
    idx = torch.randint(0, spec.vocab_size, (2, spec.seq_len))
    with torch.no_grad():
        expected = theirs(idx).logits
        got = ours(idx)
    assert torch.allclose(got, expected, atol=1e-5, rtol=0), (got - expected).abs().max()


@pytest.mark.parametrize("case", sorted(CASES))
def test_num_params_matches_the_built_model(case):
    spec = ModelSpec(family="llama", **CASES[case])
    model = build_model(spec)
    assert spec.num_params() == sum(p.numel() for p in model.parameters())  # tied counted once


def test_a_gpt_refuses_llama_fields():
    with pytest.raises(ValueError, match="model.n_kv_heads is not a field of the 'gpt' family"):
        ModelSpec(family="gpt", n_kv_heads=2)


@pytest.mark.parametrize("fields, message", [
    ({"n_heads": 4, "n_kv_heads": 3}, "n_kv_heads (3) must divide model.n_heads (4)"),
    ({"d_model": 36, "n_heads": 12}, "must be even for rotary"),
])
def test_llama_shape_refusals(fields, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ModelSpec(family="llama", **fields)


def test_a_gpt_config_hash_is_what_it_was_before_the_llama_fields():
    """Checkpoints written before the Llama family keep resuming: their config
    hash (pinned here from the code before it) does not move."""
    from workers.schema import JobSpec

    spec = JobSpec.model_validate({"model": {"n_layers": 2}, "train": {"steps": 3}})
    assert spec.config_hash() == "2444a747562abe63cf6d305ee442b816b007edc5a2745f625e2af184aaa338d4"
