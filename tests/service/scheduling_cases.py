"""Made-up jobs, tenants and clusters for the scheduling policy tests."""

from __future__ import annotations

from itertools import count

from service.scheduling import (
    Capacity,
    Demand,
    QueuedJob,
    Quota,
    Resources,
    RunningJob,
    TenantPolicy,
)

_clock = count()


def demand(workers=1, priority=0, cpu=1.0, gpu=0.0) -> Demand:
    """`workers`: a size, a (min, max) range (every size valid), or a list of valid sizes."""
    if isinstance(workers, int):
        sizes = (workers,)
    elif isinstance(workers, tuple):
        sizes = tuple(range(workers[0], workers[1] + 1))
    else:
        sizes = tuple(workers)
    return Demand(priority, sizes, Resources(cpu, gpu))


def queued(id, tenant="a", workers=1, priority=0, cpu=1.0, gpu=0.0, at=None) -> QueuedJob:
    return QueuedJob(id, tenant, next(_clock) if at is None else at,
                     demand(workers, priority, cpu, gpu))


def running(id, tenant="a", workers=1, priority=0, cpu=1.0, gpu=0.0, steps=0,
            leaving=False) -> RunningJob:
    return RunningJob(id, tenant, workers, demand(workers, priority, cpu, gpu),
                      steps_since_checkpoint=steps, leaving=leaving)


def cluster(cpu, gpu=0.0, running_jobs=()) -> Capacity:
    """A cluster of this size, with what `running_jobs` hold taken from free."""
    total = Resources(cpu, gpu)
    return Capacity(total, total - Resources.total(job.holds for job in running_jobs))


def tenants(*names, weight=1.0, max_priority=1000, **quota) -> dict[str, TenantPolicy]:
    return {name: TenantPolicy(name, Quota(**quota), max_priority, weight) for name in names}
