"""The `adapter` section: low-rank adapters (LoRA) trained on a frozen base.

    adapter: {kind: lora, rank: 8, alpha: 16, dropout: 0.0,
              targets: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]}

Each targeted linear layer of every block gets `lora_A` (rank x in) and
`lora_B` (out x rank, zero at the start), and computes
`base(x) + lora_B(lora_A(dropout(x))) * alpha / rank`; every other weight is
frozen, held at `sharding.param_dtype`. A family says which modules it has
(`Family.adapter_targets`, workers/schema/families.py): a target it lacks is
refused naming it. Torch-free: the engine's side is workers/engine/adapters.py.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from workers.schema.base import DTYPE_BYTES, _Section

# Hugging Face Llama's linear layers, PEFT's names for them.
LLAMA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
TRAINABLE_BYTES = 4 + 4  # an adapter parameter and its gradient, fp32


class AdapterSpec(_Section):
    kind: Literal["lora"] = "lora"
    rank: Annotated[int, Field(ge=1, le=4096)] = 8
    alpha: Annotated[float, Field(gt=0, le=1e6)] = 16.0
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0
    # module names inside each block (PEFT's target_modules); unset: all of the family's
    targets: Annotated[tuple[str, ...], Field(min_length=1, max_length=64, strict=False,
                                              json_schema_extra={"uniqueItems": True})] = LLAMA_TARGETS

    @field_validator("targets")
    @classmethod
    def _distinct(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError("adapter.targets must not repeat a module")
        return value

    @property
    def scaling(self) -> float:
        """What the adapter's output is multiplied by (PEFT's lora_alpha / r)."""
        return self.alpha / self.rank


def target_features(model: Any, adapter: AdapterSpec) -> dict[str, tuple[int, int]]:
    """(in, out) features of each targeted module of one block (the spec has
    checked that the family has every target)."""
    modules = model.family_spec.adapter_targets(model)
    return {name: modules[name] for name in adapter.targets}


def adapter_params(model: Any, adapter: AdapterSpec, tp: int = 1) -> int:
    """Adapter parameters one tensor-parallel rank holds: A (rank x in) and B
    (out x rank) of every target in every block. Under tp, a column-parallel
    target's B and a row-parallel one's A are split (`row_parallel`), the
    other factor is whole on every rank of the group."""
    rows = set(model.family_spec.row_parallel)
    total = 0
    for name, (fan_in, fan_out) in target_features(model, adapter).items():
        if name in rows:
            total += adapter.rank * (fan_in // tp + fan_out)
        else:
            total += adapter.rank * (fan_in + fan_out // tp)
    return total * model.n_layers


def adapter_state_bytes(model: Any, train: Any, adapter: AdapterSpec, param_dtype_bytes: int,
                        params: int, shard_degree: int, tp: int = 1) -> float:
    """One rank's model state with adapters: the frozen base at its own dtype
    (`param_dtype_bytes`) and the adapters' fp32 params, grads and optimizer
    state (AdamW: 16 B/param), all sharded `shard_degree` ways. `params` is
    one TP rank's piece of the base."""
    from workers.schema.recipes import optimizer_kind

    trainable = adapter_params(model, adapter, tp)
    state = optimizer_kind(train.optimizer).state_bytes(model, train, trainable, shard_degree)
    return (param_dtype_bytes * params + TRAINABLE_BYTES * trainable) / shard_degree + state


def job_state_bytes(job: Any, params: int, shard_degree: int, tp: int = 1) -> float:
    """One rank's model state, the memory theory's (the engine's
    `mem_theory_bytes` metric, admission's memory fit): a full job's
    (`recipes.model_state_bytes`: AdamW 16 B/param / N), or, with an adapter,
    the frozen base at `sharding.param_dtype` plus the adapters' 16 B/param
    (`adapter_state_bytes`). `params`: one tensor-parallel rank's piece."""
    from workers.schema.recipes import model_state_bytes

    if job.adapter is None:
        return model_state_bytes(job.model, job.train, params, shard_degree)
    return adapter_state_bytes(job.model, job.train, job.adapter,
                               DTYPE_BYTES[job.sharding.param_dtype], params, shard_degree, tp)
