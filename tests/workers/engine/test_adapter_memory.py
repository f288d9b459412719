"""The memory theory of an adapter job (workers/schema/adapter.py
`job_state_bytes`, the engine's `mem_theory_bytes` metric and admission's
memory fit), measured on real gloo process groups of 1 and 2 ranks after one
real step of the engine's Trainer on a tiny Llama with LoRA on all seven
linear layers (tests/workers/engine/memory_ranks.py `state_bytes`):

- what a rank holds, counted from the tensors at the moment parameters,
  gradients and AdamW's state all exist (after `optimizer.step()`, before
  `zero_grad`): its local shards of the frozen base at `sharding.param_dtype`,
  of the adapters (fp32), of their gradients and of their optimizer state, is
  within 1.1x of the theory's base at its dtype x P / N + 16 B x adapter
  params / N;
- no frozen parameter requires a gradient, has one, is in the optimizer or
  has optimizer state: gradients and state exist for the adapters only.
"""

from __future__ import annotations

import pytest

from tests.checkpoints.ckpt_harness import run_ranks
from tests.workers.engine.memory_ranks import state_bytes
from tests.workers.engine.test_memory_claims import read
from tests.workers.engine_spec import engine_job
from workers.schema.adapter import LLAMA_TARGETS, adapter_params, job_state_bytes
from workers.schema.base import DTYPE_BYTES

ADAPTER_BYTES_PER_PARAM = 16  # fp32 param + grad + AdamW's exp_avg + exp_avg_sq
LLAMA = {"family": "llama", "n_kv_heads": 2}


def sections(param_dtype: str) -> dict:
    return {"model": LLAMA, "adapter": {"rank": 4, "alpha": 8, "targets": list(LLAMA_TARGETS)},
            "sharding": {"param_dtype": param_dtype}}


@pytest.mark.parametrize("world_size", [1, 2])
@pytest.mark.parametrize("param_dtype", ["float32", "bfloat16"])
def test_an_adapter_steps_state_per_rank_is_the_frozen_base_at_its_dtype_plus_16_bytes_per_adapter_param(
        tmp_path, world_size, param_dtype):
    run_ranks(state_bytes, world_size, str(tmp_path), None, sections(param_dtype))
    job = engine_job(workers=world_size, **sections(param_dtype))
    base, trained = job.model.num_params(), adapter_params(job.model, job.adapter)
    theory = job_state_bytes(job, base, world_size)
    # the theory's two terms, as the docs state them
    assert theory == (DTYPE_BYTES[param_dtype] * base + ADAPTER_BYTES_PER_PARAM * trained) / world_size
    ranks = read(tmp_path, "state", world_size)
    for rank, held in enumerate(ranks):
        why = f"rank {rank} of {world_size}: {held}"
        assert held["num_params"] == base, why  # the base's count, adapters apart
        assert held["metric_theory"] == int(theory), why  # the metric the job reports
        # the frozen base: in no optimizer group, no gradient, no state, at its dtype
        assert held["frozen_count"] > 0 and held["frozen_dtypes"] == [f"torch.{param_dtype}"], why
        assert held["frozen_trainable"] == held["frozen_with_grad"] == 0, why
        assert held["frozen_with_state"] == 0, why
        # the adapters: fp32, every one with its gradient and AdamW's moments
        assert held["dtypes"] == ["torch.float32"] and held["grads_missing"] == 0, why
        assert held["state_keys"] == ["exp_avg", "exp_avg_sq", "step"], why
        assert held["grads"] == held["params"], why  # gradients for the adapters alone
        total = held["frozen"] + held["params"] + held["grads"] + held["state"]
        assert theory / 1.1 <= total <= 1.1 * theory, (total, theory, why)
        # the base's term alone: its bytes at its dtype over N (not fp32's at bf16)
        base_theory = DTYPE_BYTES[param_dtype] * base / world_size
        assert base_theory / 1.1 <= held["frozen"] <= 1.1 * base_theory, why
    # The shards add up to the whole: each element on exactly one rank.
    assert sum(h["frozen"] for h in ranks) == DTYPE_BYTES[param_dtype] * base
    assert sum(h["params"] for h in ranks) == 4 * trained
