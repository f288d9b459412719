"""Each queued job's expected start, as the API shows it: the store's jobs
and their latest metrics rows read into the forecast's views, and the
forecast (`service.scheduling.forecast`) run over them.

What a job's pace is:

- A job that has stepped: from its latest rows (at most `WINDOW`), the mean
  seconds between consecutive rows' `wall_time` (when each step ended, so
  what `step_time_s` leaves out counts too: the metrics reduce, evals,
  periodic saves), leaving out gaps over `GAP_OUTLIER` x their median (a
  restart between attempts is not a step); with a single row, its
  `step_time_s`. Its finish counts from its latest row's `wall_time`.
- A job that has not stepped (starting, or queued): the latest pace seen
  for a job of the same shape (model, data, training, sharding, workers,
  resources per worker: what sets a step's time), else unknown.
- A job's start-up (its launch to its first step): the median of the
  `startup.total` the latest first rows carried, else the forecast's default.

A job that waits on jobs (`after`, service/run/dependencies.py), or on its
tenant's budget (service/run/budget_gate.py), gets no expected start, and
what it waits for as the reason; the forecast of the others leaves it out.

One forecast is made for every queued job at once and answered for
`ttl_s`: a dashboard polling each queued job, or a page of them, costs one
forecast, not one per job.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import replace
from statistics import median

from service.run.ray_cluster import cluster_capacity
from service.run.scheduling_pass import SchedulingPass
from service.scheduling import Resources
from service.scheduling.forecast import (
    Forecast,
    ForecastSettings,
    QueuedWork,
    RunningWork,
    forecast_starts,
)
from service.states import ACTIVE, REQUEUING
from service.states import JobState as S
from service.store import JobRecord, JobStore

WINDOW = 20  # the latest rows a pace is taken from
GAP_OUTLIER = 5.0  # a gap between rows this many times their median is not a step's
SHAPE_FIELDS = ("model", "data", "train", "sharding", "workers", "resources_per_worker")


def shape_of(job: JobRecord) -> str:
    """What sets a step's time, as a key: jobs of one shape step alike."""
    return json.dumps({k: job.stored_spec.get(k) for k in SHAPE_FIELDS}, sort_keys=True,
                      default=str)


def pace_of(rows: list[dict]) -> tuple[float | None, float | None, int | None]:
    """(seconds per step, when the latest step ended, the latest step) from a
    job's latest rows, by step; Nones where they do not say."""
    timed = [(row["step"], row["wall_time"]) for row in rows
             if isinstance(row.get("wall_time"), int | float)]
    if not rows:
        return None, None, None
    last = rows[-1]
    gaps = [(t1 - t0) / (s1 - s0) for (s0, t0), (s1, t1) in zip(timed, timed[1:], strict=False)
            if s1 > s0]
    if gaps:
        typical = median(gaps)
        kept = [g for g in gaps if g <= GAP_OUTLIER * typical] or gaps
        pace = sum(kept) / len(kept)
    else:
        step_time = last.get("step_time_s")
        pace = float(step_time) if isinstance(step_time, int | float) else None
    stepped_at = timed[-1][1] if timed and timed[-1][0] == last["step"] else None
    return pace, stepped_at, int(last["step"])


