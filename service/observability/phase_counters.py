"""`brigade_job_phase_seconds_total{tenant,phase}`: the seconds jobs spent in
each goodput phase (service/observability/goodput.py), as Prometheus counters.

Counted at each scrape, which is when a counter's value is read: the jobs
that may have accrued time since the last scrape (every job not final, and
those changed since) are read from the store, each job's phase intervals are
clipped to the time since this process began counting, and what each phase
grew by since the job was last counted is added to its tenant's counter.
Nothing is read while nobody scrapes.

What is kept in memory, per job, is the seconds of each phase counted so
far. Attribution can move time between phases after the fact (a fault turns
the steps since the last checkpoint from `training` into `lost`); a counter
never goes down, so a phase that shrinks keeps what it had counted and is
counted again only once it grows past it. The counters are job-seconds (a
4-worker job training 10 s adds 10), summed over each tenant's jobs; `GET
/v1/usage` gives worker-seconds.

Like every counter of the process, these start from 0 when the control plane
starts (Prometheus' `rate` and `increase` read a reset as one): the time jobs
spent before it began is not counted, so a job running across a restart adds
only its time after it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from service.observability.goodput import phase_intervals
from service.observability.usage import phase_rows
from service.states import NOT_FINAL
from service.store.models import utcnow

logger = logging.getLogger(__name__)


class PhaseTally:
    """Phase seconds counted per tenant, from each job's intervals since
    `began` (epoch seconds); pure."""

    def __init__(self, began: float):
        self.began = began
        self.totals: dict[tuple[str, str], float] = {}  # (tenant, phase) -> seconds
        self._counted: dict[str, dict[str, float]] = {}  # job id -> phase -> seconds counted

    def count(self, job_id: str, tenant: str, spans: Iterable[tuple[float, float, str]]) -> None:
        """Add what the job's phases grew by since it was last counted."""
        seconds: dict[str, float] = {}
        for start, end, phase in spans:
            if end > (start := max(start, self.began)):
                seconds[phase] = seconds.get(phase, 0.0) + end - start
        counted = self._counted.setdefault(job_id, {})
        for phase, value in seconds.items():
            more = value - counted.get(phase, 0.0)
            if more > 0:
                self.totals[(tenant, phase)] = self.totals.get((tenant, phase), 0.0) + more
                counted[phase] = value

    def forget(self, job_id: str) -> None:
        self._counted.pop(job_id, None)


class ScrapedJobCounters(Collector):
    """Counters of a supervisor's jobs, brought up to date at each scrape:
    each look counts every job that may have accrued since the previous one
    (`count`, the subclass's), and forgets a job once a look has seen it
    final. The subclass gives its `tally` (`totals` by label pair, `forget`),
    its `_family()` and what it counts (`WHAT`, for the log)."""

    WHAT = "the jobs"
    tally: Any  # totals by label pair, forget(job_id)

    def __init__(self, store, now: datetime | None = None):
        self.store = store
        self.began = now or utcnow()
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
                logger.exception("metrics: cannot count %s", self.WHAT)
            family = self._family()
            for labels, value in sorted(self.tally.totals.items()):
                family.add_metric(list(labels), value)
        return [family]

    def update(self, now: datetime) -> None:
        """Count every job that may have accrued since the previous look:
        those not final, and those that ended since (the first look that sees
        one final counts its last stretch). One that ended before the
        previous look was seen final by it, or ended before this process
        began counting, and is left alone."""
        jobs = [job for job in self.store.jobs_changed_since(self._looked, NOT_FINAL)
                if job.finished_at is None or job.finished_at >= self._looked]
        if jobs:
            self.count(jobs, self.store.events_of(job.id for job in jobs), now)
        for job in jobs:
            if job.finished_at is not None:
                self._finished[job.id] = job.finished_at
        for job_id, finished in list(self._finished.items()):
            if finished < now:  # the next look leaves it alone: its counts are final
                self.tally.forget(job_id)
                del self._finished[job_id]
        self._looked = now

    def count(self, jobs: list, events: dict, now: datetime) -> None:
        raise NotImplementedError

    @staticmethod
    def _family() -> CounterMetricFamily:
        raise NotImplementedError


class PhaseSecondsCollector(ScrapedJobCounters):
    """The phase seconds of a supervisor's jobs, brought up to date at each scrape."""

    WHAT = "the jobs' phases"

    def __init__(self, store, now: datetime | None = None):
        super().__init__(store, now)
        self.tally = PhaseTally(self.began.timestamp())

    def count(self, jobs: list, events: dict, now: datetime) -> None:
        for job in jobs:
            rows = phase_rows(self.store, job)
            self.tally.count(job.id, job.tenant, phase_intervals(job, events.get(job.id, []), rows, now))

    @staticmethod
    def _family() -> CounterMetricFamily:
        return CounterMetricFamily(
            "brigade_job_phase_seconds", "Seconds jobs spent in each goodput phase, since the "
            "control plane started.", labels=["tenant", "phase"])
