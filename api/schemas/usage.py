"""Usage over a window (`GET /v1/usage`, `api.server.routes.usage`): the
workers, CPUs and GPUs each tenant's jobs held, by goodput phase, and what
they cost, per flavor and in all."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from api.schemas.base import Public


class FlavorUsagePublic(Public):
    """What a tenant's jobs of one flavor held and cost over the window."""

    worker_seconds: float
    cost: float  # worker-hours x the flavor's price per worker-hour at the time


class UsagePublic(Public):
    """One tenant's usage over a window (the cluster's: `tenant` is "*")."""

    tenant: str
    worker_seconds: float  # workers held x seconds
    # worker-hours x the price of each worker's flavor at the time it ran (a price change
    # counts from then on; a job of no flavor at BRIGADE_DEFAULT_PRICE_PER_WORKER_HOUR)
    cost: float = 0.0
    # the same per flavor, by name; the jobs of no flavor under "(none)"
    flavors: dict[str, FlavorUsagePublic] = Field(default_factory=dict)
    cpu_seconds: float
    gpu_seconds: float
    jobs: dict[str, int]  # final state -> its jobs that ended within the window
    preemptions: int  # times its jobs were preempted within the window
    # worker_seconds by goodput phase (queued ... suspended; they sum to it): each phase's
    # time x the workers held over it, so a phase that holds none (queued) counts 0
    phases: dict[str, float] = Field(default_factory=dict)
    goodput: float | None = None  # training / (worker_seconds - suspended); None: held nothing


class UsageReport(BaseModel):
    window_s: float
    since: datetime
    until: datetime
    tenants: list[UsagePublic]
    cluster: UsagePublic | None = None  # every tenant's added up: the admin's report of all
