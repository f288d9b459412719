"""How a job trains: optimisation (`train`), sharding, tensor parallelism,
checkpoints, tracking, and where its initial weights come from (`init`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from workers.schema.base import (
    MAX_WORKERS,
    NAME_PATTERN,
    OPERATOR_ONLY,
    Compression,
    Dtype,
    Strategy,
    _Section,
    _smallest_prime_factor,
    refusal,
    registered,
    split_evenly,
)
from workers.schema.recipes import (
    OPTIMIZER_KNOBS,
    SCHEDULE_KNOBS,
    OptimizerKind,
    RecipeNotFound,
    ScheduleKind,
    optimizer_kind,
    registered_optimizers,
    registered_schedules,
    schedule_kind,
)

# TrainSpec's fields that came with the registered recipes: at their defaults a
# job's config hash leaves them out (workers/schema/job.py), as it was before them.
RECIPE_FIELDS = ("optimizer", "schedule", "decay_fraction", "decay_shape", "momentum",
                 "nesterov", "beta2_decay", "ns_steps", "adjust_lr_fn")


class TrainSpec(_Section):
    steps: Annotated[int, Field(ge=1, le=10_000_000)]
    # samples per optimizer step, whatever the world size; the ranks split it as
    # evenly as it goes (8 over 3: 3, 3, 2), each in micro-batches of at most
    # micro_batch_size (gradient accumulation; unset: one micro-batch)
    global_batch_size: Annotated[int, Field(ge=1, le=1_048_576)] = 8
    micro_batch_size: Annotated[int, Field(ge=1, le=1_048_576)] | None = None
    lr: Annotated[float, Field(gt=0, le=10)] = 1e-3
    # the recipe (workers/schema/recipes.py): a registered optimizer and lr schedule
    # (the `brigade.optimizers` and `brigade.schedules` entry points); the knobs
    # below that one does not read stay at their defaults
    optimizer: Annotated[str, Field(min_length=1, max_length=64,
                                    json_schema_extra=registered(registered_optimizers))] = "adamw"
    schedule: Annotated[str, Field(min_length=1, max_length=64,
                                   json_schema_extra=registered(registered_schedules))] = "cosine"
    warmup_steps: Annotated[int, Field(ge=0, le=10_000_000)] = 10
    # cosine, linear, wsd: the decay ends at lr x this
    min_lr_ratio: Annotated[float, Field(ge=0, le=1)] = 0.1
    # wsd: the decay takes the last decay_fraction of the steps, in this shape
    decay_fraction: Annotated[float, Field(gt=0, le=1)] = 0.2
    decay_shape: Literal["linear", "cosine"] = "linear"
    # sgd, muon: momentum and Nesterov's (unset: the optimizer's own default,
    # sgd 0 and False, muon 0.95 and True)
    momentum: Annotated[float, Field(ge=0, lt=1)] | None = None
    nesterov: bool | None = None
    beta2_decay: Annotated[float, Field(ge=-1, le=0)] = -0.8  # adafactor: beta2_t = 1 - t^this
    ns_steps: Annotated[int, Field(ge=1, le=100)] = 5  # muon: Newton-Schulz iterations
    # muon: its update's scale; match_rms_adamw lets train.lr carry over from adamw
    adjust_lr_fn: Literal["original", "match_rms_adamw"] = "match_rms_adamw"
    weight_decay: Annotated[float, Field(ge=0, le=10)] = 0.1
    beta1: Annotated[float, Field(ge=0, lt=1)] = 0.9
    beta2: Annotated[float, Field(ge=0, lt=1)] = 0.95
    eps: Annotated[float, Field(gt=0, le=1)] = 1e-8
    grad_clip: Annotated[float, Field(ge=0, le=1e6)] = 1.0  # 0: no clipping
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 0  # initial weights and data order
    # torch.compile each block (inductor, CPU and GPU) before FSDP wraps it;
    # compiled at start-up, the "compile" phase (workers/engine/compilation.py)
    compile: bool = False

    def rank_batches(self, world_size: int) -> list[int]:
        """Each rank's samples of a global batch, rank 0 first (`split_evenly`)."""
        return split_evenly(self.global_batch_size, world_size)

    def per_rank_batch(self, world_size: int) -> int:
        """The largest rank's share (ceil(global_batch_size / world_size))."""
        return -(-self.global_batch_size // world_size)

    def accumulation_steps(self, world_size: int) -> int:
        """Micro-batches per optimizer step, the same on every rank (each runs
        as many forwards and backwards, so their collectives pair up): enough
        that the largest share's micro-batches hold at most micro_batch_size."""
        per_rank = self.per_rank_batch(world_size)
        return -(-per_rank // (self.micro_batch_size or per_rank))

    @field_validator("optimizer", "schedule")
    @classmethod
    def _registered(cls, value: str, info: ValidationInfo) -> str:
        try:
            (optimizer_kind if info.field_name == "optimizer" else schedule_kind)(value)
        except RecipeNotFound as e:
            raise PydanticCustomError("recipe", "{reason}", {"reason": str(e)}) from None
        return value

    @model_validator(mode="after")
    def _knobs_read(self) -> TrainSpec:
        """A knob the chosen optimizer or schedule does not read is refused
        where a spec sets it to other than its default."""
        for knobs, kind, what in ((OPTIMIZER_KNOBS, self.optimizer_kind, "optimizer"),
                                  (SCHEDULE_KNOBS, self.schedule_kind, "schedule")):
            if name := self.set_unread(knobs, kind.reads):
                raise refusal(name, f"train.{name} is not read by the {kind.name!r} "
                              f"{what} (it reads {', '.join(kind.reads) or 'no knob'})",
                              getattr(self, name))
        problem = self.optimizer_kind.check(self)
        if problem is not None:
            raise refusal(problem[0], problem[1], getattr(self, problem[0], None))
        return self

    @property
    def optimizer_kind(self) -> OptimizerKind:
        """The registered optimizer (its builder, knobs and state bytes)."""
        return optimizer_kind(self.optimizer)

    @property
    def schedule_kind(self) -> ScheduleKind:
        """The registered lr schedule (its function and knobs)."""
        return schedule_kind(self.schedule)


class ShardingSpec(_Section):
    strategy: Strategy = "full_shard"
    param_dtype: Dtype = "float32"
    reduce_dtype: Dtype = "float32"
    cpu_offload: bool = False
    activation_checkpointing: bool = False
    blocks_per_unit: Annotated[int, Field(ge=1, le=512)] = 1  # the wrap unit, in blocks
    # hybrid_shard only: ranks per shard group (the replicate degree is world / this);
    # unset: world / its smallest prime factor
    shard_group_size: Annotated[int, Field(ge=1, le=MAX_WORKERS)] | None = None
    # the gradient reduce-scatter's wire format (workers/engine/compression.py)
    grad_compression: Compression = "none"
    # int8 only; off only to measure what the error feedback buys
    grad_error_feedback: bool = Field(True, json_schema_extra=OPERATOR_ONLY)
    # explicit all-gather prefetch depth in units; 0: FSDP's implicit one-ahead
    prefetch_forward: Annotated[int, Field(ge=0, le=64)] = 0
    prefetch_backward: Annotated[int, Field(ge=0, le=64)] = 0

    @model_validator(mode="after")
    def _consistent(self) -> ShardingSpec:
        if self.shard_group_size is not None and self.strategy != "hybrid_shard":
            raise refusal("shard_group_size", "sharding.shard_group_size is only used with "
                                              "'hybrid_shard'", self.shard_group_size)
        if self.grad_compression != "none" and self.strategy == "no_shard":
            raise refusal("grad_compression", "sharding.grad_compression compresses the "
                          "gradient reduce-scatter; 'no_shard' has none (it all-reduces)",
                          self.grad_compression)
        return self

    def mesh_shape(self, world_size: int) -> tuple[int, ...]:
        """(replicate, shard) for hybrid_shard and no_shard, (shard,) otherwise."""
        if self.strategy == "no_shard":
            return (world_size, 1)
        if self.strategy == "hybrid_shard":
            shard = self.shard_group_size or world_size // _smallest_prime_factor(world_size)
            return (world_size // shard, shard)
        return (world_size,)


class ParallelismSpec(_Section):
    # tensor parallelism: ranks per TP group (consecutive ranks), the layers'
    # heads and MLP width split among them; the data-parallel size is world / tp
    tp: Annotated[int, Field(ge=1, le=MAX_WORKERS)] = 1

    def dp_size(self, world_size: int) -> int:
        """The data-parallel ranks at `world_size` (what FSDP shards over and the batch splits into)."""
        return world_size // self.tp


class CheckpointSpec(_Section):
    # also where a run stops: asked to, or at the end (0: only there)
    every_steps: Annotated[int, Field(ge=0, le=10_000_000)] = 10
    keep_last: Annotated[int, Field(ge=1, le=100)] = 3  # committed checkpoints kept
    # train on while shards are written: the loop is held for the copy of the state
    # into CPU buffers only (false: for the whole write); the last step's save blocks
    async_: bool = Field(True, alias="async")
    # a snapshot of each rank's state in CPU memory every this many steps, what
    # recovery in place restores (workers/engine/snapshot.py); 0: none. Unset:
    # automatic, the smallest interval k >= 1 whose cost stays under 2% of step
    # time, (capture_s + copy_s) / (k x step_s) <= 0.02, with one capture, the
    # step time and two copies to the peer measured at the job's start
    # (`automatic_interval`), no longer than every_steps where the capture allows
    memory_every_steps: Annotated[int, Field(ge=0, le=10_000_000)] | None = None


class WandbSpec(_Section):
    """A Weights & Biases run of the job (service/observability/tracking.py):
    its metrics at their steps, its spec as the run's config, its final
    export in the run's summary. The API key is the operator's (WANDB_API_KEY
    in the service's environment); an offline run is written under WANDB_DIR
    for `wandb sync`. Needs the service's `wandb` extra."""

    project: Annotated[str, Field(pattern=NAME_PATTERN)]
    entity: Annotated[str, Field(pattern=NAME_PATTERN)] | None = None  # unset: the key's default
    mode: Literal["online", "offline", "disabled"] = "online"


class TrackingSpec(_Section):
    """Where the job's metrics go besides the service's own store (the
    operator's MLflow server, BRIGADE_MLFLOW_TRACKING_URI, takes every job's)."""

    tensorboard: bool = False  # TensorBoard event files under the job's storage prefix (tensorboard/)
    wandb: WandbSpec | None = None  # a Weights & Biases run of the job


JOB_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
MAX_AFTER = 32  # the jobs one job (or sweep) may wait on


def _distinct(ids: list[str]) -> list[str]:
    for i, job in enumerate(ids):
        if job in ids[:i]:
            raise refusal(str(i), f"after.{i}: job {job} is named twice", job)
    return ids


# `after`: jobs of the same tenant that must succeed first (a job's or a sweep's):
# it waits QUEUED until they do, and fails if one does not (service/run/dependencies.py).
JobIds = Annotated[list[Annotated[str, Field(pattern=JOB_ID_PATTERN)]],
                   Field(max_length=MAX_AFTER, json_schema_extra={"uniqueItems": True}),
                   AfterValidator(_distinct)]


class InitSpec(_Section):
    """Where the initial weights come from (unset: seeded random init).
    `uri`: a Hugging Face model directory (config.json and model.safetensors,
    or model.safetensors.index.json and its shards) under the tenant's data
    prefix; with no `model` (or one that sets only seq_len) the model is
    the one its config.json describes, as with `model.config_uri`. `job`:
    one of the tenant's own jobs, at its committed `step` (unset: its
    latest, fixed at submit; a job still running is waited for, as `after`,
    and its latest is taken once it succeeded). From a job, the optimizer state and the data
    cursor start fresh unless asked. `adapter_uri` (with `uri` and the job's
    `adapter`): a PEFT LoRA adapter directory (adapter_config.json,
    adapter_model.safetensors) of that base to continue training from."""

    uri: Annotated[str, Field(min_length=1, max_length=2048)] | None = None
    adapter_uri: Annotated[str, Field(min_length=1, max_length=2048)] | None = None
    job: Annotated[str, Field(pattern=JOB_ID_PATTERN)] | None = None
    step: Annotated[int, Field(ge=0, le=999_999_999)] | None = None
    resume_optimizer: bool = False  # job only: its optimizer state too (the same kind as this job's)
    resume_data: bool = False  # job only: continue its data order from its cursor

    @field_validator("uri", "adapter_uri")
    @classmethod
    def _printable(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and not value.isprintable():
            raise ValueError(f"init.{info.field_name} must not contain control characters")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> InitSpec:
        if (self.uri is None) == (self.job is None):
            raise refusal("uri", "init takes exactly one of init.uri (a Hugging Face model "
                                 "directory) and init.job (one of this tenant's jobs)")
        if self.uri is not None:
            for name in ("step", "resume_optimizer", "resume_data"):
                if name in self.model_fields_set and getattr(self, name):
                    raise refusal(name, f"init.{name} is used with init.job, not init.uri",
                                  getattr(self, name))
        if self.adapter_uri is not None and self.uri is None:
            raise refusal("adapter_uri", "init.adapter_uri is an adapter of the base at init.uri: "
                          "set init.uri too", self.adapter_uri)
        return self
