"""A job, described once: what a tenant submits (`POST /v1/jobs`, `brigade
submit`), what the store hands back, and what the engine reads (`brigade
train`, `python -m workers.local`, the rank actors). Torch-free pydantic, in
the lowest layer that both the control plane and the engine import.

Every default and every allowed value is written here and nowhere else.
Pydantic refuses unknown fields, wrong types and out-of-range values with the
field's path; the checks that span fields (heads that do not divide the
width, a batch smaller than every world size in `workers`) raise at the field
they are about, so every refusal names its field from pydantic's own error
location.

What depends on the world size a job gets (a resume at another size, a
`brigade train --workers N`) is checked by `JobSpec.check_world_size(n)`,
which raises `SpecError` naming the field.

A knob marked `OPERATOR_ONLY` is for the engine's own tools (benchmarks, an
engine YAML); the service refuses it from a tenant (`operator_only_set`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.json_schema import JsonDict
from pydantic_core import InitErrorDetails, PydanticCustomError

from workers.families import OPTIONAL_FIELDS, Family, ParamCount, model_family

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
MAX_WORKERS = 1024
MAX_PRIORITY = 1000  # a job's priority, and a tenant's max_priority, lie in 0..MAX_PRIORITY
DEFAULT_MAX_RESTARTS = 3
OPERATOR_ONLY: JsonDict = {"operator_only": True}  # json_schema_extra of a knob a tenant may not set
BYTE_VOCAB = 256  # builtin and uri data are bytes

Strategy = Literal["full_shard", "shard_grad_op", "hybrid_shard", "no_shard"]
Dtype = Literal["float32", "bfloat16", "float16"]
Compression = Literal["none", "bf16", "int8"]


class SpecError(ValueError):
    """A spec that cannot run as asked (e.g. at a world size); `field` is the
    dotted path of the field it is about."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def refusal(field: str, message: str, value: Any = None) -> ValidationError:
    """A pydantic error located at `field` (dotted, relative to the model that
    raises it): raised inside a validator, pydantic keeps the location."""
    loc = tuple(int(p) if p.isdigit() else p for p in field.split("."))
    error = PydanticCustomError("spec", "{reason}", {"reason": message})
    return ValidationError.from_exception_data(
        "JobSpec", [InitErrorDetails(type=error, loc=loc, input=value)]
    )


class _Section(BaseModel):
    # Frozen: a job's spec never changes once submitted (the store shares one
    # parsed copy among the records it hands out; `model_copy(update=...)` makes another).
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False,
                              frozen=True)


class WorkerRange(_Section):
    min: Annotated[int, Field(ge=1, le=MAX_WORKERS)]
    max: Annotated[int, Field(ge=1, le=MAX_WORKERS)]

    @model_validator(mode="after")
    def _ordered(self) -> WorkerRange:
        if self.min > self.max:
            raise refusal("min", f"workers.min ({self.min}) must be <= workers.max ({self.max})",
                          self.min)
        return self


class Resources(_Section):
    cpu: Annotated[float, Field(gt=0, le=1024)] = 1.0
    gpu: Annotated[float, Field(ge=0, le=64)] = 0.0
    # one worker's memory (GB), what admission holds the model's sharded state
    # against; unset: the cluster's smallest per-worker share (service/ray_cluster.py)
    memory_gb: Annotated[float, Field(gt=0, le=65536)] | None = None


# Fields only the Llama family reads (a family that does not read one refuses it).
LLAMA_FIELDS = ("n_kv_heads", "ffn_dim", "rope_theta", "tie_embeddings", "norm_eps", "qkv_bias")
# With `config_uri`, the model's shape comes from the file; a spec may add only these.
CONFIG_URI_FIELDS = frozenset({"config_uri", "seq_len"})


