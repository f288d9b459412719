"""Usage over a window (`GET /v1/usage`, `api.server.routes.usage`): the
workers, CPUs and GPUs each tenant's jobs held, by goodput phase."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from api.schemas.base import Public


class UsagePublic(Public):
    """One tenant's usage over a window (the cluster's: `tenant` is "*")."""

    tenant: str
    worker_seconds: float  # workers held x seconds
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
