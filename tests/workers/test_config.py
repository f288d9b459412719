"""The job config refuses impossible jobs with a message that names the field."""

import pytest

from workers.config import ConfigError, JobConfig, ModelConfig, ShardingConfig


def config(**sections) -> JobConfig:
    return JobConfig.from_dict(sections)


@pytest.mark.parametrize(
    "sections, world, message",
    [
        ({"train": {"global_batch": 12}}, 5, "not divisible by the world size (5)"),
        ({"sharding": {"strategy": "zero4"}}, 2, "unknown strategy 'zero4'"),
        ({"sharding": {"param_dtype": "float8"}}, 1, "sharding.param_dtype"),
        ({"sharding": {"blocks_per_unit": 3}}, 1, "sharding.blocks_per_unit"),
        ({"sharding": {"strategy": "hybrid_shard", "shard_group_size": 3}}, 4, "must divide"),
        ({"sharding": {"shard_group_size": 2}}, 4, "only used with 'hybrid_shard'"),
        ({"sharding": {"grad_compression": "int4"}}, 2, "sharding.grad_compression: unknown compression 'int4'"),
        ({"sharding": {"strategy": "no_shard", "grad_compression": "int8"}}, 2,
         "sharding.grad_compression compresses the gradient reduce-scatter"),
        ({"sharding": {"prefetch_forward": -1}}, 2, "sharding.prefetch_forward must be >= 0"),
        ({"sharding": {"prefetch_backward": -2}}, 2, "sharding.prefetch_backward must be >= 0"),
        ({"model": {"d_model": 50, "n_heads": 4}}, 1, "divisible by model.n_heads"),
        ({"model": {"kind": "bert"}}, 1, "unknown model 'bert'"),
        ({"model": {"n_layers": 0}}, 1, "model.n_layers must be >= 1"),
        ({"data": {"source": "web"}}, 1, "unknown source 'web'"),
        ({"data": {"source": "file"}}, 1, "data.uri is required"),
        ({"data": {"source": "builtin"}, "model": {"vocab_size": 100}}, 1, "vocab_size must be >= 256"),
        ({"train": {"global_batch": 12, "micro_batch": 4}}, 2, "must divide the per-rank batch"),
        ({"train": {"steps": 0}}, 1, "train.steps"),
        ({"optim": {"lr": 0}}, 1, "optim.lr"),
    ],
)
def test_impossible_jobs_are_refused_with_the_reason(sections, world, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        config(**sections).validate(world)


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"modle": {}}, "unknown config section"),
        ({"model": {"layers": 2}}, "model: unknown field"),
        ({"train": [1, 2]}, "expected a mapping"),
    ],
)
def test_malformed_configs_name_the_bad_key(raw, message):
    with pytest.raises(ConfigError, match=message):
        JobConfig.from_dict(raw)


def test_round_trip_and_hash_ignore_nothing():
    a = config(model={"n_layers": 3}, train={"steps": 7})
    b = JobConfig.from_dict(a.to_dict())
    assert b == a and b.config_hash() == a.config_hash()
    assert config(train={"steps": 8}).config_hash() != config(train={"steps": 7}).config_hash()


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
    assert ShardingConfig(strategy=strategy).mesh_shape(world) == shape


def test_hybrid_shard_group_size_is_honoured():
    assert ShardingConfig(strategy="hybrid_shard", shard_group_size=4).mesh_shape(8) == (2, 4)


def test_accumulation_steps():
    cfg = config(train={"global_batch": 24, "micro_batch": 2})
    assert cfg.train.accumulation_steps(3) == 4
    assert config(train={"global_batch": 24}).train.accumulation_steps(3) == 1


def test_num_params_matches_the_built_model():
    from workers.models import build_model

    for cfg in (ModelConfig(), ModelConfig(n_layers=3, d_model=64, n_heads=8, seq_len=16, vocab_size=300)):
        assert cfg.num_params() == sum(p.numel() for p in build_model(cfg).parameters())


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"train": {"steps": "ten"}}, "train.steps: expected int"),
        ({"train": {"steps": 2.5}}, "train.steps: expected int"),
        ({"sharding": {"cpu_offload": "yes"}}, "sharding.cpu_offload: expected bool"),
        ({"optim": {"lr": "fast"}}, "optim.lr: expected float"),
        ({"model": {"n_layers": None}}, "model.n_layers: a value is required"),
    ],
)
def test_values_of_the_wrong_type_are_refused(raw, message):
    with pytest.raises(ConfigError, match=message):
        JobConfig.from_dict(raw)


def test_numbers_written_as_text_are_parsed():
    cfg = JobConfig.from_dict({"optim": {"eps": "1e-08", "lr": 1}, "train": {"micro_batch": None}})
    assert cfg.optim.eps == 1e-8 and isinstance(cfg.optim.lr, float)
