"""Admission: which queued jobs start now, at what world size, and why each
of the others waits.

The rule, in the order it is applied:

1. **Strict priority.** Levels are served highest first; a job's priority is
   capped at its tenant's `max_priority`.
2. **Weighted fair share within a level.** The next job comes from the tenant
   with the lowest dominant share (DRF): the largest fraction of the
   cluster's cpu or gpu its running jobs hold, divided by its weight (plus,
   where given, what it attained lately: see `fair_share`); a tie goes to
   the tenant whose next job was queued first. Each start raises the
   tenant's share before the next pick, so one pass fills the cluster in
   proportion to the weights.
3. **FCFS within a tenant.** A tenant's jobs go in (priority, created_at)
   order, and a job that cannot start holds back every later job of its
   tenant in this pass ("behind job ..."), so a small job never slips past
   its own tenant's bigger, older or more important one. Jobs of another
   flavor are not held back: they wait for other nodes (each flavor, and
   no flavor, is a queue of its own for each tenant).
4. **Gang admission, elastic sizing.** A job starts with all its ranks or not
   at all, at the largest of its valid world sizes that fits both the free
   capacity and its tenant's running quota (workers, gpus, running jobs).
5. **Reservation, no backfill.** A job that waits for capacity holds back what
   free capacity it needs at its smallest size: jobs considered after it
   (lower priority, or later in the fair-share order) may use only what is
   left. So a big job is not starved by a stream of small ones; the capacity
   it still lacks comes from jobs that end or are preempted for it. A job
   that waits for its tenant's quota holds back nothing (its tenant's own
   later jobs wait behind it anyway), and neither does one that could never
   start (a smallest size over the cluster's total or the tenant's quota).
6. **Flavors.** A job of a flavor (`Demand.flavor`) fits only what its
   flavor's nodes have free (`Capacity.flavors`), within what the whole
   cluster has free; what it holds back, it holds back there. Its tenant's
   quota on that flavor (`Quota.flavors`) binds beside the totals, and fair
   share orders it by its tenant's share of that flavor's nodes (and service
   there, `attained_by_flavor`): a tenant idle on one flavor is not behind on
   another. A job without a flavor fits the whole cluster, as before.

Every waiting job gets a reason a person can read. `needs_room` lists, in
order, the waits that preemption may cure: the quota waits met before the
first capacity wait, then that capacity wait. Jobs after it could not use
released capacity before it does, so preempting for them would only churn.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from service.scheduling.fair_share import dominant_share
from service.scheduling.views import (
    EPS,
    Capacity,
    Demand,
    QueuedJob,
    Resources,
    RunningJob,
    TenantPolicy,
    TenantUsage,
    capacity_limit,
    effective_priority,
    never_runs,
    quota_limit,
    usage_by_tenant,
)

_Queue = tuple[str, str | None]  # a tenant's jobs of one flavor (None: of none), FCFS


@dataclass(frozen=True)
class AdmissionDecision:
    start: list[tuple[str, int]]  # (job id, world size), in the order decided
    waiting: dict[str, str]  # job id -> why it does not start now
    needs_room: list[str] = field(default_factory=list)  # waits preemption may cure, in order
    free_after: Resources = Resources()  # the free capacity once `start` holds its workers
    flavors_free_after: dict[str, Resources] = field(default_factory=dict)  # ... of each flavor

    def capacity_after(self, capacity: Capacity) -> Capacity:
        """`capacity` with the free capacity once `start` holds its workers."""
        return Capacity(capacity.total, self.free_after, {
            name: Capacity(of.total, self.flavors_free_after.get(name, of.free))
            for name, of in capacity.flavors.items()})


class Scheduler:
    def __init__(self, horizon_s: float = 60.0):
        if not horizon_s > 0:
            raise ValueError(f"horizon_s must be > 0, not {horizon_s}")
        self.horizon_s = horizon_s  # see `fair_share`: what a share held now counts for

    def admit(self, queued: Sequence[QueuedJob], running: Sequence[RunningJob],
              tenants: Mapping[str, TenantPolicy], capacity: Capacity,
              attained: Mapping[str, float] | None = None,
              attained_by_flavor: Mapping[str, Mapping[str, float]] | None = None,
              ) -> AdmissionDecision:
        """`attained`: each tenant's recent dominant resource-seconds
        (`fair_share.attained_service`); None: fair share on current shares only.
        `attained_by_flavor`: the same on each flavor's nodes (flavor -> tenant ->
        service), for the jobs of that flavor."""
        return _Pass(running, tenants, capacity, attained or {}, attained_by_flavor or {},
                     self.horizon_s).run(queued)


class _Pass:
    """One admission pass: the running totals it keeps as it decides."""

    def __init__(self, running: Sequence[RunningJob], tenants: Mapping[str, TenantPolicy],
                 capacity: Capacity, attained: Mapping[str, float],
                 attained_by_flavor: Mapping[str, Mapping[str, float]], horizon_s: float):
        self.tenants, self.capacity, self.total = tenants, capacity, capacity.total
        self.attained, self.horizon_s = attained, horizon_s
        self.attained_by_flavor = attained_by_flavor
        self.usage = defaultdict(TenantUsage, usage_by_tenant(running))
        self.free, self.reserved = capacity.free, Resources()
        # each flavor's nodes: what is free there, and what waiting jobs of it hold back
        self.flavor_free = {name: of.free for name, of in capacity.flavors.items()}
        self.flavor_reserved: defaultdict[str, Resources] = defaultdict(Resources)
        self.first_reserver: str | None = None
        self.reservers = 0
        # (tenant, flavor) -> (its blocking job, why)
        self.held_back: dict[_Queue, tuple[str, str]] = {}
        self.start: list[tuple[str, int]] = []
        self.waiting: dict[str, str] = {}
        self.needs_room: list[str] = []
        self.capacity_wait_seen = False

    def run(self, queued: Sequence[QueuedJob]) -> AdmissionDecision:
        levels: defaultdict[int, defaultdict[_Queue, list[QueuedJob]]] = defaultdict(
            lambda: defaultdict(list))
        for job in queued:
            tenant = self.tenants.get(job.tenant)
            if tenant is None:
                self.waiting[job.id] = f"tenant {job.tenant} is not known"
                continue
            queue = (job.tenant, job.demand.flavor)
            levels[effective_priority(job.demand.priority, tenant)][queue].append(job)
        for priority in sorted(levels, reverse=True):
            self._level(levels[priority])
        return AdmissionDecision(self.start, self.waiting, self.needs_room, self.free,
                                 dict(self.flavor_free))

    def _level(self, by_tenant: Mapping[_Queue, list[QueuedJob]]) -> None:
        queues, heap = {}, []
        for name, jobs in by_tenant.items():
            jobs.sort(key=lambda j: (j.created_at, j.id))
            queues[name] = deque(jobs)
            if name in self.held_back:
                self._wait_behind(name, queues[name])
            else:
                heap.append(self._turn(name, jobs[0]))
        heapq.heapify(heap)
        while heap:
            *_, name = heapq.heappop(heap)
            queue = queues[name]
            job = queue.popleft()
            if not self._try(job) and name in self.held_back:
                self._wait_behind(name, queue)
            elif queue:
                heapq.heappush(heap, self._turn(name, queue[0]))

    def _turn(self, queue: _Queue, head: QueuedJob) -> tuple:
        """The tenant's place in fair share for its next job: its share of
        what that job may run on (its flavor's nodes, or the cluster)."""
        name, flavor = queue
        share = dominant_share(self.usage[name].of(flavor).held, self.capacity.of(flavor).total)
        attained = self.attained if flavor is None else self.attained_by_flavor.get(flavor, {})
        key = (attained.get(name, 0.0) + self.horizon_s * share) / self.tenants[name].weight
        return key, head.created_at, head.id, queue

    def _available(self, flavor: str | None) -> Resources:
        """What a job of `flavor` may take now: the cluster's free capacity
        not held back, and of that, its flavor's nodes' only."""
        available = (self.free - self.reserved).at_least_zero()
        if flavor is None:
            return available
        there = self.flavor_free.get(flavor, Resources()) - self.flavor_reserved[flavor]
        return available.least(there.at_least_zero())

    def _try(self, job: QueuedJob) -> bool:
        """Start the job if it fits; else record why it waits. True if it starts."""
        tenant, demand = self.tenants[job.tenant], job.demand
        why = never_runs(demand, tenant, self.capacity.of(demand.flavor).total)
        if why:
            self.waiting[job.id] = why
            return False
        usage = self.usage[job.tenant]
        by_quota, why = quota_limit(demand, tenant, usage)
        if why:
            self._wait(job, why)
            if not self.capacity_wait_seen:
                self.needs_room.append(job.id)
            return False
        available = self._available(demand.flavor)
        sizes = demand.world_sizes
        fitting = bisect_right(sizes, min(by_quota, capacity_limit(demand.per_worker, available)))
        if fitting == 0:
            self._wait(job, self._short_of(demand, sizes[0], available))
            held_back = _clip(demand.at(sizes[0]), available)
            self.reserved = self.reserved + held_back
            if demand.flavor is not None:
                self.flavor_reserved[demand.flavor] += held_back
            self.first_reserver = self.first_reserver or job.id
            self.reservers += 1
            if not self.capacity_wait_seen:
                self.needs_room.append(job.id)
                self.capacity_wait_seen = True
            return False
        workers = sizes[fitting - 1]
        self.start.append((job.id, workers))
        self.free = self.free - demand.at(workers)
        if demand.flavor is not None:
            self.flavor_free[demand.flavor] = self.flavor_free[demand.flavor] - demand.at(workers)
        usage.add(workers, demand.at(workers), flavor=demand.flavor)
        return True

    def _short_of(self, demand: Demand, workers: int, available: Resources) -> str:
        for (name, per), (_, have), (_, held) in zip(
                demand.per_worker.items(), available.items(), self.reserved.items(), strict=True):
            if per > 0 and capacity_limit(Resources(**{name: per}), available) < workers:
                of = "" if demand.flavor is None else f" of flavor {demand.flavor}"
                why = (f"capacity: needs {per * workers:g} {name} for {workers} workers{of}, "
                       f"{have:g} free")
                if held > EPS:
                    others = " and others" if self.reservers > 1 else ""
                    why += (f" ({held:g} more held for job {self.first_reserver}{others} "
                            "waiting ahead)")
                return why
        return f"capacity: {workers} workers do not fit in {available}"

    def _wait(self, job: QueuedJob, why: str) -> None:
        self.waiting[job.id] = why
        self.held_back[(job.tenant, job.demand.flavor)] = (job.id, why)

    def _wait_behind(self, key: _Queue, queue: deque[QueuedJob]) -> None:
        blocker, why = self.held_back[key]
        tenant = key[0]
        while queue:
            self.waiting[queue.popleft().id] = (
                f"behind job {blocker} of tenant {tenant}, which goes first: {why}")


def _clip(need: Resources, available: Resources) -> Resources:
    return Resources(min(need.cpu, available.cpu), min(need.gpu, available.gpu))
