"""What the job store hands back: plain frozen values, never ORM objects, so a
caller on any thread may keep them after the session that read them is gone."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from service.states import JobState
from workers.spec import JobSpec


@dataclass(frozen=True)
class JobRecord:
    id: str
    tenant: str
    name: str
    state: JobState
    spec: JobSpec  # the job as submitted, typed
    priority: int
    workers: int | None  # the current world size; None until a group is launched
    requested_workers: int | None  # a resume override of the spec's size
    step: int
    restarts: int
    preemptions: int
    latest_checkpoint: dict | None  # {"step": int, "world_size": int}
    attempt: int  # how many worker groups have been launched for the job
    error: str | None
    idempotency_key: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime


@dataclass(frozen=True)
class EventRecord:
    id: int
    job_id: str
    time: datetime
    from_state: JobState | None  # None for the creation event
    to_state: JobState
    reason: str


@dataclass(frozen=True)
class LogRecord:
    id: int
    time: datetime
    line: str


@dataclass(frozen=True)
class TenantRecord:
    id: str
    name: str  # what the jobs' `tenant` column holds
    quota: dict  # max_workers, max_gpus, max_running_jobs, max_queued_jobs; None: no limit
    max_priority: int
    weight: float
    created_at: datetime
    updated_at: datetime