class ModelSpec(_Section):
    # a registered model family (workers/families.py: the `brigade.models` entry points)
    family: Annotated[str, Field(min_length=1, max_length=64)] = "gpt"
    n_layers: Annotated[int, Field(ge=1, le=512)] = 2
    d_model: Annotated[int, Field(ge=1, le=65536)] = 64
    n_heads: Annotated[int, Field(ge=1, le=1024)] = 4
    seq_len: Annotated[int, Field(ge=2, le=65536)] = 64
    vocab_size: Annotated[int, Field(ge=2, le=1_048_576)] = 256
    mlp_ratio: Annotated[int, Field(ge=1, le=64)] = 4  # the MLP's width over d_model
    # llama: grouped-query attention's key/value heads (unset: n_heads, plain multi-head)
    n_kv_heads: Annotated[int, Field(ge=1, le=1024)] | None = None
    # llama: the SwiGLU MLP's width (unset: mlp_ratio x d_model)
    ffn_dim: Annotated[int, Field(ge=1, le=1_048_576)] | None = None
    rope_theta: Annotated[float, Field(gt=0, le=1e12)] = 10000.0  # llama: rotary base
    tie_embeddings: bool = False  # llama: the LM head shares the token embedding
    norm_eps: Annotated[float, Field(gt=0, le=1)] = 1e-5  # llama: RMSNorm's epsilon
    qkv_bias: bool = False  # llama: biases on q, k, v (Qwen2-style)
    # A Hugging Face config.json (Llama, Mistral, Qwen2) under the tenant's data
    # prefix: read at submit and resolved into the fields above
    # (service/model_config.py); the stored spec holds the fields, not the URI.
    config_uri: Annotated[str, Field(min_length=1, max_length=2048)] | None = None

    @field_validator("family")
    @classmethod
    def _registered(cls, value: str) -> str:
        from workers.families import FamilyNotFound, model_family

        try:
            model_family(value)
        except FamilyNotFound as e:
            raise PydanticCustomError("family", "{reason}", {"reason": str(e)}) from None
        return value

    @field_validator("config_uri")
    @classmethod
    def _printable_uri(cls, value: str | None) -> str | None:
        if value is not None and not value.isprintable():
            raise ValueError("model.config_uri must not contain control characters")
        return value

    @model_validator(mode="after")
    def _buildable(self) -> ModelSpec:
        if self.config_uri is not None:
            for name in sorted(self.model_fields_set - CONFIG_URI_FIELDS):
                raise refusal(name, f"model.{name} is read from model.config_uri; with it a "
                                    "spec may set only model.seq_len", getattr(self, name))
            return self
        if self.d_model % self.n_heads:
            raise refusal("d_model", f"model.d_model ({self.d_model}) must be divisible by "
                                     f"model.n_heads ({self.n_heads})", self.d_model)
        family = self.family_spec
        for name in OPTIONAL_FIELDS:
            if (name not in family.reads and name in self.model_fields_set
                    and getattr(self, name) != type(self).model_fields[name].default):
                raise refusal(name, f"model.{name} is not a field of the {self.family!r} family",
                              getattr(self, name))
        problem = family.check(self)
        if problem is not None:
            raise refusal(problem[0], problem[1], getattr(self, problem[0], None))
        return self

    @property
    def family_spec(self) -> Family:
        """The registered family (its builder, the fields it reads, its counts)."""
        return model_family(self.family)

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def ffn_width(self) -> int:
        return self.ffn_dim or self.mlp_ratio * self.d_model

    @property
    def resolved(self) -> bool:
        """Whether the fields say the model (False: `config_uri` is still to be read)."""
        return self.config_uri is None

    def param_count(self) -> ParamCount:
        """Parameters by FSDP unit, from the spec alone (kept in sync by a test)."""
        if not self.resolved:
            raise SpecError("model.config_uri", "model.config_uri has not been resolved into "
                                                "the model's fields (the service does at submit)")
        return self.family_spec.count_params(self)

    def num_params(self) -> int:
        """Parameter count of the model this spec builds."""
        return self.param_count().total


