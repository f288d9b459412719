"""When each queued job will start: the scheduler's own rules run forward in
simulated time.

The forecast replays what the supervisor's passes will do. It holds the
running jobs, each finishing at its last step's time plus its remaining
steps times its recent seconds per step (plus `finish_s`, the final save and
the release of its workers); a job that has not stepped yet first spends
what is left of a typical start-up (`startup_s`). At now and at each finish
it asks the real `Scheduler.admit` (priority, weighted fair share with the
tenants' attained service, FCFS, gang sizes, quotas, reservation) which
queued jobs start, and the real `PreemptionPolicy` whom a waiting job of
higher priority preempts; a victim leaves after `leave_s` and comes back to
the queue with the steps it has left. A job the simulation starts at time t
is expected to start at t (its STARTING), and then runs its own steps at
its own pace, freeing its workers in turn. The fair-share history is a copy
of the live one, fed the simulated runs as the real pass feeds it the real
ones.

A queued job that the simulation never starts gets None and the reason,
from the last simulated pass: a quota or a capacity that will not free up
(everything that could end has ended), or the jobs it waits on whose end is
unknown (they have no step time yet: neither a row of their own nor one of
a job of the same shape).

Pure: no Ray, no database, no torch; times are seconds since the epoch.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from service.scheduling.admission import Scheduler
from service.scheduling.preemption import PreemptionPolicy
from service.scheduling.service_history import ServiceHistory
from service.scheduling.views import (
    QueuedJob,
    Resources,
    RunningJob,
    TenantPolicy,
    capacity_now,
)

MAX_PASSES = 10_000  # a bound on the simulated passes (each a finish or a start)


@dataclass(frozen=True)
class RunningWork:
    """A job that holds workers, as the forecast sees it. `step_s`: its
    recent seconds per step (None: unknown). `stepped_at`: when its latest
    step ended (None: it has not stepped in this attempt; it started at
    `started_at`). `created_at`: its place in its tenant's queue, should it
    go back there (a preemption). `requeued`: a leaving job that comes back
    to the queue (one being preempted); else it leaves for good."""

    job: RunningJob
    remaining_steps: int
    step_s: float | None
    created_at: datetime | float  # as its QueuedJob's
    stepped_at: float | None = None
    started_at: float | None = None
    requeued: bool = False


@dataclass(frozen=True)
class QueuedWork:
    """A queued job: the steps it will run once started, and at what pace
    (None: unknown; its own rows from an earlier attempt, or a job of the
    same shape's)."""

    job: QueuedJob
    steps: int
    step_s: float | None


@dataclass(frozen=True)
class Forecast:
    expected_start: float | None  # epoch seconds; None: see `reason`
    reason: str = ""  # why None; "" when a time is given


@dataclass(frozen=True)
class ForecastSettings:
    startup_s: float = 5.0  # a job's launch to its first step's end
    finish_s: float = 1.0  # its last step to its workers free (final save, teardown)
    leave_s: float = 5.0  # a preempted job's checkpoint and stop
    fair_share_horizon_s: float = 60.0  # `Scheduler.horizon_s` where no run has ended yet


@dataclass
class _Held:
    """A job holding workers in the simulation: when it gives them back
    (None: unknown) and, should it go back to the queue, as what."""

    job: RunningJob
    finish: float | None
    created_at: datetime | float
    step_s: float | None
    requeue_steps: int | None = None  # None: it does not come back


class _Sim:
    """The simulated cluster: the jobs holding workers, the queue, the
    fair-share history."""

    def __init__(self, running: Sequence[RunningWork], queued: Sequence[QueuedWork],
                 history: ServiceHistory, settings: ForecastSettings, now: float):
        self.settings, self.history = settings, history
        self.flavor_histories: dict[str, ServiceHistory] = {}
        self.queued = {work.job.id: work for work in queued}
        self.held: dict[str, _Held] = {}
        for work in running:
            self.held[work.job.id] = _Held(
                work.job, self._finish_of(work, now), work.created_at, work.step_s,
                work.remaining_steps if work.requeued else None)

    def _finish_of(self, work: RunningWork, now: float) -> float | None:
        s = self.settings
        if work.job.leaving:  # giving its workers back now
            return now + s.leave_s
        if work.step_s is None:
            return None
        if work.stepped_at is not None:
            end = work.stepped_at + work.remaining_steps * work.step_s + s.finish_s
        else:
            started = now if work.started_at is None else work.started_at
            end = (max(now, started + s.startup_s) + work.remaining_steps * work.step_s
                   + s.finish_s)
        return max(now, end)

    @property
    def running(self) -> list[RunningJob]:
        return [held.job for held in self.held.values()]

    def start(self, job_id: str, workers: int, now: float) -> None:
        work = self.queued.pop(job_id)
        s = self.settings
        finish = (None if work.step_s is None else
                  now + s.startup_s + work.steps * work.step_s + s.finish_s)
        self.held[job_id] = _Held(RunningJob(job_id, work.job.tenant, workers, work.job.demand),
                                  finish, work.job.created_at, work.step_s)

    def preempt(self, job_id: str, now: float) -> None:
        """The victim checkpoints and leaves; it comes back with the steps it has left."""
        held = self.held[job_id]
        steps = 0
        if held.finish is not None and held.step_s:
            steps = round(max(0.0, held.finish - now - self.settings.finish_s) / held.step_s)
        held.job = replace(held.job, leaving=True)
        held.requeue_steps, held.finish = steps, now + self.settings.leave_s

    def end(self, job_id: str) -> None:
        held = self.held.pop(job_id)
        if held.requeue_steps is not None:
            job = QueuedJob(job_id, held.job.tenant, held.created_at, held.job.demand)
            self.queued[job_id] = QueuedWork(job, held.requeue_steps, held.step_s)

    def next_finish(self) -> float | None:
        return min((h.finish for h in self.held.values() if h.finish is not None), default=None)

    def ending_by(self, t: float) -> list[str]:
        return [j for j, h in self.held.items() if h.finish is not None and h.finish <= t]

    def unknown(self) -> list[str]:
        return sorted(j for j, h in self.held.items() if h.finish is None)


def forecast_starts(
    running: Sequence[RunningWork], queued: Sequence[QueuedWork],
    tenants: Mapping[str, TenantPolicy], total: Resources, now: float,
    history: ServiceHistory | None = None, settings: ForecastSettings = ForecastSettings(),
    flavor_totals: Mapping[str, Resources] | None = None,
    flavor_histories: Mapping[str, ServiceHistory] | None = None,
) -> dict[str, Forecast]:
    """Each queued job's forecast, by id. `history`: the live pass's
    fair-share history (copied, never changed); None: an empty one.
    `flavor_totals`: each flavor's nodes' capacity (a job of a flavor
    starts only there); `flavor_histories`: the live pass's fair-share
    history per flavor (copied), fed the simulated runs of that flavor as
    the pass feeds it the real ones; a flavor without one starts empty."""
    history = copy.deepcopy(history) if history is not None else ServiceHistory(3600.0)
    sim = _Sim(running, queued, history, settings, now)
    sim.flavor_histories = {flavor: copy.deepcopy(h) for flavor, h in (flavor_histories or {}).items()}
    first_queued = {work.job.id for work in queued}
    scheduler, preemption = Scheduler(), PreemptionPolicy()
    starts: dict[str, float] = {}
    waiting: dict[str, str] = {}
    t = now
    for _ in range(MAX_PASSES):
        waiting = _pass(sim, scheduler, preemption, tenants, total, t, starts, flavor_totals)
        if not (first_queued - starts.keys()):
            break
        t_next = sim.next_finish()
        if t_next is None:
            break
        t = max(t, t_next)
        for job_id in sim.ending_by(t):
            sim.end(job_id)
    out: dict[str, Forecast] = {}
    unknown = sim.unknown()
    for job_id in sorted(first_queued):
        if job_id in starts:
            out[job_id] = Forecast(starts[job_id])
            continue
        why = waiting.get(job_id, "it did not start in the simulation")
        if unknown:
            out[job_id] = Forecast(None, f"waiting on job {', '.join(unknown)}, which has no "
                                         f"step time yet: {why}")
        else:
            out[job_id] = Forecast(None, f"will not start as things stand (nothing that runs "
                                         f"will free it): {why}")
    return out


def _pass(sim: _Sim, scheduler: Scheduler, preemption: PreemptionPolicy,
          tenants: Mapping[str, TenantPolicy], total: Resources, t: float,
          starts: dict[str, float],
          flavor_totals: Mapping[str, Resources] | None = None) -> dict[str, str]:
    """One simulated supervisor pass at time `t`, as `SchedulingPass.run_pass`
    does it: admit, start, then offer `needs_room` to preemption. The
    waiting reasons it gives."""
    running = sim.running
    totals = flavor_totals or {}
    capacity = capacity_now(total, running, flavor_totals)
    sim.history.observe({job.id: (job.tenant, job.holds) for job in running}, t)
    for flavor in set(totals) | set(sim.flavor_histories):
        history = sim.flavor_histories.setdefault(flavor, ServiceHistory(sim.history.window_s))
        history.observe({job.id: (job.tenant, job.holds) for job in running
                         if job.demand.flavor == flavor}, t)
    scheduler.horizon_s = sim.history.typical_run_s(sim.settings.fair_share_horizon_s)
    owed = sim.history.owed(total, t, scheduler.horizon_s)
    owed_by_flavor = {flavor: history.owed(totals.get(flavor, Resources()), t, scheduler.horizon_s)
                      for flavor, history in sim.flavor_histories.items()}
    queued = {job_id: work.job for job_id, work in sim.queued.items()}
    decision = scheduler.admit(list(queued.values()), running, tenants, capacity, owed,
                               owed_by_flavor)
    for job_id, workers in decision.start:
        starts.setdefault(job_id, t)
        sim.start(job_id, workers, t)
    now_running = sim.running
    for pending_id in decision.needs_room:
        chosen = preemption.select_victims(queued[pending_id], now_running,
                                           decision.capacity_after(capacity),
                                           tenants)
        if chosen.victims:
            for victim in chosen.victims:
                sim.preempt(victim, t)
            break
    return dict(decision.waiting)
