"""Admission knows the model's size: 16 B/param / N of sharded state plus
the largest gathered unit must fit one worker, at every world size the job
may run at. Made-up models and workers; no cluster."""

from __future__ import annotations

import pytest

from service.scheduling.memory_fit import GB, MemoryFitPolicy, ModelSize, model_size, remedies, shard_degrees
from workers.schema import JobSpec

B = 1_000_000_000  # a billion parameters
POLICY = MemoryFitPolicy()


@pytest.mark.parametrize("model, sizes, worker_gb, fits, fits_from", [
    # 1B params: 16 GB of state at N = 1, 2 GB at N = 8, plus a 0.1B-param unit in fp32 (0.4 GB)
    (ModelSize(B, B // 10, 4), [(1, 1)], 80, True, None),
    (ModelSize(B, B // 10, 4), [(1, 1)], 16, False, None),
    (ModelSize(B, B // 10, 4), [(8, 8)], 2.4, True, None),
    (ModelSize(B, B // 10, 4), [(8, 8)], 2.3, False, None),
    # elastic 2..8: 8.4 GB at 2 does not fit 5 GB; from 4 (4.4 GB) it does
    (ModelSize(B, B // 10, 4), [(8, 8), (4, 4), (2, 2)], 5, False, 4),
    # bf16 params gather half the bytes
    (ModelSize(B, B // 10, 2), [(8, 8)], 2.25, True, None),
    # shard_grad_op keeps every unit gathered: 2 + 4 GB at N = 8
    (ModelSize(B, B // 10, 4, keeps_gathered=True), [(8, 8)], 5.9, False, None),
    # hybrid_shard's shard degree, not the world size, divides the state
    (ModelSize(B, B // 10, 4), [(8, 2)], 8.3, False, None),
    # tensor parallelism splits every parameter first
    (ModelSize(B, B // 10, 4, tp=2), [(8, 4)], 2.3, True, None),
    # a worker of unknown memory refuses nothing
    (ModelSize(B, B // 10, 4), [(1, 1)], None, True, None),
])
def test_the_decision(model, sizes, worker_gb, fits, fits_from):
    decision = POLICY.check(model, sizes, None if worker_gb is None else worker_gb * GB)
    assert decision.fits is fits
    assert decision.fits_from == fits_from


def test_a_refusal_gives_the_figures():
    decision = POLICY.check(ModelSize(B, B // 10, 4), [(4, 4), (2, 2)], 5 * GB,
                            "resources_per_worker.memory_gb")
    assert not decision.fits and decision.world_size == 2
    assert decision.reason == (
        "the model needs 8.40 GB per rank at 2 workers: sharded state 16 B x 1,000,000,000 "
        "params / 2 = 8.00 GB, plus 0.40 GB gathered (the largest unit, 100,000,000 params); "
        "resources_per_worker.memory_gb has 5.00 GB. It fits from 4 workers: set workers.min "
        "to at least that")


def test_figures_from_a_spec():
    spec = JobSpec.model_validate({
        "workers": {"min": 2, "max": 4},
        "model": {"family": "llama", "n_layers": 4, "d_model": 64, "n_heads": 4},
        "train": {"steps": 1, "global_batch_size": 8},
        "sharding": {"strategy": "hybrid_shard", "blocks_per_unit": 2, "param_dtype": "bfloat16"},
    })
    size = model_size(spec)
    count = spec.model.param_count()
    assert size.num_params == spec.model.num_params()
    assert size.largest_unit == max(2 * count.block, count.embedding, count.head, count.root)
    assert size.param_bytes == 2
    assert shard_degrees(spec, spec.world_sizes()) == [(4, 2), (3, 1), (2, 1)]


@pytest.mark.parametrize("train, per_param", [
    ({}, 16), ({"optimizer": "adam"}, 16), ({"optimizer": "sgd", "momentum": 0.9}, 12),
    ({"optimizer": "sgd"}, 8),
])
def test_the_optimizer_sets_the_state_per_param(train, per_param):
    spec = JobSpec.model_validate({"model": {"n_layers": 2}, "train": {"steps": 1, **train}})
    size = model_size(spec)
    for shard in (1, 2, 3):
        assert size.per_rank_bytes(shard)[0] == pytest.approx(per_param * size.num_params / shard)
    decision = POLICY.check(size, [(2, 2)], 1000.0)
    recipe = "" if not train else f" ({train['optimizer']})"
    assert f"sharded state{recipe} {per_param} B x {size.num_params:,} params / 2 = " \
        in decision.reason


@pytest.mark.parametrize("param_dtype, base_bytes", [("float32", 4), ("bfloat16", 2)])
def test_an_adapter_job_counts_its_frozen_base_at_its_dtype_and_its_adapters_at_16_bytes(
        param_dtype, base_bytes):
    from workers.schema.adapter import adapter_params

    llama = {"family": "llama", "n_layers": 4, "d_model": 256, "n_heads": 4, "vocab_size": 1024}
    spec = JobSpec.model_validate({"model": llama, "train": {"steps": 1},
                                   "sharding": {"param_dtype": param_dtype},
                                   "adapter": {"rank": 8}})
    full = model_size(spec.model_copy(update={"adapter": None}))
    size, params = model_size(spec), spec.model.num_params()
    adapters = adapter_params(spec.model, spec.adapter)
    # the seven targets of 4 blocks at rank 8: 8 x (in + out) each
    assert adapters == 4 * 8 * (4 * (256 + 256) + 3 * (256 + 1024))
    for shard in (1, 2, 4):
        expected = (base_bytes * params + 16 * adapters) / shard
        assert size.per_rank_bytes(shard)[0] == pytest.approx(expected)
        assert size.per_rank_bytes(shard)[0] < full.per_rank_bytes(shard)[0] / 3
    # a worker the full fine-tune does not fit, the adapter job does
    worker = 1.2 * size.per_rank_bytes(1)[0] + size.per_rank_bytes(1)[1]
    assert POLICY.check(size, [(1, 1)], worker).fits
    assert not POLICY.check(full, [(1, 1)], worker).fits


def job_of(**fields) -> JobSpec:
    return JobSpec.model_validate({"model": {"n_layers": 8, "d_model": 1024, "n_heads": 8, "seq_len": 16},
                                   "train": {"steps": 1}, **fields})


def test_a_model_too_big_is_told_what_would_make_it_fit():
    """The arithmetic says how many workers, how small a model, how much memory;
    and that cpu_offload moves the state to the memory counted, not away from it."""
    spec = job_of(resources_per_worker={"memory_gb": 0.2})
    said = remedies(spec, 0.2 * GB, room=4, memory_field="resources_per_worker.memory_gb")
    assert said.startswith("To fit: at least 11 workers (workers.max, train.global_batch_size at "
                           "least 11; the cluster has room for 4 workers of this size: add nodes); or "
                           "a model of at most about 12,123,181 parameters (this one has 101,238,784) "
                           "at 1 workers; or resources_per_worker.memory_gb of at least 1.67"), said
    assert "sharding.param_dtype bfloat16 (1.64 GB a rank at 1 workers, not enough alone)" in said
    assert said.endswith("sharding.cpu_offload would not help: a CPU worker's state is in host "
                         "memory already")
    on_gpus = job_of(resources_per_worker={"cpu": 1, "gpu": 1})
    said = remedies(on_gpus, 0.2 * GB)
    assert "a larger resources_per_worker.cpu" in said
    assert said.endswith("sharding.cpu_offload would not help: it moves a GPU's sharded state into "
                         "host memory, the memory counted here"), said


def test_the_remedies_say_when_workers_cannot_help_and_when_bfloat16_does():
    gathering = job_of(workers=4, train={"steps": 1, "global_batch_size": 4},
                       sharding={"strategy": "shard_grad_op", "blocks_per_unit": 2})
    size = model_size(gathering)
    fp32, bf16 = (sum(s.per_rank_bytes(4)) for s in (size, model_size(job_of(
        workers=4, train={"steps": 1, "global_batch_size": 4},
        sharding={"strategy": "shard_grad_op", "blocks_per_unit": 2, "param_dtype": "bfloat16"}))))
    between = (fp32 + bf16) / 2
    said = remedies(gathering, between)
    assert f"sharding.param_dtype bfloat16 ({bf16 / GB:.2f} GB a rank at 4 workers)" in said, said
    gathered = size.per_rank_bytes(1)[1]
    said = remedies(gathering, gathered * 0.9)
    assert said.startswith(f"To fit: no number of workers: what a rank gathers ({gathered / GB:.2f} "
                           "GB) is the same at any shard degree (fewer sharding.blocks_per_unit or "
                           "full_shard rather than shard_grad_op gathers less)"), said