class DataSpec(_Section):
    # builtin: bytes of the standard library; synthetic: seeded progressions;
    # uri: a byte/text file at an fsspec URI (under the tenant's data prefix);
    # tokens: a prepared token dataset, uri its prefix (workers/datasets/index.py);
    # text: a small jsonl or parquet file, tokenized as read with `tokenizer`
    source: Literal["builtin", "synthetic", "uri", "tokens", "text"] = "builtin"
    uri: Annotated[str, Field(min_length=1, max_length=2048)] | None = None
    field: Annotated[str, Field(min_length=1, max_length=256)] = "text"  # text: the documents' field
    tokenizer: Annotated[str, Field(min_length=1, max_length=2048)] | None = None  # text: its uri
    # tokens: each rank checks the sha256 of its share of the shards at start
    verify_checksums: bool = True

    @field_validator("uri", "tokenizer")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        if value is not None and not value.isprintable():
            raise ValueError("data uris must not contain control characters")
        return value

    @model_validator(mode="after")
    def _uri_with_source(self) -> DataSpec:
        if self.source in URI_SOURCES and not self.uri:
            raise refusal("uri", f"data.uri is required when data.source is {self.source!r}")
        if self.source not in URI_SOURCES and self.uri:
            raise refusal("uri", f"data.uri is only used with data.source one of "
                                 f"{', '.join(URI_SOURCES)}, not {self.source!r}", self.uri)
        if self.source == "text" and not self.tokenizer:
            raise refusal("tokenizer", "data.tokenizer (a tokenizers JSON file's uri) is required "
                                       "when data.source is 'text'")
        if self.source != "text" and self.tokenizer:
            raise refusal("tokenizer", "data.tokenizer is only used with data.source 'text' (a "
                                       "token dataset records its own)", self.tokenizer)
        return self

    def uris(self) -> dict[str, str]:
        """Every uri this section names, by its field (what the service checks)."""
        return {f"data.{name}": value for name in ("uri", "tokenizer")
                if (value := getattr(self, name)) is not None}


URI_SOURCES = ("uri", "tokens", "text")
TOKEN_SOURCES = ("tokens", "text")  # their vocabulary is the dataset's tokenizer's
# DataSpec's fields a byte or synthetic source leaves out of the config hash (as before them)
TOKEN_DATA_FIELDS = ("field", "tokenizer", "verify_checksums")


class EvalSpec(_Section):
    """A validation loss every `every_steps`: the mean token loss over a fixed
    set of `batches` x train.global_batch_size samples, from another token
    dataset (`uri`) or a held-out tail of the training one (`holdout_fraction`)."""

    uri: Annotated[str, Field(min_length=1, max_length=2048)] | None = None
    holdout_fraction: Annotated[float, Field(gt=0, le=0.5)] | None = None
    every_steps: Annotated[int, Field(ge=1, le=10_000_000)] = 100
    batches: Annotated[int, Field(ge=1, le=10_000)] = 1

    @field_validator("uri")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        if value is not None and not value.isprintable():
            raise ValueError("eval.uri must not contain control characters")
        return value

    @model_validator(mode="after")
    def _one_set(self) -> EvalSpec:
        if (self.uri is None) == (self.holdout_fraction is None):
            raise refusal("uri", "eval takes exactly one of uri (a token dataset) and "
                                 "holdout_fraction", self.uri)
        return self


class TrainSpec(_Section):
    steps: Annotated[int, Field(ge=1, le=10_000_000)]
    # samples per optimizer step, whatever the world size; the ranks split it as
    # evenly as it goes (8 over 3: 3, 3, 2), each in micro-batches of at most
    # micro_batch_size (gradient accumulation; unset: one micro-batch)
    global_batch_size: Annotated[int, Field(ge=1, le=1_048_576)] = 8
    micro_batch_size: Annotated[int, Field(ge=1, le=1_048_576)] | None = None
    lr: Annotated[float, Field(gt=0, le=10)] = 1e-3
    warmup_steps: Annotated[int, Field(ge=0, le=10_000_000)] = 10
    min_lr_ratio: Annotated[float, Field(ge=0, le=1)] = 0.1  # cosine decays to lr x this
    weight_decay: Annotated[float, Field(ge=0, le=10)] = 0.1
    beta1: Annotated[float, Field(ge=0, lt=1)] = 0.9
    beta2: Annotated[float, Field(ge=0, lt=1)] = 0.95
    eps: Annotated[float, Field(gt=0, le=1)] = 1e-8
    grad_clip: Annotated[float, Field(ge=0, le=1e6)] = 1.0  # 0: no clipping
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 0  # initial weights and data order

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
    # the gradient reduce-scatter's wire format (workers/compression.py)
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
    every_steps: Annotated[int, Field(ge=0, le=10_000_000)] = 10  # 0: only when asked to stop
    keep_last: Annotated[int, Field(ge=1, le=100)] = 3  # committed checkpoints kept
    async_: bool = Field(False, alias="async")  # train on while shards are written


