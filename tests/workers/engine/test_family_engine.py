"""Every family through the whole engine: a Llama (grouped-query attention,
an MLP width of its own) follows the single-process loss curve at world
sizes 3 and 2 under every strategy and lever, and the sharded build gives
the same full initial weights at world sizes 1, 2 and 3 for every family."""

from __future__ import annotations

from typing import get_args

import pytest

from tests.workers.engine_spec import TINY_MODEL, engine_spec
from workers.engine.local import run_single_process
from workers.schema import JobSpec, Strategy

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]

STEPS = 12
LLAMA = {"family": "llama", "n_layers": 2, "d_model": 48, "n_heads": 4, "n_kv_heads": 2,
         "ffn_dim": 80, "seq_len": 32, "vocab_size": 256}
FAMILIES = {"gpt": TINY_MODEL, "llama": LLAMA}


def llama_job(**sharding) -> dict:
    return engine_spec(STEPS, model=LLAMA, data={"source": "synthetic"}, sharding=sharding)


def losses(metrics):
    return [m["loss"] for m in metrics]


@pytest.fixture(scope="module")
def single_process():
    cache: dict = {}

    def run(spec: dict) -> list[float]:
        key = repr(spec)
        if key not in cache:
            cache[key] = losses(run_single_process(JobSpec.model_validate(spec)))
        return cache[key]

    return run


def digests_in_one_process(spec: dict) -> dict[str, str]:
    from workers.engine.distributed import destroy_process_group, init_single_process
    from workers.engine.trainer import Trainer

    init_single_process()
    try:
        return Trainer(JobSpec.model_validate(spec)).state_digests()
    finally:
        destroy_process_group()


# World size varies slowest, 2 last: one group of 3, then one of 2 for the tests after.
@pytest.mark.parametrize("strategy", get_args(Strategy))
@pytest.mark.parametrize("world_size", [3, 2])
def test_llama_losses_equal_a_single_process(groups, single_process, world_size, strategy):
    spec = llama_job(strategy=strategy)
    per_rank = groups.get(world_size).train(spec)
    for metrics in per_rank:
        assert losses(metrics) == pytest.approx(single_process(spec), abs=1e-5)
    if strategy == "full_shard":
        m = per_rank[0][0]
        assert m["comm_bytes"] == pytest.approx(m["comm_bytes_theory"], rel=0.02)


@pytest.mark.parametrize("world_size", [3, 2])
def test_the_same_full_initial_weights_at_any_world_size(groups, world_size):
    for family, model in FAMILIES.items():
        spec = engine_spec(1, model=model, data={"source": "synthetic"})
        group = groups.get(world_size)
        assert group.train(spec, stop_after=0) == [[]] * world_size  # built, no step taken
        at_n = group.call("state_digests")[0]
        assert at_n == digests_in_one_process(spec), family
        assert any(k.startswith("model.") for k in at_n)
    if world_size == 2:  # tensor parallelism's Shard(0), Shard(1) and Replicate pieces too
        spec = engine_spec(1, model=LLAMA, data={"source": "synthetic"}, parallelism={"tp": 2},
                           workers=2)
        assert groups.get(2).train(spec, stop_after=0) == [[]] * 2
        at_tp = groups.get(2).call("state_digests")[0]
        assert at_tp == digests_in_one_process(engine_spec(1, model=LLAMA,
                                                           data={"source": "synthetic"}))


def test_tied_llama_embeddings_under_full_shard(groups, single_process):
    spec = engine_spec(STEPS, model=LLAMA | {"tie_embeddings": True}, data={"source": "synthetic"})
    per_rank = groups.get(2).train(spec)
    assert losses(per_rank[0]) == pytest.approx(single_process(spec), abs=1e-5)


def test_llama_levers_change_nothing_numerically(groups, single_process):
    # Activation checkpointing, CPU offload, explicit prefetch, two blocks a unit.
    spec = llama_job(activation_checkpointing=True, cpu_offload=True, prefetch_forward=2,
                     prefetch_backward=2, blocks_per_unit=2)
    per_rank = groups.get(2).train(spec)
    assert losses(per_rank[0]) == pytest.approx(single_process(llama_job()), abs=1e-5)


# The levers are lossy (gradients rounded to bf16 or quantised to int8 on the wire,
# forward and backward computed in bf16), so no 1e-5 equivalence: measured here,
# 12 steps of this Llama at world size 2 end within 4.5e-6 (bf16 gradients),
# 1.1e-5 (int8) and 3.7e-5 (bf16 params) relative of the fp32 single-process curve,
# the same on a rerun (deterministic). The bounds are ~5x those: a lever gone
# wrong by more than its rounding (a coarser code, a lost scale) fails them.
@pytest.mark.parametrize(("sharding", "rel"), [
    ({"grad_compression": "bf16"}, 3e-5), ({"grad_compression": "int8"}, 6e-5),
    ({"param_dtype": "bfloat16", "reduce_dtype": "float32"}, 2e-4),
], ids=["bf16-grads", "int8-grads", "bf16-params"])
def test_llama_trains_with_compression_and_mixed_precision(groups, single_process, sharding, rel):
    got = losses(groups.get(2).train(llama_job(**sharding))[0])
    reference = single_process(llama_job())
    assert all(loss == loss for loss in got)  # no NaN
    assert got[-1] < got[0]
    assert got == pytest.approx(reference, rel=rel)  # lossy, but the same curve
