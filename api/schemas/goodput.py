"""Where jobs' time went, by goodput phase (`api.server.routes.goodput`):
one job's, a list of jobs', and the caller's jobs' over time."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from api.schemas.base import Public


class GoodputPublic(Public):
    """Where a job's time since submit went (service/observability/goodput.py
    says how each interval is attributed): seconds by phase, summing to
    `wall_s`; `goodput` = training / (wall_s - suspended)."""

    wall_s: float  # submit to the end, or to now
    phases: dict[str, float]  # queued, starting, training, data_wait, eval, checkpoint_stall,
    #                           recovering, lost, suspended
    starting_phases: dict[str, float]  # the start-ups' sub-phases, over the attempts
    goodput: float | None  # None: no time outside suspensions yet


class JobGoodputPublic(Public):
    """A listed job's goodput (`GoodputPublic` less the start-ups' sub-phases)."""

    id: str
    wall_s: float
    phases: dict[str, float]
    goodput: float | None


class JobsGoodputPublic(BaseModel):
    items: list[JobGoodputPublic]  # the jobs asked for that the caller may see, in its order


class GoodputBucketPublic(Public):
    start: datetime
    end: datetime
    phases: dict[str, float]  # worker-seconds by goodput phase within [start, end)
    goodput: float | None  # training / (held - suspended); None: no workers held


class GoodputOverTime(BaseModel):
    """The goodput of the caller's jobs (the admin's: every tenant's, or
    `tenant`'s) in equal buckets of the window, oldest first."""

    window_s: float
    since: datetime
    until: datetime
    tenant: str | None  # None: every tenant
    buckets: list[GoodputBucketPublic]
