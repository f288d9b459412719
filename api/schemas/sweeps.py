"""A sweep as the REST API returns it (`api.server.routes.sweeps`), parsed
back by the client with these same models: a sweep as `SweepService.view`
gives it, its trials, its best trial, and a page of sweeps. The request body
is the one sweep schema (`workers.schema.sweep.SweepSpec`, as `SweepCreate`).

A sweep's and a trial's state are the enums of `service.states`, which the
lean client imports too (they need no database).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from pydantic import BaseModel

from api.schemas.base import Public
from api.schemas.jobs import JobUpdate
from service.states import SweepState, TrialState
from workers.schema.sweep import SweepSpec

SweepCreate = SweepSpec

if TYPE_CHECKING:  # what a field holds: the enum's member
    SweepStateField: TypeAlias = SweepState
    TrialStateField: TypeAlias = TrialState
else:
    # The members as a Literal, which validates a name into its member as the enum would, but
    # is described inline in the OpenAPI document (the field's title and the names), as these
    # states always were: FastAPI gives an enum in an annotation a component of its own.
    SweepStateField = Literal[tuple(SweepState)]
    TrialStateField = Literal[tuple(TrialState)]


class SweepObjective(Public):
    metric: str
    mode: Literal["min", "max"]
    smoothing: Literal["none", "ema"] = "none"  # ema: the metric's moving average is judged
    ema_factor: float | None = None  # the weight of the past, with smoothing ema


class TrialCounts(Public):
    """How many of a sweep's trials are in each state, and in all."""

    QUEUED: int = 0
    RUNNING: int = 0
    SUCCEEDED: int = 0
    FAILED: int = 0
    PRUNED: int = 0
    CANCELLED: int = 0
    total: int = 0


class TrialPublic(Public):
    number: int  # 0, 1, ...: the study's trial number; its job is named `{sweep}-t{number}`
    job: str | None = None  # None: its spec was refused (`error` says why) before any job
    name: str
    params: dict[str, Any]  # dotted spec field -> the sampled value
    # what it is judged by (the metric, or its moving average) at its newest step; a pruned
    # trial's: at `pruned_step`, the value it was pruned on
    objective: float | None = None
    state: TrialStateField
    pruned_step: int | None = None  # the step its pruner judged it at
    error: str | None = None
    step: int | None = None  # its job's step (a pruned trial's: where its ranks stopped)
    last_loss: float | None = None  # its job's newest loss, as the jobs list shows it


class BestTrial(Public):
    job: str | None = None
    number: int
    params: dict[str, Any]
    objective: float


class SweepSummary(Public):
    """A sweep without its trials (`GET /v1/sweeps`)."""

    id: str
    name: str
    tenant: str
    state: SweepStateField
    error: str | None = None  # a FAILED sweep: why (every trial failed; a dependency did)
    waiting: str | None = None  # a QUEUED sweep: why no trial started (`waiting for j-... (RUNNING)`)
    created_at: datetime
    updated_at: datetime | None = None
    finished_at: datetime | None = None
    spec: SweepSpec
    # the current labels and note: the spec's as submitted, or as changed since (PATCH)
    labels: dict[str, str] = {}
    note: str | None = None
    objective: SweepObjective
    counts: TrialCounts
    best: BestTrial | None = None


class SweepUpdate(JobUpdate):
    """`PATCH /v1/sweeps/{id}`: as a job's (`labels` replaces all of them, `note: null`
    removes it, what is left out is kept). The trials made from then on inherit the new
    labels over the base's; those made already keep theirs."""


class SweepPublic(SweepSummary):
    """A sweep with its trials, oldest first (`GET /v1/sweeps/{id}`)."""

    trials: list[TrialPublic]


class ParamImportancePublic(BaseModel):
    """How much each parameter mattered to the objective (`GET /v1/sweeps/{id}/importance`):
    Optuna's evaluator over the sweep's finished trials."""

    evaluator: str  # optuna.importance's: "ped_anova"
    trials: int  # the finished trials (SUCCEEDED, with an objective) it read
    importances: dict[str, float]  # each parameter's share (they sum to 1), largest first
    reason: str | None = None  # why there are none yet


class SweepsPublic(BaseModel):
    sweeps: list[SweepSummary]
    limit: int
    offset: int
