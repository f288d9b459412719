"""Muon and Adafactor (workers/engine/whole_matrix.py): each update computed on
the whole matrix, never on a shard, on real gloo process groups (spawned ranks:
tests/checkpoints/ckpt_harness.py run_ranks).

- the update is torch's own on the whole matrix, bit for bit, at world sizes
  1..3 (uneven shards); torch's optimizer on this rank's rows alone, or handed
  FSDP2's DTensor shard, lands elsewhere;
- each rank's optimizer state after a step of the engine is what the
  descriptor counts (workers/schema/recipes.py).

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


def test_a_loaded_muon_steps_its_adamw_part_from_the_loaded_state():
    # One optimizer object over two of torch's: a load (what DCP's set_state_dict
    # ends in) replaces its state and groups, and AdamW's part must step from them.
    import torch
    from torch import nn

    from workers.engine.whole_matrix import build_muon
    from workers.schema import TrainSpec

    def model() -> nn.Module:
        torch.manual_seed(0)
        m = ranks.OneMatrix()
        m.gain = nn.Parameter(torch.randn(ranks.COLUMNS))  # not a block's matrix: AdamW's
        return m

    def step(m: nn.Module, opt: torch.optim.Optimizer, seed: int) -> None:
        torch.manual_seed(seed)
        for p in m.parameters():
            p.grad = torch.randn_like(p)
        opt.step()

    train = TrainSpec(steps=1, optimizer="muon", lr=0.02)
    straight, resumed = model(), model()
    a, b = build_muon(straight, train), build_muon(resumed, train)
    step(straight, a, 1)
    step(resumed, b, 1)
    b.load_state_dict(b.state_dict())
    for group in a.param_groups + b.param_groups:  # as the trainer's schedule sets each step's
        group["lr"] = 0.01
    step(straight, a, 2)
    step(resumed, b, 2)
    assert torch.equal(resumed.gain, straight.gain)
    assert int(b.state[resumed.gain]["step"]) == 2  # AdamW's count went on from the loaded one
    assert torch.equal(resumed.blocks[0].weight, straight.blocks[0].weight)
