"""Muon and Adafactor (workers/engine/whole_matrix.py): each update computed on
the whole matrix, never on a shard, on real gloo process groups (spawned ranks:
tests/checkpoints/ckpt_harness.py run_ranks).

- the update is torch's own on the whole matrix, bit for bit, at world sizes
  1..3 (uneven shards); torch's optimizer on this rank's rows alone, or handed
  FSDP2's DTensor shard, lands elsewhere;
- each rank's optimizer state after a step of the engine is what the
  descriptor counts (workers/spec/recipes.py).

The engine's runs against one process (every strategy at world sizes 2 and 3,
(dp, tp) = (1, 2), a resume at another world size) are the other optimizers'
tests, through tests/workers/engine_spec.py RECIPES.
"""

from __future__ import annotations

import json

import pytest

from tests.checkpoints.ckpt_harness import run_ranks
from tests.workers.engine import whole_matrix_ranks as ranks
from tests.workers.engine.memory_ranks import state_bytes

OPTIMIZERS = ("muon", "adafactor")


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_the_update_is_torchs_on_the_whole_matrix(tmp_path, optimizer, world_size):
    run_ranks(ranks.one_step, world_size, str(tmp_path), optimizer)
    found = json.loads((tmp_path / f"one-{optimizer}-{world_size}.json").read_text())
    assert found["bitwise"], found  # the same whole matrix, the same update
    if world_size > 1:  # torch's optimizer with a shard: another update
        assert found["max_diff_per_shard"] > 0.01 * found["max_update"], found
        # (torch's Muon runs on DTensors, off by bf16 partial sums; its Adafactor raises)
        assert found["max_diff_torch_on_dtensor"] > 0 or found["torch_on_dtensor_error"], found


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