class TrackingSpec(_Section):
    """Where the job's metrics go besides the service's own store (the
    operator's MLflow server, BRIGADE_MLFLOW_TRACKING_URI, takes every job's)."""

    tensorboard: bool = False  # TensorBoard event files under the job's storage prefix (tensorboard/)


JOB_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"


class InitSpec(_Section):
    """Where the initial weights come from (unset: seeded random init).
    `uri`: a Hugging Face model directory (config.json and model.safetensors,
    or model.safetensors.index.json and its shards) under the tenant's data
    prefix; `job`: one of the tenant's own jobs, at its committed `step`
    (unset: its latest, fixed at submit). From a job, the optimizer state and
    the data cursor start fresh unless asked."""

    uri: Annotated[str, Field(min_length=1, max_length=2048)] | None = None
    job: Annotated[str, Field(pattern=JOB_ID_PATTERN)] | None = None
    step: Annotated[int, Field(ge=0, le=999_999_999)] | None = None
    resume_optimizer: bool = False  # job only: AdamW's moments and step count too
    resume_data: bool = False  # job only: continue its data order from its cursor

    @field_validator("uri")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        if value is not None and not value.isprintable():
            raise ValueError("init.uri must not contain control characters")
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
        return self


# What determines the loss curve: the checkpoint's config hash covers these.
CURVE_SECTIONS = ("model", "data", "train", "sharding", "init")
MAX_PREPARE_FILES = 100_000


class PrepareSpec(_Section):
    """A dataset-preparation job (kind 'prepare', `POST /v1/datasets`): its
    ranks tokenize `inputs` (the files, expanded and sorted at submit) into
    a token dataset at `output` (workers/datasets/prepare.py), one file a
    step: train.steps is the number of files."""

    inputs: Annotated[list[Annotated[str, Field(min_length=1, max_length=2048)]],
                      Field(min_length=1, max_length=MAX_PREPARE_FILES)]
    output: Annotated[str, Field(min_length=1, max_length=2048)]
    tokenizer: Annotated[str, Field(min_length=1, max_length=2048)] | None = None
    train_vocab_size: Annotated[int, Field(ge=2, le=1_048_576)] | None = None
    field: Annotated[str, Field(min_length=1, max_length=256)] = "text"
    tokens_per_shard: Annotated[int, Field(ge=1, le=1 << 30)] = 1 << 24

    @model_validator(mode="after")
    def _one_tokenizer(self) -> PrepareSpec:
        if (self.tokenizer is None) == (self.train_vocab_size is None):
            raise refusal("tokenizer", "prepare takes exactly one of tokenizer (a tokenizers JSON "
                                       "file) and train_vocab_size (train one on the inputs)")
        return self

    def uris(self) -> dict[str, str]:
        """Every uri it names, by its field (what the service checks)."""
        named = {f"prepare.inputs.{i}": uri for i, uri in enumerate(self.inputs)}
        named["prepare.output"] = self.output
        if self.tokenizer is not None:
            named["prepare.tokenizer"] = self.tokenizer
        return named


