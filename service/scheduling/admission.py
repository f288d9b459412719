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
   its own tenant's bigger, older or more important one.
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


@dataclass(frozen=True)
class AdmissionDecision:
    start: list[tuple[str, int]]  # (job id, world size), in the order decided
    waiting: dict[str, str]  # job id -> why it does not start now
    needs_room: list[str] = field(default_factory=list)  # waits preemption may cure, in order
    free_after: Resources = Resources()  # the free capacity once `start` holds its workers


class Scheduler:
    def __init__(self, horizon_s: float = 60.0):
        if not horizon_s > 0:
            raise ValueError(f"horizon_s must be > 0, not {horizon_s}")
        self.horizon_s = horizon_s  # see `fair_share`: what a share held now counts for

    def admit(self, queued: Sequence[QueuedJob], running: Sequence[RunningJob],
              tenants: Mapping[str, TenantPolicy], capacity: Capacity,
              attained: Mapping[str, float] | None = None) -> AdmissionDecision:
        """`attained`: each tenant's recent dominant resource-seconds
        (`fair_share.attained_service`); None: fair share on current shares only."""
        return _Pass(running, tenants, capacity, attained or {}, self.horizon_s).run(queued)


class _Pass:
    """One admission pass: the running totals it keeps as it decides."""

    def __init__(self, running: Sequence[RunningJob], tenants: Mapping[str, TenantPolicy],
                 capacity: Capacity, attained: Mapping[str, float], horizon_s: float):
        self.tenants, self.total = tenants, capacity.total
        self.attained, self.horizon_s = attained, horizon_s
        self.usage = defaultdict(TenantUsage, usage_by_tenant(running))
        self.free, self.reserved = capacity.free, Resources()
        self.first_reserver: str | None = None
        self.reservers = 0
        self.held_back: dict[str, tuple[str, str]] = {}  # tenant -> (its blocking job, why)
        self.start: list[tuple[str, int]] = []
        self.waiting: dict[str, str] = {}
        self.needs_room: list[str] = []
        self.capacity_wait_seen = False

    def run(self, queued: Sequence[QueuedJob]) -> AdmissionDecision:
        levels: defaultdict[int, defaultdict[str, list[QueuedJob]]] = defaultdict(
            lambda: defaultdict(list))
        for job in queued:
            tenant = self.tenants.get(job.tenant)
            if tenant is None:
                self.waiting[job.id] = f"tenant {job.tenant} is not known"
                continue
            levels[effective_priority(job.demand.priority, tenant)][job.tenant].append(job)
        for priority in sorted(levels, reverse=True):
            self._level(levels[priority])
        return AdmissionDecision(self.start, self.waiting, self.needs_room, self.free)

    def _level(self, by_tenant: Mapping[str, list[QueuedJob]]) -> None:
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

    def _turn(self, name: str, head: QueuedJob) -> tuple:
        share = dominant_share(self.usage[name].held, self.total)
        key = (self.attained.get(name, 0.0) + self.horizon_s * share) / self.tenants[name].weight
        return key, head.created_at, head.id, name

    def _try(self, job: QueuedJob) -> bool:
        """Start the job if it fits; else record why it waits. True if it starts."""
        tenant, demand = self.tenants[job.tenant], job.demand
        why = never_runs(demand, tenant, self.total)
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
        available = (self.free - self.reserved).at_least_zero()
        sizes = demand.world_sizes
        fitting = bisect_right(sizes, min(by_quota, capacity_limit(demand.per_worker, available)))
        if fitting == 0:
            self._wait(job, self._short_of(demand, sizes[0], available))
            self.reserved = self.reserved + _clip(demand.at(sizes[0]), available)
            self.first_reserver = self.first_reserver or job.id
            self.reservers += 1
            if not self.capacity_wait_seen:
                self.needs_room.append(job.id)
                self.capacity_wait_seen = True
            return False
        workers = sizes[fitting - 1]
        self.start.append((job.id, workers))
        self.free = self.free - demand.at(workers)
        usage.add(workers, demand.at(workers))
        return True

    def _short_of(self, demand: Demand, workers: int, available: Resources) -> str:
        for (name, per), (_, have), (_, held) in zip(
                demand.per_worker.items(), available.items(), self.reserved.items(), strict=True):
            if per > 0 and capacity_limit(Resources(**{name: per}), available) < workers:
                why = (f"capacity: needs {per * workers:g} {name} for {workers} workers, "
                       f"{have:g} free")
                if held > EPS:
                    others = " and others" if self.reservers > 1 else ""
                    why += (f" ({held:g} more held for job {self.first_reserver}{others} "
                            "waiting ahead)")
                return why
        return f"capacity: {workers} workers do not fit in {available}"

    def _wait(self, job: QueuedJob, why: str) -> None:
        self.waiting[job.id] = why
        self.held_back[job.tenant] = (job.id, why)

    def _wait_behind(self, tenant: str, queue: deque[QueuedJob]) -> None:
        blocker, why = self.held_back[tenant]
        while queue:
            self.waiting[queue.popleft().id] = (
                f"behind job {blocker} of tenant {tenant}, which goes first: {why}")


def _clip(need: Resources, available: Resources) -> Resources:
    return Resources(min(need.cpu, available.cpu), min(need.gpu, available.gpu))
