"""The job: its sections together, the checks that span them, the world
sizes it can run at, and its stored and hashed forms."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from workers.schema.adapter import AdapterSpec
from workers.schema.base import (
    BYTE_VOCAB,
    DEFAULT_MAX_RESTARTS,
    MAX_PRIORITY,
    MAX_WORKERS,
    NAME_PATTERN,
    OPERATOR_ONLY,
    Resources,
    SpecError,
    WorkerRange,
    _Section,
    refusal,
)
from workers.schema.data import TOKEN_DATA_FIELDS, TOKEN_SOURCES, DataSpec, EvalSpec, PrepareSpec
from workers.schema.families import model_family
from workers.schema.labels import Labels, Note
from workers.schema.model import LLAMA_FIELDS, ModelSpec, config_in
from workers.schema.training import (
    RECIPE_FIELDS,
    CheckpointSpec,
    InitSpec,
    JobIds,
    ParallelismSpec,
    ShardingSpec,
    TrackingSpec,
    TrainSpec,
)

# What determines the loss curve: the checkpoint's config hash covers these.
CURVE_SECTIONS = ("model", "data", "train", "sharding", "init", "adapter")


class JobSpec(_Section):
    # the OpenAPI document's example (a fuzzer sends it as it is: it must be a job that queues)
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "name": "tiny", "model": {"n_layers": 2, "d_model": 64, "n_heads": 4}, "train": {"steps": 20}}]})

    name: Annotated[str, Field(pattern=NAME_PATTERN)] = "job"
    workers: Annotated[int, Field(ge=1, le=MAX_WORKERS)] | WorkerRange = 1
    resources_per_worker: Resources = Field(default_factory=Resources)
    priority: Annotated[int, Field(ge=0, le=MAX_PRIORITY)] = 0
    # Unset (or only its seq_len) with `init: {uri}`: read from that directory's
    # config.json, as `model.config_uri` is (`_model_from_init`).
    model: ModelSpec
    data: DataSpec = Field(default_factory=DataSpec)
    train: TrainSpec
    sharding: ShardingSpec = Field(default_factory=ShardingSpec)
    parallelism: ParallelismSpec = Field(default_factory=ParallelismSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    init: InitSpec | None = None  # initial weights: a Hugging Face directory or a job's checkpoint
    # train low-rank adapters on the frozen model (workers/schema/adapter.py); unset: every weight
    adapter: AdapterSpec | None = None
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
    # jobs of the tenant that must succeed first: it waits QUEUED until they
    # do, and fails if one fails or is cancelled (not part of the loss curve)
    after: JobIds = Field(default_factory=list)
    # `key: value` pairs lists filter on, and free text (workers/schema/labels.py): as
    # submitted; the job's record holds the current ones (PATCH /v1/jobs/{id})
    labels: Labels = Field(default_factory=dict)
    note: Note | None = None

    @model_validator(mode="before")
    @classmethod
    def _model_from_init(cls, data: Any) -> Any:
        """`init: {uri: DIR}` with no model (or one that sets only seq_len)
        fine-tunes the model DIR holds: `model.config_uri` becomes
        DIR/config.json, resolved at submit like any config_uri. A model that
        sets any other field is left as written (it says the model itself)."""
        if not isinstance(data, dict):
            return data
        init = data.get("init")
        uri = init.get("uri") if isinstance(init, dict) else getattr(init, "uri", None)
        if not isinstance(uri, str) or not uri:
            return data
        model = data.get("model", {})
        if isinstance(model, ModelSpec):
            model = {name: getattr(model, name) for name in model.model_fields_set}
        if not isinstance(model, dict):
            return data
        given = {k: v for k, v in model.items() if not (k == "config_uri" and v is None)}
        if set(given) - {"seq_len"}:
            return data
        return {**data, "model": {**given, "config_uri": config_in(uri)}}

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
        if (model_known and self.init is not None and self.init.uri is not None
                and self.model.family != "llama"):
            raise refusal("init.uri", "init.uri reads Hugging Face Llama weights: it needs "
                          f"model.family 'llama', not {self.model.family!r}", self.init.uri)
        if self.train.compile and self.parallelism.tp > 1:
            raise refusal("train.compile", "train.compile compiles blocks that FSDP alone shards; "
                          "with parallelism.tp > 1 compiled blocks leave the eager loss curve "
                          "(torch 2.13) or fail with activation checkpointing: set one of them",
                          self.train.compile)
        if model_known:
            self._tensor_parallel_fits()
        if self.adapter is not None:
            self._adapter_fits(model_known)
        elif self.init is not None and self.init.adapter_uri is not None:
            raise refusal("init.adapter_uri", "init.adapter_uri continues a LoRA adapter: the job "
                          "needs an adapter section (its kind, rank, alpha and targets)",
                          self.init.adapter_uri)
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
            from workers.schema.families import registered_families

            planned = [n for n in registered_families() if model_family(n).tensor_parallel]
            raise refusal("parallelism.tp", f"parallelism.tp > 1 needs a model family with a "
                          f"tensor-parallel plan ({', '.join(planned)}), not {m.family!r}", tp)
        for what, size in (("n_heads", m.n_heads), ("n_kv_heads", m.kv_heads),
                           ("ffn_dim", m.ffn_width), ("vocab_size", m.vocab_size),
                           ("seq_len", m.seq_len)):
            if size % tp:
                raise refusal("parallelism.tp", f"parallelism.tp ({tp}) must divide model.{what} "
                              f"({size})", tp)

    def _adapter_fits(self, model_known: bool) -> None:
        """Adapters train on a base the family can target, re-read at every
        start (from init.uri, or seeded), with an optimizer that updates them
        element by element."""
        assert self.adapter is not None
        if self.kind != "train":
            raise refusal("adapter", "adapter trains a model: it needs kind 'train'")
        if self.init is not None and self.init.job is not None:
            raise refusal("init.job", "an adapter job's base is re-read at every start from "
                          "init.uri (or seeded): init.job's checkpoint cannot be its base",
                          self.init.job)
        if not self.train.optimizer_kind.adapters:
            raise refusal("train.optimizer", f"train.optimizer {self.train.optimizer!r} updates "
                          "whole weight matrices; adapters train with an elementwise one "
                          "(adamw, adam, sgd)", self.train.optimizer)
        if self.sharding.grad_compression != "none":
            raise refusal("sharding.grad_compression", "sharding.grad_compression is for full "
                          "training; an adapter job's gradients are the adapters' alone",
                          self.sharding.grad_compression)
        if not model_known:
            return
        targets = self.model.family_spec.adapter_targets
        if targets is None:
            raise refusal("adapter", f"model.family {self.model.family!r} takes no adapter "
                          "(no targetable linear layers); llama does")
        known = targets(self.model)
        for i, name in enumerate(self.adapter.targets):
            if name not in known:
                raise refusal(f"adapter.targets.{i}", f"adapter.targets: model.family "
                              f"{self.model.family!r} has no module {name!r} in its blocks "
                              f"(it has {', '.join(known)})", name)

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
        if self.adapter is None:  # likewise without an adapter
            curve.pop("adapter", None)
        curve["model"].pop("config_uri")  # resolved into the fields by then
        if self.model.family != "llama":  # a GPT's hash is what it was before llama's fields
            for name in LLAMA_FIELDS:
                curve["model"].pop(name)
        for name in RECIPE_FIELDS:  # a recipe field at its default hashes as before it was one
            if curve["train"][name] == TrainSpec.model_fields[name].default:
                curve["train"].pop(name)
        curve["train"].pop("compile")  # how the blocks run, not what they compute (eager's curve)
        if self.data.source not in TOKEN_SOURCES:  # likewise bytes' before token data's
            for name in TOKEN_DATA_FIELDS:
                curve["data"].pop(name)
        if self.data.mix is None:  # a job without a mixture hashes as before `mix`
            curve["data"].pop("mix")
        return hashlib.sha256(json.dumps(curve, sort_keys=True).encode()).hexdigest()

    def operator_only_set(self) -> list[str]:
        """The operator-only knobs this spec sets to other than their
        defaults (dotted paths): a spec read back and sent again passes."""
        return _operator_only_set(self, "")



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
