"""Preemption: which running jobs to checkpoint and stop so that a waiting
job of higher priority can start.

The rule:

- Only running jobs of strictly lower (effective) priority may be victims;
  never one of equal or higher priority, and never one already leaving
  (preempting, suspending, cancelling). What leaving jobs hold counts as room
  already being made: if that is enough, nobody more is preempted (so a
  pass that runs again during the grace period does not preempt twice).
- The pending job needs room for its smallest world size: free capacity,
  and, where its own tenant's quota is what stops it, quota freed by its
  tenant's own lower-priority jobs.
- If preempting every lower-priority job would still not make room, nobody
  is preempted.
- Otherwise the cheapest set whose release makes room, compared in order:
  the lowest highest-victim priority (a job at priority 1 is touched only if
  all those below 1 are not enough), then the fewest victims, then the
  fewest steps lost (steps since each victim's latest checkpoint), then the
  victims' ids. The search is exact while the subsets to try are few
  (`max_subsets`); past that, greedy: the largest releases first, then any
  victim not needed dropped again.
- Flavors: a pending job of a flavor needs room on its flavor's nodes, so
  only victims that hold some of them make it: the jobs of that flavor, and
  the jobs without a flavor whose ranks run there (`RunningJob.on_flavors`;
  releasing one frees what its ranks there hold). A victim on another
  flavor's nodes alone frees nothing for it. Its tenant's quota on that
  flavor counts (its jobs of that flavor); a pending job without a flavor
  is made room for by any victim.
- An elastic victim is not shrunk in place: shrinking is a checkpoint and a
  restart all the same, so it is preempted whole and comes back from the
  queue at whatever size then fits within its min..max.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from service.scheduling.views import (
    Capacity,
    QueuedJob,
    Resources,
    RunningJob,
    TenantPolicy,
    TenantUsage,
    capacity_limit,
    effective_priority,
    never_runs,
    quota_limit,
)


@dataclass(frozen=True)
class PreemptionDecision:
    victims: list[str]  # job ids to preempt; empty: none (see reason)
    reason: str


class PreemptionPolicy:
    def __init__(self, max_subsets: int = 20_000):
        self.max_subsets = max_subsets  # exact search up to this many subsets, then greedy

    def select_victims(
        self, pending: QueuedJob, running: Sequence[RunningJob], capacity: Capacity,
        tenants: Mapping[str, TenantPolicy],
    ) -> PreemptionDecision:
        tenant = tenants.get(pending.tenant)
        if tenant is None:
            return PreemptionDecision([], f"tenant {pending.tenant} is not known")
        why = never_runs(pending.demand, tenant, capacity.of(pending.demand.flavor).total)
        if why:
            return PreemptionDecision([], f"preempting cannot help: {why}")
        priority = effective_priority(pending.demand.priority, tenant)
        room = _Room(pending, tenant, running, capacity)
        leaving = [job.id for job in running if job.leaving]
        if room.fits(()):
            return PreemptionDecision([], (
                f"room is already being made: {_ids(leaving)} releasing their workers"
                if leaving else "it fits without preempting anyone"))

        def rank(job: RunningJob) -> int:
            return effective_priority(job.demand.priority, tenants.get(job.tenant))

        candidates = sorted((job for job in running if not job.leaving and rank(job) < priority
                             and room.helps(job)),
                            key=lambda job: (rank(job), job.steps_since_checkpoint, job.id))
        if not room.fits(candidates):
            return PreemptionDecision([], (
                f"even preempting all {len(candidates)} running jobs of lower priority than "
                f"{priority} would not make room for {pending.demand.min_workers} workers"))
        for cutoff in sorted({rank(job) for job in candidates}):
            pool = [job for job in candidates if rank(job) <= cutoff]
            if room.fits(pool):
                break
        victims = self._fewest(pool, room)
        lost = sum(job.steps_since_checkpoint for job in victims)
        return PreemptionDecision([job.id for job in victims], (
            f"job {pending.id} of tenant {pending.tenant} (priority {priority}) needs room for "
            f"{pending.demand.min_workers} workers: preempting {_ids([j.id for j in victims])} "
            f"(priority {cutoff} at most), losing {lost} steps since their checkpoints"))

    def _fewest(self, pool: list[RunningJob], room: _Room) -> list[RunningJob]:
        """The fewest of `pool` that make room, then the fewest steps lost;
        exact while the subsets are few, else greedy."""
        budget = self.max_subsets
        for size in range(1, len(pool) + 1):
            budget -= math.comb(len(pool), size)
            if budget < 0:
                return _greedy(pool, room)
            fitting = [combo for combo in combinations(pool, size) if room.fits(combo)]
            if fitting:
                return list(min(fitting, key=lambda combo: (
                    sum(job.steps_since_checkpoint for job in combo),
                    sorted(job.id for job in combo))))
        raise AssertionError("the whole pool makes room, so some subset does")


class _Room:
    """Whether the pending job fits once a set of running jobs is released,
    on top of free capacity and what leaving jobs already release."""

    def __init__(self, pending: QueuedJob, tenant: TenantPolicy,
                 running: Sequence[RunningJob], capacity: Capacity):
        self.demand, self.tenant = pending.demand, tenant
        self.flavor = pending.demand.flavor
        leaving = [job for job in running if job.leaving]
        self.free = capacity.free + Resources.total(job.holds for job in leaving)
        # a job of a flavor: its flavor's nodes too, where only that flavor's jobs make room
        self.flavor_free = capacity.of(self.flavor).free + self._on_flavor(leaving)
        self.usage = TenantUsage()
        for job in running:
            if job.tenant == tenant.name and not job.leaving:
                self.usage.add(job.workers, job.holds, flavor=job.demand.flavor)

    def helps(self, job: RunningJob) -> bool:
        """Whether releasing `job` makes room where the pending job may run."""
        return self.flavor is None or job.runs_on(self.flavor)

    def _on_flavor(self, jobs: Sequence[RunningJob]) -> Resources:
        """What `jobs` hold on the pending job's flavor's nodes."""
        flavor = self.flavor
        return Resources() if flavor is None else Resources.total(job.holds_on(flavor)
                                                                  for job in jobs)

    def fits(self, released: Sequence[RunningJob]) -> bool:
        usage = self.usage.copy()
        for job in released:
            if job.tenant == self.tenant.name:
                usage.add(-job.workers, Resources() - job.holds, jobs=-1, flavor=job.demand.flavor)
        by_quota, why = quota_limit(self.demand, self.tenant, usage)
        free = self.free + Resources.total(job.holds for job in released)
        if self.flavor is not None:
            free = free.least(self.flavor_free + self._on_flavor(released))
        return not why and min(by_quota, capacity_limit(self.demand.per_worker, free)) >= \
            self.demand.min_workers


def _greedy(pool: list[RunningJob], room: _Room) -> list[RunningJob]:
    chosen: list[RunningJob] = []
    largest_first = sorted(pool, key=lambda j: (-j.holds.gpu, -j.holds.cpu,
                                                j.steps_since_checkpoint, j.id))
    for job in largest_first:
        chosen.append(job)
        if room.fits(chosen):
            break
    for job in sorted(chosen, key=lambda j: (-j.steps_since_checkpoint, j.id)):
        rest = [other for other in chosen if other is not job]
        if room.fits(rest):
            chosen = rest
    return chosen


def _ids(ids: Sequence[str]) -> str:
    return ("job " if len(ids) == 1 else "jobs ") + ", ".join(ids)