class StartForecasts:
    def __init__(self, scheduling: SchedulingPass, store: JobStore, ttl_s: float = 2.0,
                 settings: ForecastSettings | None = None):
        self.scheduling, self.store, self.ttl_s = scheduling, store, ttl_s
        self.settings = settings or ForecastSettings()
        self._paces: dict[str, float] = {}  # job shape -> the latest pace seen for it
        self._startups: deque[float] = deque(maxlen=20)  # recent first rows' start-up
        self._started_seen: set[tuple[str, int]] = set()  # (job, step) whose start-up is counted
        self._made: tuple[float, dict[str, Forecast]] | None = None
        self._lock = threading.Lock()

    def of(self, job_id: str, *, made: bool = False) -> Forecast | None:
        """The queued job's forecast; None for a job not queued (as of the latest forecast).
        `made`: the latest forecast as it is, never a new one (no store read: what a
        route on the event loop may call; the supervisor's loop keeps it fresh)."""
        if made:
            latest = self._made
            return None if latest is None else latest[1].get(job_id)
        return self.all().get(job_id)

    def all(self) -> dict[str, Forecast]:
        """Every queued job's forecast, made at most `ttl_s` ago."""
        with self._lock:
            if self._made is not None and time.monotonic() - self._made[0] < self.ttl_s:
                return self._made[1]
            made = self._forecast()
            self._made = (time.monotonic(), made)
            return made

    def _forecast(self) -> dict[str, Forecast]:
        now = time.time()
        active = self.store.jobs_in_states(ACTIVE)
        queued = self.store.jobs_in_states([S.QUEUED])
        # A job waiting on jobs or on its tenant's budget gets no time, only what it waits
        # for (as of the latest pass).
        on_jobs = {**self.scheduling.dependencies.waiting, **self.scheduling.budget.waiting}
        waits = {job.id: Forecast(None, on_jobs[job.id]) for job in queued if job.id in on_jobs}
        queued = [job for job in queued if job.id not in waits]
        if not queued:
            return waits
        running_views, queued_views, tenants = self.scheduling.views(active, queued)
        running = [self._running(job, view, now) for job, view in zip(active, running_views,
                                                                        strict=True)]
        waiting = [self._queued(job, view) for job, view in zip(queued, queued_views,
                                                                 strict=True)]
        settings = self.settings
        if self._startups:
            settings = replace(settings, startup_s=median(self._startups))
        settings = replace(settings, fair_share_horizon_s=self.scheduling.settings.fair_share_horizon_s)
        return {**forecast_starts(running, waiting, tenants, Resources(**cluster_capacity()), now,
                                  self.scheduling.history_copy(), settings,
                                  self.scheduling.flavor_totals(),
                                  self.scheduling.flavor_history_copy()), **waits}

    def _rows(self, job: JobRecord) -> list[dict]:
        rows = self.store.metrics(job.id, since_step=max(0, job.step - WINDOW + 1))
        for row in rows:
            startup = row.get("startup")
            seen = (job.id, int(row["step"]))
            if isinstance(startup, dict) and "total" in startup and seen not in self._started_seen:
                if len(self._started_seen) > 10_000:
                    self._started_seen.clear()
                self._started_seen.add(seen)
                self._startups.append(float(startup["total"]))
        return rows

    def _running(self, job: JobRecord, view, now: float) -> RunningWork:
        total = job.spec.train.steps
        pace = stepped_at = last = None
        if job.step > 0 and job.state is not S.STARTING:
            pace, stepped_at, last = pace_of(self._rows(job))
        if pace is not None:
            self._paces[shape_of(job)] = pace
        else:
            pace = self._paces.get(shape_of(job))
        if job.state is S.STARTING or job.state is S.RESTARTING:
            stepped_at = None  # a new attempt: start-up first
        resume_from = (job.latest_checkpoint or {}).get("step", 0)
        done = last if stepped_at is not None and last is not None else resume_from
        return RunningWork(view, max(0, total - done), pace, created_at=job.created_at,
                           stepped_at=stepped_at, started_at=job.updated_at.timestamp(),
                           requeued=job.state in REQUEUING)

    def _queued(self, job: JobRecord, view) -> QueuedWork:
        pace = None
        if job.step > 0:  # ran before (preempted, resumed): its own pace
            pace, _, _ = pace_of(self._rows(job))
        if pace is None:
            pace = self._paces.get(shape_of(job))
        resume_from = (job.latest_checkpoint or {}).get("step", 0)
        return QueuedWork(view, max(0, job.spec.train.steps - resume_from), pace)
