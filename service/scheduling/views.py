"""What the scheduling policies read: plain frozen values that the supervisor
builds from its job records and the cluster's capacity, and the arithmetic on
them that every policy shares (a tenant's usage, its quota headroom).

Nothing here talks to Ray or the database, so a test builds these by hand.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from service.scheduling.budget import Budget
from workers.cluster.placement import RESOURCE_EPS as EPS
from workers.schema import MAX_PRIORITY


@dataclass(frozen=True)
class Resources:
    """An amount of the two resources Brigade schedules."""

    cpu: float = 0.0
    gpu: float = 0.0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu + other.cpu, self.gpu + other.gpu)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu - other.cpu, self.gpu - other.gpu)

    def times(self, n: float) -> Resources:
        return Resources(self.cpu * n, self.gpu * n)

    def least(self, other: Resources) -> Resources:
        return Resources(min(self.cpu, other.cpu), min(self.gpu, other.gpu))

    def at_least_zero(self) -> Resources:
        return Resources(max(0.0, self.cpu), max(0.0, self.gpu))

    def fits_in(self, other: Resources) -> bool:
        return self.cpu <= other.cpu + EPS and self.gpu <= other.gpu + EPS

    def items(self) -> tuple[tuple[str, float], tuple[str, float]]:
        return (("cpu", self.cpu), ("gpu", self.gpu))

    @staticmethod
    def total(amounts: Iterable[Resources]) -> Resources:
        cpu = gpu = 0.0
        for amount in amounts:
            cpu, gpu = cpu + amount.cpu, gpu + amount.gpu
        return Resources(cpu, gpu)


@dataclass(frozen=True)
class Capacity:
    """The cluster: everything it has, and what no active job holds now; and
    the same of each flavor's nodes (those with all its labels), by name. A
    flavor not there has no live node."""

    total: Resources
    free: Resources
    flavors: Mapping[str, Capacity] = field(default_factory=dict)

    def of(self, flavor: str | None) -> Capacity:
        """What a job of `flavor` may use: the flavor's nodes (none where it
        has none), or the whole cluster for no flavor."""
        if flavor is None:
            return self
        return self.flavors.get(flavor, NO_CAPACITY)


NO_CAPACITY = Capacity(Resources(), Resources())


@dataclass(frozen=True)
class FlavorQuota:
    """A tenant's limits on one flavor's nodes, beside its totals; None is no limit."""

    max_workers: int | None = None
    max_gpus: float | None = None


@dataclass(frozen=True)
class Quota:
    """A tenant's limits; None is no limit. Running limits count every job
    that holds workers (starting, running, or still releasing them).
    `flavors`: limits on the jobs of each flavor, by its name, beside the totals."""

    max_workers: int | None = None
    max_gpus: float | None = None
    max_running_jobs: int | None = None
    max_queued_jobs: int | None = None
    flavors: Mapping[str, FlavorQuota] = field(default_factory=dict)


@dataclass(frozen=True)
class TenantPolicy:
    name: str
    quota: Quota = field(default_factory=Quota)
    max_priority: int = MAX_PRIORITY
    weight: float = 1.0
    budget: Budget | None = None  # the most its jobs may cost a period (None: no limit)

    def __post_init__(self) -> None:
        if not self.weight > 0:
            raise ValueError(f"tenant {self.name}: weight must be > 0, not {self.weight}")


@dataclass(frozen=True)
class Demand:
    """What a job asks for: its priority, the world sizes it may run at (within
    min..max and accepted by the engine), and what one worker needs (on a
    node of `flavor`; None: any node)."""

    priority: int
    world_sizes: tuple[int, ...]  # normalised: distinct, ascending
    per_worker: Resources
    flavor: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "world_sizes", tuple(sorted(set(self.world_sizes))))

    @classmethod
    def from_spec(cls, spec, world_sizes: Iterable[int] | None = None) -> Demand:
        """From a `workers.schema.JobSpec` (read, not imported); `world_sizes`
        overrides the spec's (e.g. a resume at a requested size)."""
        res = spec.resources_per_worker
        sizes = spec.world_sizes() if world_sizes is None else world_sizes
        return cls(spec.priority, tuple(sizes), Resources(res.cpu, res.gpu), res.flavor)

    @property
    def min_workers(self) -> int:
        return self.world_sizes[0]

    @property
    def max_workers(self) -> int:
        return self.world_sizes[-1]

    def at(self, workers: int) -> Resources:
        return self.per_worker.times(workers)

    def sized(self, world_sizes: Iterable[int], priority: int | None = None) -> Demand:
        """The same demand at these world sizes (and priority)."""
        return Demand(self.priority if priority is None else priority, tuple(world_sizes),
                      self.per_worker, self.flavor)


