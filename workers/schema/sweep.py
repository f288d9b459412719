"""A hyperparameter sweep, described once: a base job, the space its fields
are searched over, the sampler and pruner (Optuna's) and the objective.
Torch-free pydantic, like the job spec: what `POST /v1/sweeps` parses and
what the service's controller (`service.sweeps`) reads.

A space key is a dotted path to a field of `JobSpec` (`train.lr`,
`model.d_model`), checked against the schema at parse time; each trial is the
base spec with the sampled values set (`trial_spec`), named `{sweep}-t{k}`,
validated like any job. Only the space's own shape is checked here; the
service puts each value of the space through a job's submit checks at the
sweep's submit (`service.sweeps.service`), and a point whose values are
refused only together is the trial's failure.
"""

from __future__ import annotations

import difflib
import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StrictBool, StrictFloat, StrictInt, StrictStr, model_validator

from workers.schema.base import _members, _Section, refusal
from workers.schema.job import JobSpec
from workers.schema.labels import MAX_LABELS, Labels, Note
from workers.schema.training import JobIds

MAX_TRIALS = 10_000
# A sweep's name, short enough that `{name}-t{k}` is still a job name (NAME_PATTERN) at any k.
SWEEP_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,119}$"
NOT_SEARCHED = frozenset({"name"})  # the sweep names each trial itself

Scalar = StrictBool | StrictInt | StrictFloat | StrictStr | None  # what Optuna's choices may hold
Values = Annotated[list[Scalar], Field(min_length=1, max_length=1000)]


class Domain(_Section):
    """Where one field is searched: exactly one of a grid of values, a
    uniform or log-uniform float range, an integer range, or a choice."""

    grid: Values | None = None
    # a tuple from a JSON list (the section is strict; the bounds themselves are)
    uniform: Annotated[tuple[StrictFloat, StrictFloat] | None, Field(strict=False)] = None
    loguniform: Annotated[tuple[StrictFloat, StrictFloat] | None, Field(strict=False)] = None
    int: Annotated[tuple[StrictInt, StrictInt] | None, Field(strict=False)] = None
    choice: Values | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Domain:
        given = [name for name in type(self).model_fields if getattr(self, name) is not None]
        if len(given) != 1:
            raise refusal(given[1] if given else "grid",
                          "a domain is exactly one of grid, uniform, loguniform, int, choice"
                          + (f" (got {', '.join(given)})" if given else ""))
        kind = given[0]
        if kind in ("uniform", "loguniform", "int"):
            lo, hi = getattr(self, kind)
            if not all(math.isfinite(v) for v in (lo, hi)):
                raise refusal(kind, f"{kind}: the bounds must be finite", [lo, hi])
            if lo >= hi:
                raise refusal(kind, f"{kind}: [lo, hi] needs lo < hi, got [{lo}, {hi}]", [lo, hi])
            if kind == "loguniform" and lo <= 0:
                raise refusal(kind, f"loguniform: lo must be > 0, got {lo}", [lo, hi])
        return self

    @property
    def kind(self) -> str:
        return next(name for name in type(self).model_fields if getattr(self, name) is not None)

    @property
    def values(self) -> list[Any] | None:
        """The values a grid or a choice lists; None for a range."""
        return self.grid if self.grid is not None else self.choice


class Objective(_Section):
    """What a trial is judged by: a numeric column of its metrics rows
    (`eval_loss`, `loss`, ...), minimised or maximised, as it stands at a
    step: its value there, or (`smoothing: ema`) the exponential moving
    average of its values so far, `ema_factor` the weight of the past
    (debiased: the average of the values seen, the newest weighted most). A
    loss of one batch is noisy from step to step; an eval loss (the same
    held-out batches for every trial) or a smoothed loss is what a pruner
    should compare."""

    metric: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
    mode: Literal["min", "max"] = "min"
    smoothing: Literal["none", "ema"] = "none"
    ema_factor: Annotated[float, Field(gt=0, lt=1)] = 0.8

    @model_validator(mode="after")
    def _factor_read(self) -> Objective:
        if self.set_unread(["ema_factor"], ("ema_factor",) if self.smoothing == "ema" else ()):
            raise refusal("ema_factor", "objective.ema_factor is read only with smoothing: ema",
                          self.ema_factor)
        return self


class PrunerOptions(_Section):
    """asha: `min_steps` (the first rung) and `reduction_factor`; median:
    `startup_trials` (trials that finish before any is pruned) and
    `warmup_steps` (steps of a trial before it may be pruned)."""

    min_steps: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    reduction_factor: Annotated[int, Field(ge=2, le=100)] = 3
    startup_trials: Annotated[int, Field(ge=0, le=MAX_TRIALS)] = 5
    warmup_steps: Annotated[int, Field(ge=0, le=1_000_000)] = 0


PRUNER_READS = {"none": (), "asha": ("min_steps", "reduction_factor"),
                "median": ("startup_trials", "warmup_steps")}


