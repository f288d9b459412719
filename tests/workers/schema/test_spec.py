"""The one job schema: every refusal names its field from pydantic's own
location, world-size checks name theirs, and the engine's derived figures
(mesh shape, accumulation, parameter count) follow from the spec."""

import pytest
from pydantic import ValidationError

from workers.schema.spec_yaml import load_spec_yaml
from workers.schema import JobSpec, ModelSpec, ShardingSpec, SpecError, explain, split_evenly, unknown_field

BASE = {"model": {"n_layers": 2, "d_model": 32, "n_heads": 4}, "train": {"steps": 3}}


def spec(**sections) -> JobSpec:
    return JobSpec.model_validate(BASE | sections)


@pytest.mark.parametrize(
    "sections, field, message",
    [
        ({"train": {"steps": 3, "global_batch_size": 4}, "workers": 5},
         "train.global_batch_size", "smaller than the world size (5)"),
        ({"sharding": {"strategy": "zero4"}}, "sharding.strategy", "full_shard"),
        ({"sharding": {"param_dtype": "float8"}}, "sharding.param_dtype", "bfloat16"),
        ({"sharding": {"blocks_per_unit": 3}}, "sharding.blocks_per_unit", "1..model.n_layers (2)"),
        ({"sharding": {"strategy": "hybrid_shard", "shard_group_size": 3}, "workers": 4,
          "train": {"steps": 3, "global_batch_size": 12}}, "sharding.shard_group_size", "must divide"),
        ({"sharding": {"shard_group_size": 2}}, "sharding.shard_group_size",
         "only used with 'hybrid_shard'"),
        ({"sharding": {"grad_compression": "int4"}}, "sharding.grad_compression", "'bf16'"),
        ({"sharding": {"strategy": "no_shard", "grad_compression": "int8"}},
         "sharding.grad_compression", "compresses the gradient reduce-scatter"),
        ({"sharding": {"prefetch_forward": -1}}, "sharding.prefetch_forward", "greater than"),
        ({"model": {"d_model": 50, "n_heads": 4}}, "model.d_model", "divisible by model.n_heads"),
        ({"model": {"family": "bert"}}, "model.family", "registered: gpt, llama"),
        ({"model": {"n_layers": 0}}, "model.n_layers", "greater than or equal to 1"),
        ({"data": {"source": "web"}}, "data.source", "'builtin'"),
        ({"data": {"source": "uri"}}, "data.uri", "data.uri is required"),
        ({"model": {"vocab_size": 100}}, "model.vocab_size", "must be >= 256"),
        ({"train": {"steps": 0}}, "train.steps", "greater than or equal to 1"),
        ({"train": {"steps": 3, "lr": 0}}, "train.lr", "greater than 0"),
        ({"train": {"steps": "ten"}}, "train.steps", "valid integer"),
        ({"train": {"steps": 2.5}}, "train.steps", "valid integer"),
        # strict: what JSON Schema calls another type is refused, never coerced
        ({"train": {"steps": "10"}}, "train.steps", "valid integer"),
        ({"train": {"steps": True}}, "train.steps", "valid integer"),
        ({"train": {"lr": "0.1"}}, "train.lr", "valid number"),
        ({"train": {"lr": False}}, "train.lr", "valid number"),
        ({"sharding": {"cpu_offload": 1}}, "sharding.cpu_offload", "valid boolean"),
        ({"sharding": {"cpu_offload": "true"}}, "sharding.cpu_offload", "valid boolean"),
        ({"name": 7}, "name", "valid string"),
        ({"sharding": {"cpu_offload": "maybe"}}, "sharding.cpu_offload", "valid boolean"),
        ({"model": {"n_layers": None}}, "model.n_layers", "valid integer"),
        ({"modle": {}}, "modle", "Extra inputs"),
        ({"model": {"layers": 2}}, "model.layers", "Extra inputs"),
        ({"train": [1, 2]}, "train", "valid dictionary"),
    ],
)
def test_impossible_jobs_are_refused_at_the_field(sections, field, message):
    with pytest.raises(ValidationError) as caught:
        spec(**sections)
    errors = caught.value.errors()
    located = [e for e in errors if ".".join(str(p) for p in e["loc"]).startswith(field)]
    assert located, errors
    assert any(message in e["msg"] for e in located), located


