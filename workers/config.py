"""The engine's own job config: plain kw-only dataclasses, no torch import.

The control plane turns its job spec into a `JobConfig`; the engine never sees
HTTP or database types. `validate(world_size)` refuses an impossible job with a
message that says why, before any process group is formed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

STRATEGIES = ("full_shard", "shard_grad_op", "hybrid_shard", "no_shard")
DTYPES = ("float32", "bfloat16", "float16")
DATA_SOURCES = ("synthetic", "builtin", "file")
GRAD_COMPRESSIONS = ("none", "bf16", "int8")


class ConfigError(ValueError):
    """A job config that can never run; the message names the field."""


@dataclass(kw_only=True)
class ModelConfig:
    kind: str = "gpt"
    n_layers: int = 2
    d_model: int = 48
    n_heads: int = 4
    seq_len: int = 32
    vocab_size: int = 256
    mlp_ratio: int = 4

    def validate(self) -> None:
        if self.kind != "gpt":
            raise ConfigError(f"model.kind: unknown model {self.kind!r} (known: 'gpt')")
        for name in ("n_layers", "d_model", "n_heads", "seq_len", "vocab_size", "mlp_ratio"):
            if getattr(self, name) < 1:
                raise ConfigError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"model.d_model ({self.d_model}) must be divisible by model.n_heads ({self.n_heads})"
            )

    def num_params(self) -> int:
        """Parameter count of the GPT this config builds (kept in sync by a test)."""
        d, v, s, L, m = self.d_model, self.vocab_size, self.seq_len, self.n_layers, self.mlp_ratio
        block = 2 * 2 * d + 3 * d * d + d * d + 2 * m * d * d  # 2 LayerNorms, qkv, proj, mlp
        return v * d + s * d + L * block + 2 * d + v * d  # emb, pos, blocks, ln_f, head


@dataclass(kw_only=True)
class DataConfig:
    source: str = "builtin"  # synthetic | builtin | file
    uri: str | None = None  # for source=file: an fsspec URI of a byte/text file
    seed: int = 0

    def validate(self, model: ModelConfig) -> None:
        if self.source not in DATA_SOURCES:
            raise ConfigError(
                f"data.source: unknown source {self.source!r} (known: {', '.join(DATA_SOURCES)})"
            )
        if self.source == "file" and not self.uri:
            raise ConfigError("data.uri is required when data.source is 'file'")
        if self.source != "file" and self.uri:
            raise ConfigError(f"data.uri is only used with data.source 'file', not {self.source!r}")
        if self.source in ("builtin", "file") and model.vocab_size < 256:
            raise ConfigError(
                f"model.vocab_size must be >= 256 for byte-level data, got {model.vocab_size}"
            )


@dataclass(kw_only=True)
class ShardingConfig:
    strategy: str = "full_shard"
    param_dtype: str = "float32"
    reduce_dtype: str = "float32"
    cpu_offload: bool = False
    activation_checkpointing: bool = False
    blocks_per_unit: int = 1  # the wrap unit: k transformer blocks per FSDP unit
    # hybrid_shard only: ranks per shard group (the replicate degree is world/this).
    # None picks: world / smallest prime factor of world.
    shard_group_size: int | None = None
    # The gradient reduce-scatter's wire format (workers/compression.py):
    # none | bf16 | int8 (per-block scaled, with error feedback).
    grad_compression: str = "none"
    # int8 only. Not in the job spec: off only to measure what it buys.
    grad_error_feedback: bool = True
    # Explicit all-gather prefetch depth in units; 0: FSDP's implicit one-ahead.
    prefetch_forward: int = 0
    prefetch_backward: int = 0

    def validate(self, model: ModelConfig, world_size: int) -> None:
        if self.strategy not in STRATEGIES:
            raise ConfigError(
                f"sharding.strategy: unknown strategy {self.strategy!r} "
                f"(known: {', '.join(STRATEGIES)})"
            )
        for name in ("param_dtype", "reduce_dtype"):
            if getattr(self, name) not in DTYPES:
                raise ConfigError(
                    f"sharding.{name}: unknown dtype {getattr(self, name)!r} "
                    f"(known: {', '.join(DTYPES)})"
                )
        if not 1 <= self.blocks_per_unit <= model.n_layers:
            raise ConfigError(
                f"sharding.blocks_per_unit must be in 1..model.n_layers ({model.n_layers}), "
                f"got {self.blocks_per_unit}"
            )
        if self.shard_group_size is not None:
            if self.strategy != "hybrid_shard":
                raise ConfigError("sharding.shard_group_size is only used with 'hybrid_shard'")
            if self.shard_group_size < 1 or world_size % self.shard_group_size:
                raise ConfigError(
                    f"sharding.shard_group_size ({self.shard_group_size}) must divide "
                    f"the world size ({world_size})"
                )
        if self.grad_compression not in GRAD_COMPRESSIONS:
            raise ConfigError(
                f"sharding.grad_compression: unknown compression {self.grad_compression!r} "
                f"(known: {', '.join(GRAD_COMPRESSIONS)})"
            )
        if self.grad_compression != "none" and self.strategy == "no_shard":
            raise ConfigError(
                "sharding.grad_compression compresses the gradient reduce-scatter; "
                "'no_shard' has none (it all-reduces)"
            )
        for name in ("prefetch_forward", "prefetch_backward"):
            if getattr(self, name) < 0:
                raise ConfigError(f"sharding.{name} must be >= 0, got {getattr(self, name)}")

    def mesh_shape(self, world_size: int) -> tuple[int, int] | tuple[int]:
        """(replicate, shard) for hybrid/no_shard, (shard,) otherwise."""
        if self.strategy == "no_shard":
            return (world_size, 1)
        if self.strategy == "hybrid_shard":
            shard = self.shard_group_size or world_size // _smallest_prime_factor(world_size)
            return (world_size // shard, shard)
        return (world_size,)


@dataclass(kw_only=True)
class OptimConfig:
    lr: float = 3e-3
    min_lr_ratio: float = 0.1  # cosine decays to lr * this
    warmup_steps: int = 10
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    grad_clip: float = 1.0  # 0 disables clipping

    def validate(self) -> None:
        if self.lr <= 0:
            raise ConfigError(f"optim.lr must be > 0, got {self.lr}")
        if self.warmup_steps < 0:
            raise ConfigError(f"optim.warmup_steps must be >= 0, got {self.warmup_steps}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError(f"optim.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.grad_clip < 0:
            raise ConfigError(f"optim.grad_clip must be >= 0, got {self.grad_clip}")


@dataclass(kw_only=True)
class TrainConfig:
    steps: int = 20
    global_batch: int = 12  # samples per optimizer step, fixed whatever the world size
    micro_batch: int | None = None  # per-rank samples per forward; None = the whole share
    seed: int = 0

    def validate(self, world_size: int) -> None:
        if self.steps < 1:
            raise ConfigError(f"train.steps must be >= 1, got {self.steps}")
        if self.global_batch < 1:
            raise ConfigError(f"train.global_batch must be >= 1, got {self.global_batch}")
        if world_size < 1:
            raise ConfigError(f"world size must be >= 1, got {world_size}")
        if self.global_batch % world_size:
            raise ConfigError(
                f"train.global_batch ({self.global_batch}) is not divisible by the world size "
                f"({world_size}): each rank must take global_batch / world_size samples"
            )
        per_rank = self.global_batch // world_size
        if self.micro_batch is not None and (self.micro_batch < 1 or per_rank % self.micro_batch):
            raise ConfigError(
                f"train.micro_batch ({self.micro_batch}) must divide the per-rank batch "
                f"({per_rank} = {self.global_batch} / {world_size})"
            )

    def per_rank_batch(self, world_size: int) -> int:
        return self.global_batch // world_size

    def accumulation_steps(self, world_size: int) -> int:
        per_rank = self.per_rank_batch(world_size)
        return per_rank // (self.micro_batch or per_rank)


@dataclass(kw_only=True)
class CheckpointConfig:
    interval_steps: int = 0  # save every this many steps; 0: only when asked to stop
    keep_last: int = 3  # committed checkpoints kept per job
    async_save: bool = True  # train on while shards are written

    def validate(self) -> None:
        if self.interval_steps < 0:
            raise ConfigError(f"checkpoint.interval_steps must be >= 0, got {self.interval_steps}")
        if self.keep_last < 1:
            raise ConfigError(f"checkpoint.keep_last must be >= 1, got {self.keep_last}")


@dataclass(kw_only=True)
class CheckpointTarget:
    """Where a job's checkpoints live: chosen by the platform, never by the job
    (so not part of JobConfig, nor of its hash). `secret` signs manifests."""

    root: str
    tenant: str
    job: str
    secret: str
    storage_options: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CheckpointTarget:
        return cls(**raw)

    def open_store(self):
        """The job's `CheckpointStore` (torch-free: the control plane lists with it)."""
        from checkpoints import CheckpointStore

        return CheckpointStore(
            self.root, tenant=self.tenant, job=self.job, secret=self.secret.encode(),
            storage_options=self.storage_options,
        )


