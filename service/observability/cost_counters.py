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
from datetime import datetime

from prometheus_client.core import CounterMetricFamily

from service.observability.phase_counters import ScrapedJobCounters
from service.observability.usage import job_cost
from service.scheduling.cost import flavor_key

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


class CostCollector(ScrapedJobCounters):
    """The cost of a supervisor's jobs, brought up to date at each scrape."""

    WHAT = "the tenants' cost"

    def __init__(self, store, now: datetime | None = None):
        super().__init__(store, now)
        self.tally = CostTally()

    def count(self, jobs: list, events: dict, now: datetime) -> None:
        prices = self.store.flavors.price_history()
        for job in jobs:
            cost = job_cost(job, events.get(job.id, []), self.began, now, prices)
            self.tally.count(job.id, job.tenant, job.spec.resources_per_worker.flavor, cost)

    @staticmethod
    def _family() -> CounterMetricFamily:
        return CounterMetricFamily(
            "brigade_tenant_cost", "What each tenant's jobs cost per flavor (worker-hours x the "
            "flavor's price at the time), since the control plane started.",
            labels=["tenant", "flavor"])
