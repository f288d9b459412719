"""Muon and Adafactor (workers/engine/whole_matrix.py): each update computed on
the whole matrix, never on a shard, on real gloo process groups (spawned ranks:
tests/checkpoints/ckpt_harness.py run_ranks).

- the update is torch's own on the whole matrix, bit for bit, at world sizes
  1..3 (uneven shards), and differs from torch's on this rank's shard alone;
- the engine's runs at world sizes 2 and 3 equal one process within 1e-5 for
  every sharding strategy, and at (dp, tp) = (1, 2);
- a run checkpointed at world size 2 resumes at 3 on the one-process curve;
- each rank's optimizer state is what the descriptor counts
  (workers/spec/recipes.py).

A few steps of the tiny models; one spawned group per world size trains every case.
"""

from __future__ import annotations

import json
from typing import get_args

import pytest

from tests.checkpoints.ckpt_harness import run_ranks
from tests.workers.engine import whole_matrix_ranks as ranks
from tests.workers.engine.memory_ranks import state_bytes
from workers.spec import Strategy

OPTIMIZERS = ("muon", "adafactor")
STRATEGIES = get_args(Strategy)


def key(**case) -> str:
    return json.dumps(case, sort_keys=True)


@pytest.fixture(scope="module")
def curves(tmp_path_factory) -> dict[int, dict[str, list[float]]]:
    out = tmp_path_factory.mktemp("curves")
    one = [{"optimizer": o} for o in OPTIMIZERS] + [{"optimizer": o, "llama": True}
                                                    for o in OPTIMIZERS]
    sharded = [{"optimizer": o, "strategy": s} for o in OPTIMIZERS for s in STRATEGIES]
    tp = [{"optimizer": o, "llama": True, "tp": 2} for o in OPTIMIZERS]
    run_ranks(ranks.curves, 1, str(out), one)
    run_ranks(ranks.curves, 2, str(out), sharded + tp)
    run_ranks(ranks.curves, 3, str(out), sharded)
    return {ws: json.loads((out / f"curves-{ws}.json").read_text()) for ws in (1, 2, 3)}


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_the_update_is_torchs_on_the_whole_matrix(tmp_path, optimizer, world_size):
    run_ranks(ranks.one_step, world_size, str(tmp_path), optimizer)
    found = json.loads((tmp_path / f"one-{optimizer}-{world_size}.json").read_text())
    assert found["bitwise"], found  # the same whole matrix, the same update
    if world_size > 1:  # what torch's optimizer does with a shard alone is another update
        assert found["max_diff_per_shard"] > 1e-3, found


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_sharded_runs_equal_one_process(curves, optimizer, world_size, strategy):
    reference = curves[1][key(optimizer=optimizer)]
    got = curves[world_size][key(optimizer=optimizer, strategy=strategy)]
    assert got == pytest.approx(reference, abs=1e-5)
    assert got[-1] != reference[0]  # it trained


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_tensor_parallel_equals_one_process(curves, optimizer):
    reference = curves[1][key(optimizer=optimizer, llama=True)]
    got = curves[2][key(optimizer=optimizer, llama=True, tp=2)]
    assert got == pytest.approx(reference, abs=1e-5)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_a_resume_at_another_world_size_continues_the_curve(tmp_path, optimizer):
    root = f"file://{tmp_path}/store"
    run_ranks(ranks.resume, 1, str(tmp_path), None, optimizer, None, 6)
    run_ranks(ranks.resume, 2, str(tmp_path), root, optimizer, 3, 6)
    run_ranks(ranks.resume, 3, str(tmp_path), root, optimizer, None, 6)
    whole, first, resumed = (json.loads((tmp_path / f"resume-{optimizer}-{ws}.json").read_text())
                             for ws in (1, 2, 3))
    assert resumed["resumed_from"] == 3
    assert first["losses"] == pytest.approx(whole["losses"][:3], abs=1e-5)
    assert resumed["losses"] == pytest.approx(whole["losses"][3:], abs=1e-5)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("world_size", [1, 3])
def test_the_state_per_rank_is_the_descriptors(tmp_path, optimizer, world_size):
    from tests.workers.engine_spec import engine_job

    run_ranks(state_bytes, world_size, str(tmp_path), {"optimizer": optimizer})
    job = engine_job(steps=2, workers=world_size, train={"optimizer": optimizer})
    params = job.model.num_params()
    theory = job.train.optimizer_kind.state_bytes(job.model, job.train, params, world_size)
    held = [json.loads((tmp_path / f"state-{r}.json").read_text()) for r in range(world_size)]
    shapes = job.model.family_spec.shapes(job.model)
    adamw_tensors = len(shapes.all()) - shapes.n_blocks * sum(len(s) == 2 for s in shapes.block)
    for h in held:
        assert h["metric_theory"] == h["theory"] == int(8 * params / world_size + theory)
        if optimizer == "adafactor":  # whole on every rank: exactly the count
            assert h["state_keys"] == ["col_var", "row_var", "step", "variance"], h
            assert h["state"] == theory, h
        else:
            assert h["state_keys"] == ["exp_avg", "exp_avg_sq", "momentum_buffer", "step"], h
    if optimizer == "muon":  # sharded: the ranks' pieces add up to the count, and
        # every rank holds AdamW's step counts (4 B a tensor), which it leaves out
        assert sum(h["state"] for h in held) == world_size * (theory + 4 * adamw_tensors)