@dataclass(kw_only=True)
class JobConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    sharding: ShardingConfig = field(default_factory=ShardingConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    def validate(self, world_size: int) -> JobConfig:
        self.model.validate()
        self.data.validate(self.model)
        self.sharding.validate(self.model, world_size)
        self.optim.validate()
        self.train.validate(world_size)
        self.checkpoint.validate()
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> JobConfig:
        sections = {f.name: f.type for f in dataclasses.fields(cls)}
        unknown = set(raw) - set(sections)
        if unknown:
            raise ConfigError(f"unknown config section(s): {', '.join(sorted(unknown))}")
        built = {}
        for f in dataclasses.fields(cls):
            section_cls = _SECTION_TYPES[f.name]
            values = raw.get(f.name) or {}
            if not isinstance(values, dict):
                raise ConfigError(f"{f.name}: expected a mapping, got {type(values).__name__}")
            known = {sf.name for sf in dataclasses.fields(section_cls)}
            bad = set(values) - known
            if bad:
                raise ConfigError(
                    f"{f.name}: unknown field(s) {', '.join(sorted(bad))} "
                    f"(known: {', '.join(sorted(known))})"
                )
            built[f.name] = section_cls(
                **{k: _coerce(f"{f.name}.{k}", _FIELD_TYPES[section_cls][k], v) for k, v in values.items()}
            )
        return cls(**built)

    def config_hash(self) -> str:
        """Stable hash of what determines the loss curve (not the world size,
        not the checkpoint policy)."""
        curve = {k: v for k, v in self.to_dict().items() if k != "checkpoint"}
        blob = json.dumps(curve, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()


_SECTION_TYPES = {
    "model": ModelConfig,
    "data": DataConfig,
    "sharding": ShardingConfig,
    "optim": OptimConfig,
    "train": TrainConfig,
    "checkpoint": CheckpointConfig,
}


_FIELD_TYPES = {
    section: {f.name: f.type for f in dataclasses.fields(section)} for section in _SECTION_TYPES.values()
}


def _coerce(where: str, annotation: str, value: Any) -> Any:
    """Check a value against its field's annotation (a string under
    `from __future__ import annotations`); numbers given as text are parsed."""
    optional = annotation.endswith("| None")
    base = annotation.removesuffix("| None").strip()
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{where}: a value is required")
    if base == "bool":
        if isinstance(value, bool):
            return value
    elif base == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif base == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
    elif base == "str":
        if isinstance(value, str):
            return value
    else:
        return value
    raise ConfigError(f"{where}: expected {annotation}, got {value!r}")


def _smallest_prime_factor(n: int) -> int:
    for p in range(2, int(n**0.5) + 1):
        if n % p == 0:
            return p
    return n