class SweepSpec(_Section):
    name: Annotated[str, Field(pattern=SWEEP_NAME_PATTERN)]
    base: JobSpec
    space: Annotated[dict[str, Domain], Field(min_length=1, max_length=32)]
    sampler: Literal["grid", "random", "tpe"] = "tpe"
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = 0
    objective: Objective
    max_trials: Annotated[int, Field(ge=1, le=MAX_TRIALS)]
    max_concurrent: Annotated[int, Field(ge=1, le=MAX_TRIALS)] = 1
    pruner: Literal["none", "asha", "median"] = "none"
    pruner_options: PrunerOptions = Field(default_factory=PrunerOptions)
    # jobs of the tenant that must succeed before the first trial starts
    after: JobIds = []
    # each trial's, over the base's (workers/schema/labels.py); the sweep's own too, which
    # `GET /v1/sweeps?label=` filters on and `PATCH /v1/sweeps/{id}` changes with its note
    labels: Labels = Field(default_factory=dict)
    note: Note | None = None  # the sweep's (a trial's is the base's)

    @model_validator(mode="after")
    def _searchable(self) -> SweepSpec:
        for key, domain in self.space.items():
            if problem := field_problem(key):
                raise refusal(f"space.{key}", problem, key)
            if self.sampler == "grid" and domain.values is None:
                raise refusal(f"space.{key}.{domain.kind}", f"the grid sampler searches grid and "
                              f"choice domains only, not {domain.kind}")
        if unread := self.pruner_options.set_unread(list(PrunerOptions.model_fields),
                                                    PRUNER_READS[self.pruner]):
            raise refusal(f"pruner_options.{unread}", f"pruner_options.{unread} is not read by "
                          f"pruner {self.pruner!r}")
        if problem := trial_labels_problem(self.base, self.labels):
            raise refusal("labels", problem)
        return self

    @property
    def grid_size(self) -> int | None:
        """How many points the grid sampler has (the product of the values' counts); None otherwise."""
        if self.sampler != "grid":
            return None
        return math.prod(len(d.values or ()) for d in self.space.values())

    @property
    def trial_budget(self) -> int:
        """How many trials the sweep runs: max_trials, or fewer when the grid has fewer points."""
        return min(self.max_trials, self.grid_size or self.max_trials)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


def field_problem(path: str) -> str | None:
    """Why `path` is not a dotted path to a field of JobSpec a sweep may set; None if it is."""
    parts = path.split(".")
    if path in NOT_SEARCHED:
        return f"space: {path!r} is set by the sweep for each trial"
    candidates: list[Any] = [JobSpec]
    for depth, part in enumerate(parts):
        models = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        fields = [f for m in models for name, f in m.model_fields.items() if part in (name, f.alias)]
        if not fields:
            where = ".".join(parts[:depth]) or "the job spec"
            if not models:
                return f"space: {where} has no fields (it is not a section)"
            names = sorted({n for m in models for n in m.model_fields})
            # the nearest name, by the measure a job's unknown field is answered with
            if close := difflib.get_close_matches(part, names, n=1, cutoff=0.6):
                prefix = "" if depth == 0 else f"{where}."
                return f"space: {where} has no field {part!r} (did you mean {prefix}{close[0]}?)"
            return f"space: {where} has no field {part!r} (it has {', '.join(names)})"
        candidates = [m for f in fields for m in _members(f.annotation)]
    if all(isinstance(c, type) and issubclass(c, BaseModel) for c in candidates):
        return f"space: {path} is a section, not a field: name one of its fields"
    return None


def trial_labels_problem(base: JobSpec, labels: dict[str, str]) -> str | None:
    """Why a sweep's `labels` cannot be its trials' (the base's merged under them
    would be too many); None if they can."""
    if len(merged := {**base.labels, **labels}) > MAX_LABELS:
        return (f"labels: the trials would have {len(merged)} labels, the base's and the "
                f"sweep's together (at most {MAX_LABELS})")
    return None


def trial_name(sweep_name: str, number: int) -> str:
    """The job name of a sweep's trial `number`."""
    return f"{sweep_name}-t{number}"


def trial_spec(sweep: SweepSpec, params: dict[str, Any], number: int,
               labels: dict[str, str] | None = None) -> JobSpec:
    """The base spec with each dotted field of `params` set, the trial's name
    and the sweep's labels over the base's (`labels`: the sweep's as changed
    since its submit; None: its spec's); pydantic's ValidationError (located
    in the job spec) for a point that makes it invalid."""
    raw = sweep.base.model_dump(mode="json", by_alias=True, exclude_unset=True)
    for path, value in params.items():
        *parents, leaf = path.split(".")
        node = raw
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[leaf] = value
    raw["name"] = trial_name(sweep.name, number)
    inherited = sweep.labels if labels is None else labels
    if inherited:  # the trials inherit the sweep's labels
        raw["labels"] = {**raw.get("labels", {}), **inherited}
    return JobSpec.model_validate(raw)
