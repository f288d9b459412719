"""FSDP x tensor parallelism in Ray rank actors: a tiny Llama at (dp 1, tp 2)
and (dp 2, tp 2) follows the one-process loss curve, its collectives move
what the formulas say, and a checkpoint saved at (dp 2, tp 2) resumes at
(dp 4, tp 1) and (dp 1, tp 2) with the same state and on the same curve;
HSDP combines, and activation checkpointing recomputes what its formula says.

One group of 4, then one of 2 (the cluster has 4 CPUs); each trains a few
runs of a model with ~70k parameters."""

from __future__ import annotations

import pytest

from workers.cluster.group import WorkerGroup
from workers.engine.local import run_single_process
from workers.schema import JobSpec
from workers.engine.tensor_parallel import tp_comm_theory_bytes

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]

SECRET = "tensor-parallel-test-secret-0123456789"
STEPS, SAVED_AT = 20, 10
MODEL = {"family": "llama", "n_layers": 2, "d_model": 32, "n_heads": 4, "n_kv_heads": 2,
         "seq_len": 16, "vocab_size": 256}


def job(tp: int) -> dict:
    # Checkpoints only where a run stops: short, at step 10 (what the later runs
    # load), and at the end (a resumed run's step 20: `four` keeps a copy of the
    # store as it was at step 10 for `two`).
    return {"workers": {"min": 1, "max": 4}, "model": MODEL, "data": {"source": "synthetic"},
            "train": {"steps": STEPS, "global_batch_size": 8, "lr": 3e-3},
            "parallelism": {"tp": tp}, "checkpoint": {"every_steps": 0}}


def losses(metrics: list[dict]) -> list[float]:
    return [m["loss"] for m in metrics]


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("tp-store")
    return {"root": f"file://{root}", "tenant": "acme", "job": "tp", "secret": SECRET,
            "storage_options": {}}


@pytest.fixture(scope="module")
def reference() -> list[float]:
    return losses(run_single_process(JobSpec.model_validate(job(1))))


@pytest.fixture(scope="module")
def four(target, fork_pool, tmp_path_factory) -> dict:
    """World size 4: (dp 2, tp 2) straight, and HSDP x TP on a (replicate 2,
    shard 1, tp 2) mesh for 5 steps; saved at step 10 (the store copied as it
    is then: `at_saved`); then (dp 4, tp 1) loads it (state digests) and resumes."""
    import shutil

    out = {}
    with WorkerGroup(4, tp_size=2, pool=fork_pool) as group:
        out["straight"] = group.train(job(2))
        hybrid = {"sharding": {"strategy": "hybrid_shard", "shard_group_size": 1}}
        out["hybrid"] = group.train(job(2) | hybrid, stop_after=5)
        first = group.train(job(2), checkpoint=target, stop_after=SAVED_AT)[0]
        assert first[-1]["checkpoint_step"] == SAVED_AT
        copy = tmp_path_factory.mktemp("tp-store-at-saved")
        shutil.copytree(target["root"].removeprefix("file://"), copy, dirs_exist_ok=True)
        out["at_saved"] = {**target, "root": f"file://{copy}"}
        out["saved"] = group.call("state_digests")[0]
        assert group.train(job(1), checkpoint=target, stop_after=SAVED_AT) == [[]] * 4
        out["loaded"] = group.call("state_digests")[0]
        out["resumed"] = group.train(job(1), checkpoint=target)[0]
    return out


@pytest.fixture(scope="module")
def two(four, fork_pool) -> dict:
    """World size 2: (dp 1, tp 2) straight, and with activation checkpointing;
    then it loads and resumes four's checkpoint."""
    out = {}
    with WorkerGroup(2, tp_size=2, pool=fork_pool) as group:
        out["straight"] = group.train(job(2))
        out["recomputed"] = group.train(job(2) | {"sharding": {"activation_checkpointing": True}})
        at_saved = four["at_saved"]
        assert group.train(job(2), checkpoint=at_saved, stop_after=SAVED_AT) == [[]] * 2
        out["loaded"] = group.call("state_digests")[0]
        out["resumed"] = group.train(job(2), checkpoint=at_saved)[0]
    return out


@pytest.mark.parametrize("world", ["four", "two"])
def test_tp_2_follows_the_one_process_curve(request, reference, world):
    per_rank = request.getfixturevalue(world)["straight"]
    for metrics in per_rank:  # every rank reports the global loss
        assert losses(metrics) == pytest.approx(reference, abs=1e-4)


@pytest.mark.parametrize("world, dp", [("four", 2), ("two", 1)])
def test_the_collectives_move_what_the_formulas_say(request, world, dp):
    spec = JobSpec.model_validate(job(2)).model
    per_rank = request.getfixturevalue(world)["straight"]
    tokens = 8 // dp * spec.seq_len  # each dp rank's share of the batch
    tp_theory = tp_comm_theory_bytes(spec, 2, tokens=tokens, act_bytes=4)
    for metrics in per_rank:
        for m in metrics:
            ops = m["comm_bytes_by_op"]
            tp_bytes = sum(v for op, v in ops.items() if op.startswith("tp_"))
            assert {"tp_all_gather", "tp_reduce_scatter", "tp_all_reduce"} <= set(ops)
            assert tp_bytes == pytest.approx(tp_theory, rel=0.02)
            assert m["comm_bytes"] == pytest.approx(m["comm_bytes_theory"], rel=0.02)
            assert ("all_gather" in ops) == (dp > 1)  # FSDP gathers only across dp ranks


def test_hsdp_combines_with_tp(four, reference):
    for metrics in four["hybrid"]:
        assert losses(metrics) == pytest.approx(reference[:5], abs=1e-4)
        for m in metrics:
            assert "all_reduce" in m["comm_bytes_by_op"]  # across the replicas
            assert m["comm_bytes"] == pytest.approx(m["comm_bytes_theory"], rel=0.02)


def test_activation_checkpointing_recomputes_what_the_formula_says(two, reference):
    spec = JobSpec.model_validate(job(2)).model
    theory = tp_comm_theory_bytes(spec, 2, tokens=8 * spec.seq_len, act_bytes=4,
                                  activation_checkpointing=True)
    for metrics in two["recomputed"]:
        assert losses(metrics) == pytest.approx(reference, abs=1e-4)
        for m in metrics:
            tp_bytes = sum(v for op, v in m["comm_bytes_by_op"].items() if op.startswith("tp_"))
            assert tp_bytes == pytest.approx(theory, rel=0.02)


def test_a_dp2_tp2_checkpoint_loads_at_dp4_tp1_and_dp1_tp2_bitwise(four, two):
    # Model and optimizer state (Adam's moments too), every full tensor.
    assert any(key.startswith("optim.") for key in four["saved"])
    assert four["loaded"] == four["saved"]
    assert two["loaded"] == four["saved"]


@pytest.mark.parametrize("world", ["four", "two"])
def test_a_resume_at_another_layout_follows_the_same_curve(request, four, world):
    resumed = request.getfixturevalue(world)["resumed"]
    assert [m["step"] for m in resumed] == list(range(SAVED_AT + 1, STEPS + 1))
    straight = losses(four["straight"][0])[SAVED_AT:]
    assert losses(resumed) == pytest.approx(straight, abs=1e-4)
