"""`brigade_tenant_cost_total{tenant,flavor}`: what each tenant's jobs cost,
per flavor (jobs of no flavor: `(none)`), as Prometheus counters, in the
flavors' price unit: worker-hours times the price at the time the workers
ran (`service.scheduling.cost`), as `GET /v1/usage` gives it.

Counted at each scrape, as `phase_counters` counts phases: the jobs that may
have held workers since the last scrape (every job not final, and those
changed since) are read, each job's cost since this process began counting
is worked out, and what it grew by since the job was last counted is added
to its tenant's and flavor's counter. A cost only grows with time (a price
change counts from then on), so nothing is lost or counted twice. Like every
counter of the process, these start from 0 when the control plane starts.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from service.observability.usage import job_cost
from service.scheduling.cost import flavor_key
from service.states import NOT_FINAL
from service.store.models import utcnow

logger = logging.getLogger(__name__)


class CostTally:
    """Cost counted per (tenant, flavor), from each job's cost since the
    process began counting; pure."""

    def __init__(self) -> None:
        self.totals: dict[tuple[str, str], float] = {}  # (tenant, flavor) -> cost
        self._counted: dict[str, float] = {}  # job id -> its cost counted so far

    def count(self, job_id: str, tenant: str, flavor: str | None, cost: float) -> None:
        """The job's cost so far is `cost`: add what it grew by."""
        more = cost - self._counted.get(job_id, 0.0)
        if more > 0:
            key = (tenant, flavor_key(flavor))
            self.totals[key] = self.totals.get(key, 0.0) + more
            self._counted[job_id] = cost

    def forget(self, job_id: str) -> None:
        self._counted.pop(job_id, None)


class CostCollector(Collector):
    """The counters of a supervisor's jobs, brought up to date at each scrape."""

    def __init__(self, store, now: datetime | None = None):
        self.store = store
        self.began = now or utcnow()
        self.tally = CostTally()
        self._looked = self.began  # the previous scrape's start
        self._finished: dict[str, datetime] = {}  # job id -> finished_at, while it may be read again
        self._lock = threading.Lock()  # two scrapes at once count once

    def describe(self):
        return [self._family()]

    def collect(self):
        with self._lock:
            try:
                self.update(utcnow())
            except Exception:  # the store is gone: say so in the log, keep what was counted
                logger.exception("metrics: cannot count the tenants' cost")
            family = self._family()
            for (tenant, flavor), cost in sorted(self.tally.totals.items()):
                family.add_metric([tenant, flavor], cost)
        return [family]

    def update(self, now: datetime) -> None:
        """Count every job that may have held workers since the previous look
        (as `PhaseSecondsCollector.update` picks them)."""
        jobs = [job for job in self.store.jobs_changed_since(self._looked, NOT_FINAL)
                if job.finished_at is None or job.finished_at >= self._looked]
        if jobs:
            events = self.store.events_of(job.id for job in jobs)
            prices = self.store.flavors.price_history()
            for job in jobs:
                cost = job_cost(job, events.get(job.id, []), self.began, now, prices)
                self.tally.count(job.id, job.tenant, job.spec.resources_per_worker.flavor, cost)
                if job.finished_at is not None:
                    self._finished[job.id] = job.finished_at
        for job_id, finished in list(self._finished.items()):
            if finished < now:  # the next look leaves it alone: its cost is final
                self.tally.forget(job_id)
                del self._finished[job_id]
        self._looked = now

    @staticmethod
    def _family() -> CounterMetricFamily:
        return CounterMetricFamily(
            "brigade_tenant_cost", "What each tenant's jobs cost per flavor (worker-hours x the "
            "flavor's price at the time), since the control plane started.",
            labels=["tenant", "flavor"])