def test_an_unknown_field_is_explained_with_the_nearest_allowed_names():
    with pytest.raises(ValidationError) as caught:
        spec(train={"steps": 3, "global_batch_sise": 8}, workers={"min": 1, "maxx": 2}, zzz=1)
    said = explain(caught.value, JobSpec)
    assert "train.global_batch_sise: unknown field (did you mean global_batch_size" in said
    assert "maxx: unknown field (did you mean max?)" in said
    assert "zzz: unknown field (allowed: adapter, after, checkpoint, data, eval," in said
    assert "Extra inputs" in explain(caught.value)  # without the model: pydantic's own words
    assert unknown_field(JobSpec, ("init", "jb")) == "unknown field (did you mean job?)"
    assert unknown_field(JobSpec, ("name", "x")) is None  # no model there


def test_a_world_size_the_job_cannot_run_at_names_the_field():
    job = spec(train={"steps": 3, "global_batch_size": 12}, workers={"min": 1, "max": 4})
    assert job.world_sizes() == [4, 3, 2, 1]
    job.check_world_size(5)  # 12 over 5: 3, 3, 2, 2, 2
    with pytest.raises(SpecError) as caught:
        job.check_world_size(13)
    assert caught.value.field == "train.global_batch_size"
    assert explain(caught.value).startswith("train.global_batch_size: train.global_batch_size (12)")


def test_an_elastic_job_may_use_every_size_up_to_its_batch():
    job = spec(train={"steps": 3, "global_batch_size": 8}, workers={"min": 2, "max": 6})
    assert job.world_sizes() == [6, 5, 4, 3, 2]
    job = spec(train={"steps": 3, "global_batch_size": 4}, workers={"min": 2, "max": 6})
    assert job.world_sizes() == [4, 3, 2]


def test_a_hybrid_job_keeps_only_the_sizes_its_shard_group_divides():
    job = spec(train={"steps": 3, "global_batch_size": 8}, workers={"min": 2, "max": 8},
               sharding={"strategy": "hybrid_shard", "shard_group_size": 2})
    assert job.world_sizes() == [8, 6, 4, 2]


@pytest.mark.parametrize(
    "total, parts, counts",
    [(8, 3, [3, 3, 2]), (8, 1, [8]), (8, 8, [1] * 8), (12, 5, [3, 3, 2, 2, 2]),
     (7, 4, [2, 2, 2, 1]), (2, 3, [1, 1, 0]), (0, 2, [0, 0])],
)
def test_split_evenly(total, parts, counts):
    assert split_evenly(total, parts) == counts
    assert sum(counts) == total and max(counts) - min(counts) <= 1


@pytest.mark.parametrize(
    "batch, micro, world, shares, steps",
    [(8, None, 3, [3, 3, 2], 1), (8, 2, 3, [3, 3, 2], 2), (8, 1, 3, [3, 3, 2], 3),
     (12, 4, 2, [6, 6], 2), (12, 5, 1, [12], 3), (12, 64, 3, [4, 4, 4], 1)],
)
def test_uneven_shares_and_their_micro_batches(batch, micro, world, shares, steps):
    # micro_batch_size bounds a micro-batch; every rank runs as many (some a
    # sample short, some possibly empty) so the ranks' collectives pair up.
    train = spec(train={"steps": 3, "global_batch_size": batch, "micro_batch_size": micro}).train
    assert train.rank_batches(world) == shares
    assert train.accumulation_steps(world) == steps
    for share in shares:
        assert max(split_evenly(share, steps)) <= (micro or share)


