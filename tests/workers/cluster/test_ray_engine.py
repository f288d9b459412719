"""The engine in Ray rank actors follows the single-process loss curve, with
every optimizer (tests/workers/engine_spec.py RECIPES), and its collectives
move what the primer says they should."""

from typing import get_args

import pytest

from tests.workers.engine_spec import (
    RECIPE_STEPS,
    RECIPES,
    TINY_MODEL,
    engine_job,
    engine_spec,
    recipe_tolerance,
)
from workers.engine.local import run_single_process
from workers.schema import Strategy

STRATEGIES = get_args(Strategy)

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]

STEPS = 20


def job(strategy: str, recipe: str = "adamw", **sharding) -> dict:
    return engine_spec(STEPS if recipe == "adamw" else RECIPE_STEPS, data={"source": "synthetic"},
                       train=RECIPES[recipe], sharding={"strategy": strategy, **sharding})


@pytest.fixture(scope="module")
def single_process():
    cache = {}

    def run(strategy, recipe="adamw"):
        if (strategy, recipe) not in cache:
            cache[strategy, recipe] = run_single_process(engine_job(**job(strategy, recipe)))
        return cache[strategy, recipe]

    return run


@pytest.mark.parametrize("micro_batch_size", [None, 2, 1])
def test_a_batch_the_world_does_not_divide_equals_a_single_process(groups, micro_batch_size):
    # 8 over 3: 3, 3, 2 samples; micro-batches of at most 2 (2+1, 2+1, 1+1) or
    # of 1 (rank 2 runs an empty third), each weighted by its tokens.
    spec = engine_spec(8, data={"source": "synthetic"},
                       train={"global_batch_size": 8, "micro_batch_size": micro_batch_size})
    reference = [m["loss"] for m in run_single_process(engine_job(**spec))]
    per_rank = groups.get(3).train(spec)
    for metrics in per_rank:
        assert [m["loss"] for m in metrics] == pytest.approx(reference, abs=1e-5)


# World size varies slowest, 2 last: one group of 3, then one of 2 that the next test reuses.
@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("world_size", [3, 2])
def test_losses_equal_a_single_process(groups, single_process, world_size, strategy, recipe):
    per_rank = groups.get(world_size).train(job(strategy, recipe))
    reference = [m["loss"] for m in single_process(strategy, recipe)]
    assert reference[-1] < reference[0] - 0.01  # the optimizer moves the weights
    assert len(per_rank) == world_size
    for metrics in per_rank:  # every rank reports the same global loss
        assert [m["loss"] for m in metrics] == pytest.approx(reference, abs=recipe_tolerance(recipe))
    for m in per_rank[0]:
        assert m["comm_bytes"] > 0
        if strategy in ("full_shard", "no_shard"):
            # 3(N-1)/N x S for full_shard, 2(N-1)/N x S for no_shard.
            assert m["comm_bytes"] == pytest.approx(m["comm_bytes_theory"], rel=0.02)


TP_LLAMA = {"family": "llama", "n_layers": 2, "d_model": 32, "n_heads": 4, "n_kv_heads": 2,
            "seq_len": 16, "vocab_size": 256}


@pytest.mark.parametrize("recipe", RECIPES)
def test_each_optimizer_at_dp_1_tp_2_equals_a_single_process(groups, recipe):
    # A Llama's heads and MLP split over two ranks, each rank's optimizer
    # updating its Shard(0), Shard(1) and Replicate pieces.
    spec = engine_spec(RECIPE_STEPS, model=TP_LLAMA, data={"source": "synthetic"},
                       train={"global_batch_size": 8, **RECIPES[recipe]})
    reference = [m["loss"] for m in run_single_process(engine_job(**spec))]
    per_rank = groups.get(2).train(spec | {"workers": 2, "parallelism": {"tp": 2}})
    for metrics in per_rank:
        assert [m["loss"] for m in metrics] == pytest.approx(reference, abs=recipe_tolerance(recipe))


def test_the_wrap_unit_sets_the_collective_count(groups):
    group = groups.get(2)
    one_block = group.train(job("full_shard") | {"model": TINY_MODEL | {"n_layers": 4}})[0]
    all_blocks = group.train(job("full_shard", blocks_per_unit=4) | {"model": TINY_MODEL | {"n_layers": 4}})[0]
    # Units: embedding, the blocks (4 units of one, or one of four), head, root;
    # each gathers twice (forward, backward) and reduce-scatters once a step.
    assert one_block[0]["collectives"] == 3 * (1 + 4 + 1 + 1)
    assert all_blocks[0]["collectives"] == 3 * (1 + 1 + 1 + 1)
    assert one_block[0]["comm_bytes"] == all_blocks[0]["comm_bytes"]
    assert [m["loss"] for m in all_blocks] == pytest.approx([m["loss"] for m in one_block], abs=1e-5)


def test_explicit_prefetch_changes_the_timing_not_the_losses(groups):
    group = groups.get(2)
    implicit = group.train(job("full_shard"))[0]
    ahead = group.train(job("full_shard", prefetch_forward=2, prefetch_backward=2))[0]
    assert [m["loss"] for m in ahead] == pytest.approx([m["loss"] for m in implicit], abs=1e-6)
    for m in implicit + ahead:
        assert m["collectives"] == implicit[0]["collectives"]
        # Exposed is the part of the time in flight that held the training thread,
        # per collective (workers/engine/comm.py), however late a wait wakes.
        # (Time in flight is stamped by a completion callback, which may run a
        # moment after the step ends: only exposed time is bounded by the step.)
        assert 0 < m["exposed_comm_s"] <= m["comm_time_s"] + 1e-9
        assert m["exposed_comm_s"] < m["step_time_s"]
    # Without prefetch every gloo collective blocks: all of it is exposed.
    assert all(m["exposed_comm_s"] == m["comm_time_s"] for m in implicit)


def test_hybrid_shard_on_a_two_by_two_mesh_matches_full_shard(groups, single_process):
    per_rank = groups.get(4).train(job("hybrid_shard"))
    assert [m["loss"] for m in per_rank[0]] == pytest.approx(
        [m["loss"] for m in single_process("hybrid_shard")], abs=1e-5
    )
    ops = per_rank[0][0]["comm_bytes_by_op"]
    assert set(ops) == {"all_gather", "reduce_scatter", "all_reduce"}
    assert per_rank[0][0]["comm_bytes"] == pytest.approx(per_rank[0][0]["comm_bytes_theory"], rel=0.02)
