"""The scheduling pass's gate for tenants over budget: which queued jobs it
may offer the scheduler.

For each tenant with a budget and a queued job, what its jobs cost within
the current period (`service.scheduling.budget`: a UTC day, ISO week or
calendar month, of the pass's clock) is read from their events and the
flavors' price history, and the policy says whether its queued jobs wait
(their reason "budget 10.00 for the day spent (10.23); ..."). Running jobs
are left alone. A finished job's cost within a period no longer changes, so
it is worked out once per period (`_finished`); only the jobs still holding
workers are priced again each pass. Nothing is read while no tenant with a
budget has a queued job.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from service.observability.usage import job_cost
from service.scheduling.budget import BudgetDecision, BudgetPolicy, period_start
from service.scheduling.cost import PriceHistory
from service.states import ACTIVE

if TYPE_CHECKING:
    from service.scheduling import TenantPolicy
    from service.store import JobRecord, JobStore


class BudgetGate:
    def __init__(self, store: JobStore, policy: BudgetPolicy | None = None):
        self.store, self.policy = store, policy or BudgetPolicy()
        self.waiting: dict[str, str] = {}  # the last pass's: queued job id -> why it waits
        self.decisions: dict[str, BudgetDecision] = {}  # the last pass's, by tenant
        self._finished: dict[tuple[str, datetime], float] = {}  # (job, period start) -> its cost

    def hold(self, queued: list[JobRecord], tenants: Mapping[str, TenantPolicy],
             now: datetime) -> tuple[list[JobRecord], dict[str, str]]:
        """(the queued jobs the scheduler may start, in order; each held-back
        job's waiting reason)."""
        asking = {job.tenant for job in queued}
        budgets = {name: t.budget for name, t in tenants.items()
                   if t.budget is not None and name in asking}
        if not budgets:
            self.waiting, self.decisions = {}, {}
            return queued, {}
        starts = {name: period_start(budget.period, now) for name, budget in budgets.items()}
        spent = self._spent(starts, now)
        self.decisions = {name: self.policy.make_decision(budget, spent.get(name, 0.0), now)
                          for name, budget in budgets.items()}
        ready, waiting = [], {}
        for job in queued:
            decision = self.decisions.get(job.tenant)
            if decision is not None and decision.reason is not None:
                waiting[job.id] = decision.reason
            else:
                ready.append(job)
        self.waiting = waiting
        return ready, waiting

    def _spent(self, starts: Mapping[str, datetime], now: datetime) -> dict[str, float]:
        known = set(starts.values())  # a period gone by: its finished jobs' costs are let go
        self._finished = {key: cost for key, cost in self._finished.items() if key[1] in known}
        return period_costs(self.store, starts, now, self._finished)


def period_costs(store: JobStore, starts: Mapping[str, datetime], now: datetime,
                 finished: dict[tuple[str, datetime], float] | None = None) -> dict[str, float]:
    """What each tenant's jobs cost from its period's start (`starts`) to
    `now`. `finished`: (job, period start) -> cost, read and filled with the
    jobs finished by `now` (their cost in the period no longer changes)."""
    finished = {} if finished is None else finished
    jobs = store.jobs_changed_since(min(starts.values()), ACTIVE, tenants=starts)
    to_price = [job for job in jobs if (job.id, starts[job.tenant]) not in finished]
    events = store.events_of(job.id for job in to_price) if to_price else {}
    prices = store.flavors.price_history() if to_price else PriceHistory()
    spent = dict.fromkeys(starts, 0.0)
    for job in jobs:
        key = (job.id, starts[job.tenant])
        cost = finished.get(key)
        if cost is None:
            cost = job_cost(job, events.get(job.id, []), key[1], now, prices)
            if job.state.is_terminal and job.finished_at is not None and job.finished_at <= now:
                finished[key] = cost
        spent[job.tenant] += cost
    return spent
