"""Tensor parallelism without a process group: what the spec refuses and where,
the sizes at tp > 1, Llama's plan covering every parameter, and the
formulas' arithmetic."""

from __future__ import annotations

from fnmatch import fnmatch

import pytest
import torch
from pydantic import ValidationError

from workers.schema.families import model_family, registered_families
from workers.schema import JobSpec, ModelSpec, SpecError
from workers.engine.tensor_parallel import params_per_tp_rank, tp_comm_theory_bytes

LLAMA = {"family": "llama", "n_layers": 2, "d_model": 64, "n_heads": 8, "n_kv_heads": 4,
         "seq_len": 32, "vocab_size": 256, "ffn_dim": 96}


def spec(tp: int, workers=4, model=None, **sections) -> JobSpec:
    return JobSpec.model_validate({"workers": workers, "model": model or LLAMA,
                                   "train": {"steps": 1, "global_batch_size": 8},
                                   "parallelism": {"tp": tp}, **sections})


@pytest.mark.parametrize("tp, model, says", [
    (2, {"family": "gpt"}, "needs a model family with a tensor-parallel plan (llama), not 'gpt'"),
    (3, LLAMA | {"n_heads": 6, "n_kv_heads": 6, "d_model": 48, "ffn_dim": 100},
     "parallelism.tp (3) must divide model.ffn_dim (100)"),
    (8, LLAMA, "parallelism.tp (8) must divide model.n_kv_heads (4)"),
    (16, LLAMA, "parallelism.tp (16) must divide model.n_heads (8)"),
    (2, LLAMA | {"ffn_dim": 99}, "must divide model.ffn_dim (99)"),
    (2, LLAMA | {"vocab_size": 257}, "must divide model.vocab_size (257)"),
    (2, LLAMA | {"seq_len": 33}, "must divide model.seq_len (33)"),
])
def test_a_tp_the_model_cannot_split_is_refused_at_parallelism_tp(tp, model, says):
    with pytest.raises(ValidationError) as refused:
        spec(tp, workers=16, model=model)
    [error] = refused.value.errors()
    assert error["loc"] == ("parallelism", "tp")
    assert says in error["msg"]


def test_the_world_size_must_be_a_multiple_of_tp():
    job = spec(2, workers={"min": 1, "max": 6})
    assert job.world_sizes() == [6, 4, 2]
    with pytest.raises(SpecError) as refused:
        job.check_world_size(3)
    assert refused.value.field == "parallelism.tp"
    assert "world size (3) must be a multiple of parallelism.tp (2)" in str(refused.value)
    with pytest.raises(ValidationError) as refused_at_submit:
        spec(2, workers=1)
    assert refused_at_submit.value.errors()[0]["loc"] == ("parallelism", "tp")


def test_the_batch_and_the_shard_groups_split_the_data_parallel_size():
    # 8 samples over dp 8 (world 16 / tp 2): fine; over dp 9 (world 18): refused.
    job = spec(2, workers={"min": 1, "max": 18})
    assert job.world_size_problem(16) is None
    field, why = job.world_size_problem(18)
    assert field == "train.global_batch_size"
    assert "the data-parallel size (9 = world size 18 / parallelism.tp 2)" in why
    hybrid = spec(2, workers=8, sharding={"strategy": "hybrid_shard", "shard_group_size": 2})
    assert hybrid.world_size_problem(8) is None  # dp 4 = 2 replicas x 2
    field, why = hybrid.world_size_problem(6)  # dp 3
    assert field == "sharding.shard_group_size" and "must divide the data-parallel size (3" in why
    assert spec(1).parallelism.tp == 1 and spec(1).parallelism.dp_size(4) == 4


def test_tp_is_not_in_the_config_hash():
    """A checkpoint resumes at any (dp, tp) layout, as at any world size."""
    assert spec(1).config_hash() == spec(2).config_hash()


def test_exactly_the_families_with_a_plan_say_so():
    for name in registered_families():
        family = model_family(name)
        cfg = ModelSpec.model_validate({"family": name} | ({} if name != "llama" else LLAMA))
        with torch.device("meta"):
            model = family.build(cfg)
        assert hasattr(model, "tp_plan") == family.tensor_parallel, name


@pytest.mark.parametrize("tied", [False, True])
def test_llamas_plan_places_every_parameter(tied):
    """Each parameter's module is in the plan: a sharded style (embedding,
    projections, head) or SequenceParallel (the norms, replicated); and the
    replicated ones are exactly what `params_per_tp_rank` keeps whole."""
    from torch.distributed.tensor.parallel import SequenceParallel

    cfg = ModelSpec.model_validate(LLAMA | {"tie_embeddings": tied})
    with torch.device("meta"):
        model = model_family("llama").build(cfg)
    plan = model.tp_plan()
    replicated = 0
    for name, p in model.named_parameters():
        owner = name.rsplit(".", 1)[0]
        styles = [style for pattern, style in plan.items() if fnmatch(owner, pattern)]
        assert len(styles) == 1, name
        replicated += p.numel() if isinstance(styles[0], SequenceParallel) else 0
    whole = cfg.num_params()
    assert params_per_tp_rank(cfg, 2) == (whole - replicated) // 2 + replicated
    assert params_per_tp_rank(cfg, 1) == whole


def test_tp_bytes_formula():
    cfg = ModelSpec.model_validate(LLAMA)
    tokens, d, v, L = 4 * 32, 64, 256, 2
    # f n e ((8 + 3 ac) L d + 4 d + V) + 2 f e (2L + 1) d, f = (T-1)/T
    for tp in (2, 4):
        f = (tp - 1) / tp
        expect = f * tokens * 4 * (8 * L * d + 4 * d + v) + 2 * f * 4 * (2 * L + 1) * d
        assert tp_comm_theory_bytes(cfg, tp, tokens, 4) == pytest.approx(expect)
    recomputed = tp_comm_theory_bytes(cfg, 2, tokens, 2, activation_checkpointing=True)
    assert recomputed == pytest.approx(0.5 * tokens * 2 * (11 * L * d + 4 * d + v) + 2 * 0.5 * 2 * 5 * d)
    assert tp_comm_theory_bytes(cfg, 1, tokens, 4) == 0