@dataclass(frozen=True)
class QueuedJob:
    id: str
    tenant: str
    created_at: datetime | float  # FCFS order within a tenant; a requeued job keeps its place
    demand: Demand


@dataclass(frozen=True)
class RunningJob:
    """A job that holds workers. `leaving`: it is already giving them back
    (preempting, suspending, cancelling); it is never picked as a victim and
    what it holds counts as room being made."""

    id: str
    tenant: str
    workers: int
    demand: Demand
    steps_since_checkpoint: int = 0  # what preempting it now would throw away
    leaving: bool = False
    # a job of no flavor: how many of its ranks run on each flavor's nodes (by the
    # flavor's name; where they run, as the leader's runner knows it)
    on_flavors: Mapping[str, int] = field(default_factory=dict)

    @property
    def holds(self) -> Resources:
        return self.demand.at(self.workers)

    def holds_on(self, flavor: str) -> Resources:
        """What it holds on `flavor`'s nodes: all of it for a job of that
        flavor, none for a job of another; for a job of no flavor, what its
        ranks there hold (`on_flavors`)."""
        if self.demand.flavor is not None:
            return self.holds if self.demand.flavor == flavor else Resources()
        return self.demand.at(min(self.on_flavors.get(flavor, 0), self.workers))

    def runs_on(self, flavor: str) -> bool:
        """Whether any of its ranks hold a share of `flavor`'s nodes."""
        return self.demand.flavor == flavor or (
            self.demand.flavor is None and self.on_flavors.get(flavor, 0) > 0)


def capacity_now(total: Resources, running: Iterable[RunningJob],
                 flavor_totals: Mapping[str, Resources] | None = None,
                 flavor_free: Mapping[str, Resources] | None = None) -> Capacity:
    """The cluster's capacity (its `total`, and each flavor's nodes') with
    what the `running` jobs hold taken from free: on a flavor's nodes, what
    its own jobs hold and the ranks of jobs without a flavor that run there
    (`RunningJob.holds_on`), and no more than `flavor_free` (what the
    cluster says is free there now)."""
    running = list(running)
    free = (total - Resources.total(job.holds for job in running)).at_least_zero()
    flavors = {}
    for name, of in (flavor_totals or {}).items():
        held = Resources.total(job.holds_on(name) for job in running)
        there = (of - held).at_least_zero()
        if flavor_free is not None and name in flavor_free:
            there = there.least(flavor_free[name].at_least_zero())
        flavors[name] = Capacity(of, there)
    return Capacity(total, free, flavors)


def effective_priority(priority: int, tenant: TenantPolicy | None) -> int:
    """A job's priority, never above what its tenant may use now (a tenant's
    max_priority lowered after submit caps the jobs it already has)."""
    return priority if tenant is None else min(priority, tenant.max_priority)


@dataclass
class TenantUsage:
    """What one tenant's jobs hold, in all and on each flavor's nodes (its
    jobs of that flavor); mutable, as a scheduling pass adds to it."""

    workers: int = 0
    jobs: int = 0
    held: Resources = Resources()
    flavors: dict[str, TenantUsage] = field(default_factory=dict)

    def add(self, workers: int, held: Resources, jobs: int = 1,
            flavor: str | None = None) -> None:
        self.workers += workers
        self.jobs += jobs
        self.held = self.held + held
        if flavor is not None:
            self.flavors.setdefault(flavor, TenantUsage()).add(workers, held, jobs)

    def of(self, flavor: str | None) -> TenantUsage:
        """What its jobs of `flavor` hold (None: all of them)."""
        return self if flavor is None else self.flavors.get(flavor, TenantUsage())

    def copy(self) -> TenantUsage:
        return TenantUsage(self.workers, self.jobs, self.held,
                           {name: usage.copy() for name, usage in self.flavors.items()})


def usage_by_tenant(running: Iterable[RunningJob]) -> dict[str, TenantUsage]:
    usage: dict[str, TenantUsage] = {}
    for job in running:
        usage.setdefault(job.tenant, TenantUsage()).add(job.workers, job.holds,
                                                        flavor=job.demand.flavor)
    return usage


