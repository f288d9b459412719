"""What a job is, as tenants write it: the job spec, and its translation into
the engine's own config (`workers.config.JobConfig`).

Pydantic at the edge: unknown fields, wrong types, out-of-range sizes and
unknown enum values are refused with the field's path. What only the engine
can judge (a world size that does not divide the batch, heads that do not
divide the width) is checked here too, through the engine's torch-free
config, so a bad job is refused at submit, not at run time.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from workers.config import ConfigError, JobConfig

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
MAX_WORKERS = 1024
MAX_PRIORITY = 1000  # a job's priority, and a tenant's max_priority, lie in 0..MAX_PRIORITY


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)


class WorkerRange(_Strict):
    min: Annotated[int, Field(ge=1, le=MAX_WORKERS)]
    max: Annotated[int, Field(ge=1, le=MAX_WORKERS)]

    @model_validator(mode="after")
    def _ordered(self) -> WorkerRange:
        if self.min > self.max:
            raise ValueError(f"workers.min ({self.min}) must be <= workers.max ({self.max})")
        return self


class Resources(_Strict):
    cpu: Annotated[float, Field(gt=0, le=1024)] = 1.0
    gpu: Annotated[float, Field(ge=0, le=64)] = 0.0


class ModelSpec(_Strict):
    family: Literal["gpt"] = "gpt"
    n_layers: Annotated[int, Field(ge=1, le=512)] = 2
    d_model: Annotated[int, Field(ge=1, le=65536)] = 64
    n_heads: Annotated[int, Field(ge=1, le=1024)] = 4
    seq_len: Annotated[int, Field(ge=2, le=65536)] = 64
    vocab_size: Annotated[int, Field(ge=2, le=1_048_576)] = 256


class DataSpec(_Strict):
    source: Literal["builtin", "synthetic", "uri"] = "builtin"
    uri: Annotated[str, Field(min_length=1, max_length=2048)] | None = None

    @field_validator("uri")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        if value is not None and not value.isprintable():
            raise ValueError("data.uri must not contain control characters")
        return value

    @model_validator(mode="after")
    def _uri_with_source(self) -> DataSpec:
        if self.source == "uri" and not self.uri:
            raise ValueError("data.uri is required when data.source is 'uri'")
        if self.source != "uri" and self.uri:
            raise ValueError(f"data.uri is only used with data.source 'uri', not {self.source!r}")
        return self


class TrainSpec(_Strict):
    steps: Annotated[int, Field(ge=1, le=10_000_000)]
    global_batch_size: Annotated[int, Field(ge=1, le=1_048_576)] = 8
    micro_batch_size: Annotated[int, Field(ge=1, le=1_048_576)] | None = None
    lr: Annotated[float, Field(gt=0, le=10)] = 1e-3
    warmup_steps: Annotated[int, Field(ge=0, le=10_000_000)] = 10
    weight_decay: Annotated[float, Field(ge=0, le=10)] = 0.1
    grad_clip: Annotated[float, Field(ge=0, le=1e6)] = 1.0
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 0


class ShardingSpec(_Strict):
    strategy: Literal["full_shard", "shard_grad_op", "hybrid_shard", "no_shard"] = "full_shard"
    param_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    reduce_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    cpu_offload: bool = False
    activation_checkpointing: bool = False
    blocks_per_unit: Annotated[int, Field(ge=1, le=512)] = 1
    grad_compression: Literal["none", "bf16", "int8"] = "none"
    prefetch_forward: Annotated[int, Field(ge=0, le=64)] = 0
    prefetch_backward: Annotated[int, Field(ge=0, le=64)] = 0


class CheckpointSpec(_Strict):
    every_steps: Annotated[int, Field(ge=0, le=10_000_000)] = 10
    keep_last: Annotated[int, Field(ge=1, le=100)] = 3
    async_: bool = Field(False, alias="async")


class JobSpec(_Strict):
    name: Annotated[str, Field(pattern=NAME_PATTERN)] = "job"
    workers: Annotated[int, Field(ge=1, le=MAX_WORKERS)] | WorkerRange = 1
    resources_per_worker: Resources = Field(default_factory=Resources)
    priority: Annotated[int, Field(ge=0, le=MAX_PRIORITY)] = 0
    model: ModelSpec
    data: DataSpec = Field(default_factory=DataSpec)
    train: TrainSpec
    sharding: ShardingSpec = Field(default_factory=ShardingSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    max_restarts: Annotated[int, Field(ge=0, le=100)] = 3
    # how the ranks spread over Ray's nodes: PACK (fewest nodes) or SPREAD (one a node where it can)
    placement: Literal["PACK", "SPREAD"] = "PACK"
    # once asked to give its workers back (preempted), how long the job may take to
    # checkpoint and stop before its ranks are killed; default: the service's setting
    preemption_grace_s: Annotated[float, Field(gt=0, le=3600)] | None = None

    @field_validator("workers", mode="before")
    @classmethod
    def _no_bool_workers(cls, value):
        if isinstance(value, bool):
            raise ValueError("workers must be an integer or {min, max}, not a boolean")
        return value

    @property
    def min_workers(self) -> int:
        return self.workers if isinstance(self.workers, int) else self.workers.min

    @property
    def max_workers(self) -> int:
        return self.workers if isinstance(self.workers, int) else self.workers.max

    def world_sizes(self) -> list[int]:
        """The world sizes this job may run at, largest first: within min..max
        and accepted by the engine (e.g. dividing the global batch)."""
        engine = JobConfig.from_dict(self.engine_config())
        return [n for n in range(self.max_workers, self.min_workers - 1, -1) if _runs(engine, n)]

    def engine_config(self) -> dict:
        """The engine's JobConfig, as a dict (what the rank actors receive)."""
        t, s, c = self.train, self.sharding, self.checkpoint
        return {
            "model": {"kind": self.model.family, **self.model.model_dump(exclude={"family"})},
            "data": {
                "source": "file" if self.data.source == "uri" else self.data.source,
                "uri": self.data.uri,
                "seed": t.seed,
            },
            "sharding": s.model_dump(),
            "optim": {"lr": t.lr, "warmup_steps": t.warmup_steps,
                      "weight_decay": t.weight_decay, "grad_clip": t.grad_clip},
            "train": {"steps": t.steps, "global_batch": t.global_batch_size,
                      "micro_batch": t.micro_batch_size, "seed": t.seed},
            "checkpoint": {"interval_steps": c.every_steps, "keep_last": c.keep_last,
                           "async_save": c.async_},
        }

    def check_runnable(self) -> None:
        """Raise ConfigError, with the engine's reason, unless some world size
        in min..max can run this job."""
        if not self.world_sizes():
            try:
                JobConfig.from_dict(self.engine_config()).validate(self.min_workers)
            except ConfigError as e:
                raise ConfigError(_spec_names(str(e))) from None


# The engine's field names, as the job spec spells them.
_SPEC_NAMES = {
    r"\btrain\.global_batch\b": "train.global_batch_size",
    r"\btrain\.micro_batch\b": "train.micro_batch_size",
    r"\bmodel\.kind\b": "model.family",
    r"\bcheckpoint\.interval_steps\b": "checkpoint.every_steps",
    r"\boptim\.": "train.",
}


def _spec_names(message: str) -> str:
    for engine, spec in _SPEC_NAMES.items():
        message = re.sub(engine, spec, message)
    return message


def _runs(engine: JobConfig, world_size: int) -> bool:
    try:
        engine.validate(world_size)
    except ConfigError:
        return False
    return True
