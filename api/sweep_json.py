"""What the sweep routes return (`api.routes.sweeps`), parsed back by the
client with these same models: a sweep as `SweepService.view` gives it, its
trials, its best trial, and a page of sweeps. The request body is the one
sweep schema (`workers.spec.sweep.SweepSpec`, as `SweepCreate`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from workers.spec.sweep import SweepSpec

SweepCreate = SweepSpec

# The states' names (service.store.sweep_records' SweepState and TrialState): as
# strings, so that the client imports no store (SQLAlchemy) with them.
SweepStateName = Literal["QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"]
TrialStateName = Literal["QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "PRUNED", "CANCELLED"]
FINAL_SWEEP_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})


class _Public(BaseModel):
    model_config = ConfigDict(from_attributes=True, extra="ignore")


class SweepObjective(_Public):
    metric: str
    mode: Literal["min", "max"]


class TrialCounts(_Public):
    """How many of a sweep's trials are in each state, and in all."""

    QUEUED: int = 0
    RUNNING: int = 0
    SUCCEEDED: int = 0
    FAILED: int = 0
    PRUNED: int = 0
    CANCELLED: int = 0
    total: int = 0


class TrialPublic(_Public):
    number: int  # 0, 1, ...: the study's trial number; its job is named `{sweep}-t{number}`
    job: str | None = None  # None: its spec was refused (`error` says why) before any job
    name: str
    params: dict[str, Any]  # dotted spec field -> the sampled value
    objective: float | None = None  # the metric's newest value (a pruned trial's: where it stopped)
    state: TrialStateName
    pruned_step: int | None = None
    error: str | None = None
    step: int | None = None  # its job's step


class BestTrial(_Public):
    job: str | None = None
    number: int
    params: dict[str, Any]
    objective: float


class SweepSummary(_Public):
    """A sweep without its trials (`GET /v1/sweeps`)."""

    id: str
    name: str
    tenant: str
    state: SweepStateName
    error: str | None = None  # a FAILED sweep: why (every trial failed; a dependency did)
    waiting: str | None = None  # a QUEUED sweep: why no trial started (`waiting for j-... (RUNNING)`)
    created_at: datetime
    updated_at: datetime | None = None
    finished_at: datetime | None = None
    spec: SweepSpec
    objective: SweepObjective
    counts: TrialCounts
    best: BestTrial | None = None


class SweepPublic(SweepSummary):
    """A sweep with its trials, oldest first (`GET /v1/sweeps/{id}`)."""

    trials: list[TrialPublic]


class SweepsPublic(BaseModel):
    sweeps: list[SweepSummary]
    limit: int
    offset: int