def quota_limit(demand: Demand, tenant: TenantPolicy, usage: TenantUsage) -> tuple[float, str]:
    """The most workers the tenant's running quota leaves for this job, and,
    where that is below the job's smallest size, why (else "")."""
    quota, need = tenant.quota, demand.min_workers
    if quota.max_running_jobs is not None and usage.jobs >= quota.max_running_jobs:
        return 0, (f"quota: tenant {tenant.name} runs {usage.jobs}/{quota.max_running_jobs} jobs")
    limit = math.inf
    if quota.max_workers is not None:
        limit = quota.max_workers - usage.workers
        if limit < need:
            return max(0, limit), (
                f"quota: tenant {tenant.name} runs {usage.workers}/{quota.max_workers} workers; "
                f"the job needs at least {need}")
    gpu = demand.per_worker.gpu
    if quota.max_gpus is not None and gpu > 0:
        by_gpus = math.floor((quota.max_gpus - usage.held.gpu + EPS) / gpu)
        limit = min(limit, by_gpus)
        if by_gpus < need:
            return max(0, by_gpus), (
                f"quota: tenant {tenant.name} uses {usage.held.gpu:g}/{quota.max_gpus:g} gpus; "
                f"the job needs at least {demand.at(need).gpu:g}")
    if demand.flavor is not None and demand.flavor in quota.flavors:
        return _flavor_quota_limit(demand, tenant, usage.of(demand.flavor), limit)
    return limit, ""


def _flavor_quota_limit(demand: Demand, tenant: TenantPolicy, used: TenantUsage,
                        limit: float) -> tuple[float, str]:
    """`quota_limit` on the tenant's limits for the job's flavor."""
    flavor, need = demand.flavor, demand.min_workers
    assert flavor is not None
    quota = tenant.quota.flavors[flavor]
    if quota.max_workers is not None:
        limit = min(limit, quota.max_workers - used.workers)
        if limit < need:
            return max(0, limit), (
                f"quota: tenant {tenant.name} runs {used.workers}/{quota.max_workers} workers of "
                f"flavor {flavor}; the job needs at least {need}")
    gpu = demand.per_worker.gpu
    if quota.max_gpus is not None and gpu > 0:
        by_gpus = math.floor((quota.max_gpus - used.held.gpu + EPS) / gpu)
        limit = min(limit, by_gpus)
        if by_gpus < need:
            return max(0, by_gpus), (
                f"quota: tenant {tenant.name} uses {used.held.gpu:g}/{quota.max_gpus:g} gpus of "
                f"flavor {flavor}; the job needs at least {demand.at(need).gpu:g}")
    return limit, ""


def capacity_limit(per_worker: Resources, available: Resources) -> float:
    """The most workers of this size that fit in `available`."""
    limit = math.inf
    for (_, per), (_, have) in zip(per_worker.items(), available.items(), strict=True):
        if per > 0:
            limit = min(limit, math.floor((max(0.0, have) + EPS) / per))
    return limit


def never_runs(demand: Demand, tenant: TenantPolicy, total: Resources | None = None) -> str:
    """Why this job could never start, whatever else ends ("" if it could):
    no valid size, a smallest size over the tenant's quota, or (given the
    cluster's `total`) over everything the cluster has."""
    if not demand.world_sizes:
        return "no world size in min..max is valid for this job"
    smallest = demand.min_workers
    need, quota = demand.at(smallest), tenant.quota
    if total is not None:
        where = "the cluster has" if demand.flavor is None else \
            f"the nodes of flavor {demand.flavor} have"
        for (name, needed), (_, have) in zip(need.items(), total.items(), strict=True):
            if needed > have + EPS:
                return (f"capacity: needs {needed:g} {name} at its smallest size ({smallest} "
                        f"workers); {where} {have:g} {name} in total")
    if quota.max_running_jobs == 0:
        return f"quota: tenant {tenant.name} may run no jobs"
    if quota.max_workers is not None and smallest > quota.max_workers:
        return (f"quota: needs {smallest} workers at its smallest size; tenant {tenant.name} "
                f"may run {quota.max_workers}")
    if quota.max_gpus is not None and need.gpu > quota.max_gpus + EPS:
        return (f"quota: needs {need.gpu:g} gpus at its smallest size; tenant {tenant.name} "
                f"may use {quota.max_gpus:g}")
    return never_fits_flavor_quota(demand, tenant)


def never_fits_flavor_quota(demand: Demand, tenant: TenantPolicy) -> str:
    """Why the job's smallest size is over its tenant's quota on its flavor ("" if it is not)."""
    flavor = demand.flavor
    if flavor is None or flavor not in tenant.quota.flavors or not demand.world_sizes:
        return ""
    quota, smallest = tenant.quota.flavors[flavor], demand.min_workers
    if quota.max_workers is not None and smallest > quota.max_workers:
        return (f"quota: needs {smallest} workers at its smallest size; tenant {tenant.name} "
                f"may run {quota.max_workers} of flavor {flavor}")
    gpu = demand.at(smallest).gpu
    if quota.max_gpus is not None and gpu > quota.max_gpus + EPS:
        return (f"quota: needs {gpu:g} gpus at its smallest size; tenant {tenant.name} may use "
                f"{quota.max_gpus:g} of flavor {flavor}")
    return ""
