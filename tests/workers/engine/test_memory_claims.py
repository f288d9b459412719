"""The memory claims of docs/job-spec.md (Models), measured on real gloo process groups of 1..4 ranks
(spawned processes: tests/checkpoints/ckpt_harness.py run_ranks):

- "16 B/param / N of sharded state (fp32 AdamW)": after one real step of the
  engine's Trainer, at the moment parameters, gradients and both Adam moments
  all exist (after `optimizer.step()`, before the step's `zero_grad` frees the
  gradients), the bytes of this rank's LOCAL shards of each (DTensor
  `to_local()`) are within 1.1x of `mem_theory_bytes` = 16 x P / N. Gradients
  are counted: the trainer holds them, sharded, from the backward's
  reduce-scatter to the end of the step (between steps it holds none).
  AdamW's per-parameter `step` counters are counted too (a few bytes). Every
  other optimizer's state is what its descriptor counts (Adam 8 B/param / N,
  SGD's momentum 4, none without), within the same bound.
- "no rank holds the whole model" (the sharded build, workers/engine/build.py):
  every tensor the build allocates is recorded (a TorchDispatchMode): none is
  larger than the largest parameter, at most one of the largest parameter's
  full size is alive at a time, and what is alive at once never exceeds this
  rank's shards plus that one parameter (and small index tensors: 1% of the
  model allowed) (the seeded init generates each
  parameter whole, one at a time, and keeps its piece: docs/job-spec.md, Models), which
  at N >= 2 is less than the whole model.
"""

from __future__ import annotations

import json

import pytest

from tests.checkpoints.ckpt_harness import run_ranks
from tests.workers.engine.memory_ranks import build_allocations, state_bytes
from tests.workers.engine_spec import RECIPES

ADAM_BYTES_PER_PARAM = 16  # fp32 param + grad + exp_avg + exp_avg_sq
PARAM_GRAD_BYTES_PER_PARAM = 8
# Every optimizer of the engine tests, and SGD without momentum (no state at all).
OPTIMIZERS = {name: train for name, train in RECIPES.items() if name != "adamw"} | {
    "sgd-no-momentum": {"optimizer": "sgd"}}


def read(directory, prefix: str, world_size: int) -> list[dict]:
    return [json.loads((directory / f"{prefix}-{r}.json").read_text()) for r in range(world_size)]


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_each_rank_holds_16_bytes_per_param_over_n_of_params_grads_and_adam_state(
        tmp_path, world_size):
    run_ranks(state_bytes, world_size, str(tmp_path))
    ranks = read(tmp_path, "state", world_size)
    for rank, held in enumerate(ranks):
        assert held["all_dtensors"] and held["dtypes"] == ["torch.float32"], held
        assert held["grads_missing"] == 0, held  # every parameter's gradient is held at this point
        assert held["state_keys"] == ["exp_avg", "exp_avg_sq", "step"], held
        assert held["theory"] == ADAM_BYTES_PER_PARAM * held["num_params"] // world_size
        assert held["metric_theory"] == held["theory"]  # the metric the job reports
        total = held["params"] + held["grads"] + held["state"]
        # each of the four fp32 copies is a quarter of the theory, within the same bound
        for part in ("params", "grads"):
            assert held[part] <= 1.1 * held["theory"] / 4, (rank, part, held)
        assert held["theory"] / 1.1 <= total <= 1.1 * held["theory"], (rank, total, held)
        assert held["param_storage"] <= 1.1 * held["theory"] / 4, held  # FSDP's padding too
        if world_size >= 2:  # no rank holds the whole model
            assert held["params"] < held["full_param_bytes"]
    # The shards add up to the whole: each element on exactly one rank.
    assert sum(h["params"] for h in ranks) == ranks[0]["full_param_bytes"]
    assert sum(h["grads"] for h in ranks) == ranks[0]["full_param_bytes"]


@pytest.mark.parametrize("recipe", OPTIMIZERS)
def test_each_optimizers_state_per_rank_is_what_its_descriptor_counts(tmp_path, recipe):
    """`mem_theory_bytes` = 8 B/param / N of params and grads + the optimizer's
    own count (workers/schema/recipes.py), held against what 3 ranks hold after a step."""
    world_size = 3
    run_ranks(state_bytes, world_size, str(tmp_path), OPTIMIZERS[recipe])
    for rank, held in enumerate(read(tmp_path, "state", world_size)):
        assert held["metric_theory"] == held["theory"], held  # the metric the job reports
        state_theory = held["theory"] - PARAM_GRAD_BYTES_PER_PARAM * held["num_params"] / world_size
        # the state's tensors (a few bytes of step counters besides)
        assert state_theory / 1.1 - 64 <= held["state"] <= 1.1 * state_theory + 64, (rank, held)
        total = held["params"] + held["grads"] + held["state"]
        assert held["theory"] / 1.1 <= total <= 1.1 * held["theory"], (rank, total, held)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_the_sharded_build_never_holds_the_whole_model_on_a_rank(tmp_path, world_size):
    run_ranks(build_allocations, world_size, str(tmp_path))
    for rank, seen in enumerate(read(tmp_path, "build", world_size)):
        why = f"rank {rank} of {world_size}: {json.dumps(seen)}"
        assert seen["sizes"], why  # the mode saw the build allocate
        # nothing bigger than one parameter: no flat buffer of a unit, no whole model
        assert max(seen["sizes"]) <= seen["largest_param"], why
        # the largest parameter whole at most once at a time (generated, cut, freed)
        assert seen["largest_alive_at_once"] <= 1, why
        # alive at once: this rank's shards and one parameter's full value, never more
        # (besides an int64 index of a shard's rows: a few hundred bytes here)
        slack = seen["model_bytes"] // 100
        assert seen["peak"] <= seen["shard_bytes"] + seen["largest_param_bytes"] + slack, why
        assert seen["peak"] < seen["model_bytes"], why
        assert seen["shard_bytes"] <= 1.1 * seen["model_bytes"] / world_size, why
