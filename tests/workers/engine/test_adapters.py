"""LoRA adapters in one process (workers/engine/adapters.py): at step 0 the
model is its base, only the adapters train, the base is held at
`sharding.param_dtype`, and the memory theory the metric reports is the
adapter job's."""

from __future__ import annotations

import pytest
import torch

from workers.engine.distributed import destroy_process_group, init_single_process
from workers.schema import JobSpec
from workers.schema.adapter import adapter_params, job_state_bytes

LLAMA = {"family": "llama", "n_layers": 2, "d_model": 32, "n_heads": 4, "n_kv_heads": 2,
         "seq_len": 16, "vocab_size": 256}


def job(adapter: dict | None = None, **sections) -> JobSpec:
    raw = {"model": LLAMA, "data": {"source": "synthetic"},
           "train": {"steps": 4, "global_batch_size": 8, "lr": 2e-2, "warmup_steps": 0},
           "checkpoint": {"every_steps": 0}, **sections}
    if adapter is not None:
        raw["adapter"] = adapter
    return JobSpec.model_validate(raw)


@pytest.fixture
def one_rank():
    init_single_process(timeout_s=60)
    yield
    destroy_process_group()


def full(tensor: torch.Tensor) -> torch.Tensor:
    return (tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor).detach().clone()


def test_step_zero_is_the_base_and_only_the_adapters_train(one_rank):
    from workers.engine.trainer import Trainer

    base = Trainer(job())
    lora = Trainer(job({"rank": 4, "alpha": 8}))
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (lora.model(tokens) - base.model(tokens)).abs().max().item() <= 1e-6
    names = [n for n, _ in lora.model.named_parameters()]
    trainable = [n for n, p in lora.model.named_parameters() if p.requires_grad]
    assert len(trainable) == 2 * 7 * LLAMA["n_layers"]
    assert all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert sum(p.numel() for p in lora.model.parameters() if p.requires_grad) == \
        adapter_params(lora.spec.model, lora.spec.adapter)
    before = {n: full(p) for n, p in lora.model.named_parameters()}
    history = lora.run()
    assert history[-1]["loss"] < history[0]["loss"]
    changed = {n for n, p in lora.model.named_parameters() if not torch.equal(before[n], full(p))}
    assert changed == set(trainable)  # every adapter moved, no base weight did
    assert all(p.grad is None for n, p in lora.model.named_parameters() if n not in trainable)
    state = lora.optimizer.state
    assert len(state) == len(trainable) and all(p.requires_grad for p in state)
    # the metric's theory: the frozen base at 4 B and the adapters' 16 B per parameter
    assert history[0]["mem_theory_bytes"] == int(job_state_bytes(lora.spec, lora.num_params, 1))
    assert history[0]["mem_theory_bytes"] == 4 * lora.num_params + \
        16 * adapter_params(lora.spec.model, lora.spec.adapter)
    assert len(names) > len(trainable)


def test_a_bf16_base_is_held_in_bf16_beside_fp32_adapters(one_rank):
    from workers.engine.trainer import Trainer

    lora = Trainer(job({"rank": 4}, sharding={"param_dtype": "bfloat16"}))
    dtypes = {p.requires_grad: {p.dtype} for p in lora.model.parameters()}
    frozen = {p.dtype for p in lora.model.parameters() if not p.requires_grad}
    trained = {p.dtype for p in lora.model.parameters() if p.requires_grad}
    assert frozen == {torch.bfloat16} and trained == {torch.float32}, dtypes
    history = lora.run()
    assert history[-1]["loss"] < history[0]["loss"]
    adapters = adapter_params(lora.spec.model, lora.spec.adapter)
    assert history[0]["mem_theory_bytes"] == 2 * lora.num_params + 16 * adapters
