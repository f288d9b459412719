"""What each tenant used over a window, from its jobs' events: worker-, cpu-
and gpu-seconds held, its jobs that finished (by final state) and the
preemptions its jobs suffered.

A job holds workers while it is in an active state (STARTING .. CANCELLING)
other than RESTARTING (its group is gone, it waits out its backoff);
each event records the world size the job holds after it (`workers`, since
migration 0003), so a job that restarted smaller is counted at each size for
as long as it held it. An event written before that column existed has no
size: the job's smallest is counted then. Pure: the caller reads the store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from service.states import ACTIVE, JobState
from service.store.records import EventRecord, JobRecord

HOLDING = ACTIVE - {JobState.RESTARTING}


@dataclass
class TenantUsage:
    tenant: str
    worker_seconds: float = 0.0
    cpu_seconds: float = 0.0
    gpu_seconds: float = 0.0
    jobs: dict[str, int] = field(default_factory=dict)  # final state -> jobs that ended in the window
    preemptions: int = 0  # times its jobs were preempted within the window


def usage_by_tenant(
    jobs: Iterable[JobRecord], events: Mapping[str, list[EventRecord]],
    since: datetime, now: datetime, tenants: Iterable[str] = (),
) -> dict[str, TenantUsage]:
    """Each tenant's usage within [since, now]; `tenants` are listed even if
    they used nothing."""
    found = {name: TenantUsage(name) for name in tenants}
    for job in jobs:
        usage = found.setdefault(job.tenant, TenantUsage(job.tenant))
        worker_s = held_worker_seconds(events.get(job.id, []), since, now,
                                       fallback=job.spec.min_workers)
        per_worker = job.spec.resources_per_worker
        usage.worker_seconds += worker_s
        usage.cpu_seconds += worker_s * per_worker.cpu
        usage.gpu_seconds += worker_s * per_worker.gpu
        usage.preemptions += sum(
            1 for e in events.get(job.id, [])
            if e.to_state is JobState.PREEMPTING and e.from_state is not JobState.PREEMPTING
            and since <= e.time <= now)
        if job.state.is_terminal and job.finished_at is not None and since <= job.finished_at <= now:
            usage.jobs[job.state.value] = usage.jobs.get(job.state.value, 0) + 1
    return dict(sorted(found.items()))


def held_worker_seconds(events: Iterable[EventRecord], since: datetime, now: datetime,
                        fallback: int) -> float:
    """Worker-seconds the job held within [since, now], from its events in order."""
    total = 0.0
    opened: tuple[datetime, int] | None = None  # (since when, how many workers)
    for event in events:
        if event.from_state is not None and event.from_state == event.to_state:
            continue  # a note: no change of what it holds
        if opened is not None:
            total += _overlap(opened[0], event.time, since, now) * opened[1]
            opened = None
        if event.to_state in HOLDING:
            opened = (event.time, event.workers or fallback)
    if opened is not None:
        total += _overlap(opened[0], now, since, now) * opened[1]
    return total


def _overlap(start: datetime, end: datetime, since: datetime, now: datetime) -> float:
    return max(0.0, (min(end, now) - max(start, since)).total_seconds())
