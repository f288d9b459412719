"""FLOPs per token from the spec (workers/schema/flops.py): a hand count of a
tiny model of each family, and the products torch's own FLOP counter sees in
a real forward and backward of the built model."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from workers.engine.adapters import add_adapters, freeze_base
from workers.schema import JobSpec
from workers.schema.flops import attention_flops_per_token, flops_per_token, job_flops_per_token

TINY = {"n_layers": 2, "d_model": 8, "n_heads": 2, "seq_len": 4, "vocab_size": 16}
LLAMA = {**TINY, "family": "llama", "n_kv_heads": 1, "ffn_dim": 12}
ADAPTER = {"rank": 2, "targets": ["q_proj", "v_proj"]}


def job(model: dict, adapter: dict | None = None) -> JobSpec:
    raw = {"model": model, "train": {"steps": 1, "global_batch_size": 2},
           "data": {"source": "synthetic"}}
    return JobSpec.model_validate(raw | ({"adapter": adapter} if adapter else {}))


# Attention: 12 x layers 2 x heads 2 x head_dim 4 x seq_len 4.
ATTENTION = 12 * 2 * 2 * 4 * 4
# GPT, d 8: per block 2 LayerNorms (4 x 8), qkv 8 x 24, proj 8 x 8, mlp 8 x 32 and 32 x 8;
# then ln_f (2 x 8) and the head 8 x 16. The token and position tables are lookups.
GPT_NORMS = 2 * (2 * 2 * 8) + 2 * 8
GPT_PRODUCTS = 2 * (8 * 24 + 8 * 8 + 8 * 32 + 32 * 8) + 8 * 16
# Llama, d 8, 2 heads of 4, 1 kv head, ffn 12: per block 2 RMSNorms (2 x 8), q 8 x 8,
# k and v 8 x 4, o 8 x 8, gate and up 8 x 12, down 12 x 8; then the norm (8) and head 8 x 16.
LLAMA_NORMS = 2 * (2 * 8) + 8
LLAMA_BLOCK_PRODUCTS = 8 * 8 + 2 * 8 * 4 + 8 * 8 + 3 * 8 * 12
LLAMA_PRODUCTS = 2 * LLAMA_BLOCK_PRODUCTS + 8 * 16
# LoRA rank 2 on q (8 -> 8) and v (8 -> 4), both blocks: A (2 x in) and B (out x 2)
ADAPTERS = 2 * (2 * (8 + 8) + 2 * (8 + 4))


def test_gpt_by_hand():
    spec = job(TINY)
    assert attention_flops_per_token(spec.model) == ATTENTION == 768
    assert job_flops_per_token(spec) == 6 * (GPT_PRODUCTS + GPT_NORMS) + ATTENTION == 11232


@pytest.mark.parametrize("tied", [False, True])
def test_llama_by_hand_the_tied_head_counted(tied):
    # a tied head shares the embedding's weights but still multiplies every token
    spec = job({**LLAMA, "tie_embeddings": tied})
    assert job_flops_per_token(spec) == 6 * (LLAMA_PRODUCTS + LLAMA_NORMS) + ATTENTION == 7536


def test_an_adapter_step_counts_the_frozen_base_forward_and_its_activation_gradients():
    spec = job(LLAMA, ADAPTER)
    assert ADAPTERS == 112
    expected = 4 * (LLAMA_PRODUCTS + LLAMA_NORMS) + 6 * ADAPTERS + ATTENTION
    assert job_flops_per_token(spec) == expected == 5952
    assert flops_per_token(spec.model) == 7536  # the same model without: 6P


def measured_products(spec: JobSpec) -> float:
    """Matrix-product FLOPs a token of one forward and backward of the built
    model, by torch's counter (CPU attention is not among what it counts)."""
    torch.manual_seed(0)
    model = spec.model.family_spec.build(spec.model)
    if spec.adapter is not None:
        add_adapters(model, spec)
        freeze_base(model)
    x = torch.randint(0, spec.model.vocab_size, (2, spec.model.seq_len))
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(x).flatten(0, 1), x.flatten()).backward()
    return counter.get_total_flops() / x.numel()


@pytest.mark.parametrize("model", [TINY, LLAMA, {**LLAMA, "tie_embeddings": True}],
                         ids=["gpt", "llama", "llama-tied"])
def test_torch_counts_six_flops_a_parameter_of_every_product(model):
    norms = GPT_NORMS if model.get("family") is None else LLAMA_NORMS
    spec = job(model)
    # the count's 6P also takes the norms' few parameters, as TorchTitan's does
    assert measured_products(spec) == job_flops_per_token(spec) - ATTENTION - 6 * norms


def test_torch_counts_an_adapter_step_within_the_stated_bound():
    spec = job(LLAMA, ADAPTER)
    counted = job_flops_per_token(spec) - ATTENTION - 4 * LLAMA_NORMS
    measured = measured_products(spec)
    # autograd skips the lowest block's activation gradients nothing below needs
    lowest_block = LLAMA_BLOCK_PRODUCTS + ADAPTERS // 2
    assert counted - 2 * lowest_block <= measured < counted