@pytest.mark.parametrize(
    "strategy, world, shape",
    [
        ("full_shard", 4, (4,)),
        ("shard_grad_op", 3, (3,)),
        ("no_shard", 3, (3, 1)),
        ("hybrid_shard", 4, (2, 2)),
        ("hybrid_shard", 6, (2, 3)),
        ("hybrid_shard", 3, (3, 1)),
    ],
)
def test_mesh_shapes(strategy, world, shape):
    assert ShardingSpec(strategy=strategy).mesh_shape(world) == shape


def test_hybrid_shard_group_size_is_honoured():
    assert ShardingSpec(strategy="hybrid_shard", shard_group_size=4).mesh_shape(8) == (2, 4)


def test_accumulation_steps():
    job = spec(train={"steps": 3, "global_batch_size": 24, "micro_batch_size": 2})
    assert job.train.accumulation_steps(3) == 4
    assert spec(train={"steps": 3, "global_batch_size": 24}).train.accumulation_steps(3) == 1


def test_num_params_matches_the_built_model():
    from workers.models import build_model

    for cfg in (ModelSpec(), ModelSpec(n_layers=3, d_model=64, n_heads=8, seq_len=16, vocab_size=300)):
        assert cfg.num_params() == sum(p.numel() for p in build_model(cfg).parameters())


def test_a_number_without_a_fraction_is_an_integer_as_json_schema_has_it():
    job = JobSpec.model_validate({"model": {}, "train": {"steps": 10.0}, "workers": {"min": 1.0, "max": 2}})
    assert job.train.steps == 10 and isinstance(job.train.steps, int) and job.workers.min == 1
    assert isinstance(spec(train={"steps": 3, "lr": 1}).train.lr, float)  # and an integer a number


def test_numbers_written_as_text_are_refused_and_a_spec_file_writes_them_as_numbers():
    with pytest.raises(ValidationError):
        spec(train={"steps": "3"})
    with pytest.raises(ValidationError):
        spec(train={"eps": "1e-08"})
    # PyYAML alone reads `1e-08` as a string (YAML 1.1 wants a dot); a spec file reads it as 1.2 does
    loaded = load_spec_yaml("train: {steps: 3, eps: 1e-08, lr: 1, beta2: 9.5E-1}\nname: '1e3'")
    job = spec(**loaded)
    assert job.train.eps == 1e-8 and job.train.beta2 == 0.95 and isinstance(job.train.lr, float)
    assert job.train.steps == 3 and job.name == "1e3"


def test_the_stored_form_reads_back_equal_and_the_hash_covers_the_curve_only():
    job = spec(checkpoint={"every_steps": 5, "async": True}, workers={"min": 1, "max": 2})
    again = JobSpec.model_validate(job.to_json())
    assert again == job and again.config_hash() == job.config_hash()
    assert again.to_json()["checkpoint"]["async"] is True
    # What does not change the loss curve does not change the hash ...
    assert spec(checkpoint={"every_steps": 1}, workers=4, priority=7, name="x").config_hash() \
        == spec().config_hash()
    # ... and what does, does.
    assert spec(train={"steps": 4}).config_hash() != spec().config_hash()
    assert spec(train={"steps": 3, "seed": 1}).config_hash() != spec().config_hash()


def test_operator_only_knobs_are_marked_in_the_schema():
    assert spec().operator_only_set() == []
    assert spec(sharding={"grad_error_feedback": True}).operator_only_set() == []  # the default
    assert spec(sharding={"grad_error_feedback": False}).operator_only_set() == [
        "sharding.grad_error_feedback"]
    schema = JobSpec.model_json_schema()
    sharding = schema["$defs"]["ShardingSpec"]["properties"]
    assert sharding["grad_error_feedback"].get("operator_only") is True
    assert "operator_only" not in sharding["grad_compression"]


def test_each_default_is_the_tenants():
    job = spec()
    assert (job.model.d_model, job.train.lr, job.checkpoint.every_steps, job.checkpoint.async_,
            job.checkpoint.memory_every_steps) == (32, 1e-3, 10, True, None)
    assert JobSpec.model_validate({"model": {}, "train": {"steps": 1}}).model.d_model == 64