class JobSpec(_Section):
    name: Annotated[str, Field(pattern=NAME_PATTERN)] = "job"
    workers: Annotated[int, Field(ge=1, le=MAX_WORKERS)] | WorkerRange = 1
    resources_per_worker: Resources = Field(default_factory=Resources)
    priority: Annotated[int, Field(ge=0, le=MAX_PRIORITY)] = 0
    model: ModelSpec
    data: DataSpec = Field(default_factory=DataSpec)
    train: TrainSpec
    sharding: ShardingSpec = Field(default_factory=ShardingSpec)
    parallelism: ParallelismSpec = Field(default_factory=ParallelismSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    init: InitSpec | None = None  # initial weights: a Hugging Face directory or a job's checkpoint
    eval: EvalSpec | None = None  # a validation loss in the metrics rows of some steps
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)  # TensorBoard files
    # train: a training job; prepare: a dataset's preparation (the `prepare` section)
    kind: Literal["train", "prepare"] = "train"
    prepare: PrepareSpec | None = None
    max_restarts: Annotated[int, Field(ge=0, le=100)] = DEFAULT_MAX_RESTARTS
    # how the ranks spread over Ray's nodes: PACK (fewest nodes) or SPREAD (one a node where it can)
    placement: Literal["PACK", "SPREAD"] = "PACK"
    # once asked to give its workers back (preempted), how long the job may take to
    # checkpoint and stop before its ranks are killed; unset: the service's setting
    preemption_grace_s: Annotated[float, Field(gt=0, le=3600)] | None = None

    @field_validator("workers", mode="before")
    @classmethod
    def _no_bool_workers(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("workers must be an integer or {min, max}, not a boolean")
        return value

    @model_validator(mode="after")
    def _runnable(self) -> JobSpec:
        """The checks that span sections, and some world size in min..max
        that can run the job."""
        if (self.kind == "prepare") != (self.prepare is not None):
            raise refusal("prepare", "a job of kind 'prepare' has a prepare section, and only it")
        if self.prepare is not None and self.train.steps != len(self.prepare.inputs):
            raise refusal("train.steps", f"a prepare job's train.steps is its number of files "
                          f"({len(self.prepare.inputs)}), got {self.train.steps}", self.train.steps)
        if self.eval is not None and self.data.source not in TOKEN_SOURCES:
            raise refusal("eval", "eval needs token data (data.source 'tokens' or 'text'), not "
                                  f"{self.data.source!r}")
        if self.eval is not None and self.eval.holdout_fraction and self.data.source != "tokens":
            raise refusal("eval.holdout_fraction", "eval.holdout_fraction holds out windows of a "
                          "token dataset (data.source 'tokens'); give a text one eval.uri")
        # A model still to be read from model.config_uri is checked once resolved.
        model_known = self.model.resolved
        if model_known and self.data.source in ("builtin", "uri") and self.model.vocab_size < BYTE_VOCAB:
            raise refusal("model.vocab_size", f"model.vocab_size must be >= {BYTE_VOCAB} for "
                          f"byte-level data, got {self.model.vocab_size}", self.model.vocab_size)
        if model_known and self.sharding.blocks_per_unit > self.model.n_layers:
            raise refusal("sharding.blocks_per_unit", "sharding.blocks_per_unit must be in "
                          f"1..model.n_layers ({self.model.n_layers}), got "
                          f"{self.sharding.blocks_per_unit}", self.sharding.blocks_per_unit)
        if self.init is not None and self.init.uri is not None and self.model.family != "llama":
            raise refusal("init.uri", "init.uri reads Hugging Face Llama weights: it needs "
                          f"model.family 'llama', not {self.model.family!r}", self.init.uri)
        if model_known:
            self._tensor_parallel_fits()
        if not self.world_sizes():
            field, message = self.world_size_problem(self.min_workers) or ("workers", "")
            raise refusal(field, message)
        return self

    def _tensor_parallel_fits(self) -> None:
        """tp splits heads, kv heads, the MLP width, the vocabulary (embedding and
        head) and the sequence (sequence parallelism) evenly, in a family with a plan."""
        tp, m = self.parallelism.tp, self.model
        if tp == 1:
            return
        if not m.family_spec.tensor_parallel:
            from workers.families import registered_families

            planned = [n for n in registered_families() if model_family(n).tensor_parallel]
            raise refusal("parallelism.tp", f"parallelism.tp > 1 needs a model family with a "
                          f"tensor-parallel plan ({', '.join(planned)}), not {m.family!r}", tp)
        for what, size in (("n_heads", m.n_heads), ("n_kv_heads", m.kv_heads),
                           ("ffn_dim", m.ffn_width), ("vocab_size", m.vocab_size),
                           ("seq_len", m.seq_len)):
            if size % tp:
                raise refusal("parallelism.tp", f"parallelism.tp ({tp}) must divide model.{what} "
                              f"({size})", tp)

    # -- sizes ------------------------------------------------------------------

    @property
    def min_workers(self) -> int:
        return self.workers if isinstance(self.workers, int) else self.workers.min

    @property
    def max_workers(self) -> int:
        return self.workers if isinstance(self.workers, int) else self.workers.max

    def world_size_problem(self, world_size: int) -> tuple[str, str] | None:
        """(field, why) this job cannot run at `world_size`; None if it can."""
        t, tp = self.train, self.parallelism.tp
        if world_size < 1:
            return "workers", f"the world size must be >= 1, got {world_size}"
        if world_size % tp:
            return "parallelism.tp", (
                f"the world size ({world_size}) must be a multiple of parallelism.tp ({tp})")
        dp = self.parallelism.dp_size(world_size)
        where = f"the world size ({world_size})" if tp == 1 else (
            f"the data-parallel size ({dp} = world size {world_size} / parallelism.tp {tp})")
        if t.global_batch_size < dp:
            return "train.global_batch_size", (
                f"train.global_batch_size ({t.global_batch_size}) is smaller than {where}: "
                "every data-parallel rank needs at least one sample a step")
        group = self.sharding.shard_group_size
        if group is not None and dp % group:
            return "sharding.shard_group_size", (
                f"sharding.shard_group_size ({group}) must divide {where}")
        return None

    def check_world_size(self, world_size: int) -> JobSpec:
        """Raise `SpecError` naming the field unless the job runs at `world_size`."""
        problem = self.world_size_problem(world_size)
        if problem is not None:
            raise SpecError(*problem)
        return self

    def world_sizes(self) -> list[int]:
        """The world sizes this job may run at, largest first."""
        return [n for n in range(self.max_workers, self.min_workers - 1, -1)
                if self.world_size_problem(n) is None]

    # -- as stored and as hashed ---------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The spec as the store keeps it and the API shows it (every default spelled out)."""
        return self.model_dump(mode="json", by_alias=True)

    def config_hash(self) -> str:
        """A stable hash of what determines the loss curve (not the world
        size, not the checkpoint policy, not scheduling)."""
        curve = self.model_dump(mode="json", include=set(CURVE_SECTIONS))
        if self.init is None:  # the hash of a job without init is what it was before init
            curve.pop("init", None)
        curve["model"].pop("config_uri")  # resolved into the fields by then
        if self.model.family != "llama":  # a GPT's hash is what it was before llama's fields
            for name in LLAMA_FIELDS:
                curve["model"].pop(name)
        if self.data.source not in TOKEN_SOURCES:  # likewise bytes' before token data's
            for name in TOKEN_DATA_FIELDS:
                curve["data"].pop(name)
        return hashlib.sha256(json.dumps(curve, sort_keys=True).encode()).hexdigest()

    def operator_only_set(self) -> list[str]:
        """The operator-only knobs this spec sets to other than their
        defaults (dotted paths): a spec read back and sent again passes."""
        return _operator_only_set(self, "")


def explain(error: ValidationError | SpecError) -> str:
    """A refusal as one line, each problem led by its field (for the CLIs)."""
    if isinstance(error, SpecError):
        return f"{error.field}: {error}"
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'spec'}: {e['msg']}"
                     for e in error.errors())


def _operator_only_set(model: BaseModel, prefix: str) -> list[str]:
    found = []
    for name in sorted(model.model_fields_set):
        info = type(model).model_fields[name]
        value = getattr(model, name)
        if info.json_schema_extra == OPERATOR_ONLY:
            if value != info.default:
                found.append(prefix + name)
        elif isinstance(value, BaseModel):
            found += _operator_only_set(value, f"{prefix}{name}.")
    return found


def split_evenly(total: int, parts: int) -> list[int]:
    """`total` as `parts` counts as even as it goes, the larger first (8 over
    3: 3, 3, 2): a rank's share of a global batch, a micro-batch's of a rank's."""
    base, extra = divmod(total, parts)
    return [base + (i < extra) for i in range(parts)]


def _smallest_prime_factor(n: int) -> int:
    for p in range(2, int(n**0.5) + 1):
        if n % p == 0:
            return p
    return n
