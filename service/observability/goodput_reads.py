"""Goodput read from the store for the dashboard's lists and charts: each
of a page of jobs' goodput (the jobs list's column), and the cluster's
goodput over time (the cluster page's chart).

Both reuse the one place the attribution rules live (goodput.py's
`phase_intervals`) and usage.py's weighing of them by the workers held, so
a job's number in the list is the one its own page shows, and a bucket of
the chart is what `GET /v1/usage` would say of that stretch of time.

What it costs: a job's events are read for a whole page in one query; its
metrics rows, only the few numbers the intervals need (`phase_rows`), and
only for a job that was ever launched (a job that never ran has none). A
finished job's answer never changes (its events and rows are final), so it
is kept, under its id and `updated_at` (a job written again is a new entry).
An unfinished job's is kept for `FRESH_S` (its rows are written every few
steps, so no version of it holds still): a dashboard polling the jobs list
every 2 s reads a running job's rows at most every `FRESH_S`, which matters
for a long job (100,000 rows take ~1.3 s to read on SQLite; 1,000, ~20 ms).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from service.observability.goodput import PHASES, Goodput, job_goodput, phase_intervals
from service.observability.usage import (
    held_stretches,
    phase_goodput,
    phase_rows,
    phase_worker_seconds,
)
from service.states import ACTIVE
from service.store.records import JobRecord


@dataclass(frozen=True)
class GoodputBucket:
    start: datetime
    end: datetime
    phases: dict[str, float]  # PHASES -> worker-seconds within [start, end)
    goodput: float | None  # training / (held - suspended); None: nothing held


FRESH_S = 10.0


class KeptGoodput:
    """Jobs' goodput, kept (a bounded LRU: see the module's doc): a finished
    job's while it is not written again, an unfinished one's for `fresh_s`."""

    def __init__(self, size: int = 8192, fresh_s: float = FRESH_S):
        self._size, self._fresh_s = size, fresh_s
        # (id, updated_at or None: unfinished) -> (when made, monotonic; the answer)
        self._kept = OrderedDict[tuple[str, datetime | None], tuple[float, Goodput]]()
        self._lock = threading.Lock()

    @staticmethod
    def _key(job: JobRecord) -> tuple[str, datetime | None]:
        return (job.id, job.updated_at if job.state.is_terminal else None)

    def get(self, job: JobRecord) -> Goodput | None:
        with self._lock:
            found = self._kept.get(self._key(job))
        if found is None:
            return None
        made, goodput = found
        return goodput if job.state.is_terminal or time.monotonic() - made < self._fresh_s else None

    def put(self, job: JobRecord, goodput: Goodput) -> None:
        with self._lock:
            self._kept[self._key(job)] = (time.monotonic(), goodput)
            self._kept.move_to_end(self._key(job))
            while len(self._kept) > self._size:
                self._kept.popitem(last=False)


_KEPT = KeptGoodput()


def jobs_goodput(store, jobs: Iterable[JobRecord], now: datetime,
                 kept: KeptGoodput = _KEPT) -> dict[str, Goodput]:
    """Each job's goodput as of `now` (an unfinished job's: as of up to
    `FRESH_S` before), its id -> the same numbers as `job_goodput` over all
    its rows (`starting_phases` left empty)."""
    found: dict[str, Goodput] = {}
    todo = []
    for job in jobs:
        known = kept.get(job)
        if known is not None:
            found[job.id] = known
        else:
            todo.append(job)
    events = store.events_of(j.id for j in todo)
    for job in todo:
        rows = phase_rows(store, job)
        found[job.id] = job_goodput(job, events.get(job.id, []), rows, now)
        kept.put(job, found[job.id])
    return found


def goodput_over_time(store, tenant: str | None, since: datetime, now: datetime,
                      buckets: int) -> list[GoodputBucket]:
    """The worker-seconds by phase, and the goodput, of `tenant`'s jobs
    (None: every tenant's) in each of `buckets` equal stretches of [since, now)."""
    jobs = [j for j in store.jobs_changed_since(since, ACTIVE)
            if tenant is None or j.tenant == tenant]
    events = store.events_of(j.id for j in jobs)
    width = (now - since) / buckets
    edges = [since + width * i for i in range(buckets)] + [now]
    totals = [dict.fromkeys(PHASES, 0.0) for _ in range(buckets)]
    for job in jobs:
        job_events = events.get(job.id, [])
        held = held_stretches(job_events, now, fallback=job.spec.min_workers)
        if not held:
            continue  # held no workers: 0 in every phase of every bucket
        rows = phase_rows(store, job)
        spans = phase_intervals(job, job_events, rows, now)
        first, last = held[0][0], held[-1][1]
        for i, total in enumerate(totals):
            lo, hi = edges[i], edges[i + 1]
            if hi.timestamp() <= first or lo.timestamp() >= last:
                continue
            for phase, seconds in phase_worker_seconds(spans, held, lo, hi).items():
                total[phase] += seconds
    return [GoodputBucket(edges[i], edges[i + 1], total, phase_goodput(total))
            for i, total in enumerate(totals)]
