"""What each tenant used over a window, from its jobs' events and metrics
rows: worker-, cpu- and gpu-seconds held, the same worker-seconds split into
the goodput phases (service/observability/goodput.py) with the tenant's
goodput, its jobs that finished (by final state) and the preemptions its
jobs suffered; and the cluster's total of all of it.

A job holds workers while it is in an active state (STARTING .. CANCELLING,
PRUNING) other than RESTARTING (its group is gone, it waits out its backoff);
each event records the world size the job holds after it (`workers`, since
migration 0003), so a job that restarted smaller is counted at each size for
as long as it held it. An event written before that column existed has no
size: the job's smallest is counted then.

Phases in worker-seconds are exact, not a job's phase seconds times one
size: the job's phase intervals (`goodput.phase_intervals`, the one place
the attribution rules live) are intersected with the stretches it held
workers (from the events, as above) and with the window, and each piece
counts its length times the workers held over it. So a phase spent holding
nothing (`queued`, the RESTARTING part of `recovering`) counts 0, a 4-worker
job training 10 s counts 40, and the phases sum to `worker_seconds`. A
tenant's goodput is its `training` worker-seconds over its held
worker-seconds less `suspended` (a person's stop, or a cancel's or a
prune's wind-down).

Each tenant's worker-seconds and `cost` are given per flavor too (its jobs
of no flavor under `(none)`) and in all: a stretch held costs its
worker-hours times its flavor's price at the time, cut at each price change
(`service.scheduling.cost`).

Pure: the caller reads the store (`phase_rows` reads just what the phase
intervals need of a job's metrics rows).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from service.observability.goodput import PHASES, phase_intervals
from service.scheduling.cost import PriceHistory, flavor_key, stretch_cost
from service.states import HOLDING, JobState
from service.store.records import EventRecord, JobRecord
from workers.schema.metrics_row import TIMING_FIELDS

Stretch = tuple[float, float, int]  # [start, end) in epoch seconds, and the workers held over it


@dataclass
class FlavorUsage:
    """What a tenant's jobs of one flavor held and cost."""

    worker_seconds: float = 0.0
    cost: float = 0.0  # worker-hours x the flavor's price at the time


@dataclass
class TenantUsage:
    tenant: str
    worker_seconds: float = 0.0
    cost: float = 0.0  # every flavor's
    flavors: dict[str, FlavorUsage] = field(default_factory=dict)  # flavor (or "(none)") -> its
    cpu_seconds: float = 0.0
    gpu_seconds: float = 0.0
    jobs: dict[str, int] = field(default_factory=dict)  # final state -> jobs that ended in the window
    preemptions: int = 0  # times its jobs were preempted within the window
    phases: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))  # worker-s

    @property
    def goodput(self) -> float | None:
        return phase_goodput(self.phases)

    def add(self, other: TenantUsage) -> None:
        self.worker_seconds += other.worker_seconds
        self.cost += other.cost
        for name, used in other.flavors.items():
            self.add_flavor(name, used.worker_seconds, used.cost)
        self.cpu_seconds += other.cpu_seconds
        self.gpu_seconds += other.gpu_seconds
        self.preemptions += other.preemptions
        for state, n in other.jobs.items():
            self.jobs[state] = self.jobs.get(state, 0) + n
        for phase, seconds in other.phases.items():
            self.phases[phase] = self.phases.get(phase, 0.0) + seconds

    def add_flavor(self, flavor: str, worker_seconds: float, cost: float) -> None:
        used = self.flavors.setdefault(flavor, FlavorUsage())
        used.worker_seconds += worker_seconds
        used.cost += cost


def usage_by_tenant(
    jobs: Iterable[JobRecord], events: Mapping[str, list[EventRecord]],
    since: datetime, now: datetime, tenants: Iterable[str] = (),
    rows: Mapping[str, list[dict]] | None = None, prices: PriceHistory | None = None,
) -> dict[str, TenantUsage]:
    """Each tenant's usage within [since, now]; `tenants` are listed even if
    they used nothing. `rows`: each job's metrics rows (none: a job's RUNNING
    time is all `training`); `prices`: what a worker-hour cost when (none:
    nothing costs anything)."""
    prices = prices or PriceHistory()
    found = {name: TenantUsage(name) for name in tenants}
    for job in jobs:
        usage = found.setdefault(job.tenant, TenantUsage(job.tenant))
        job_events = events.get(job.id, [])
        held = held_stretches(job_events, now, fallback=job.spec.min_workers)
        worker_s = sum(_overlap(start, end, since, now) * n for start, end, n in held)
        per_worker = job.spec.resources_per_worker
        cost = held_cost(held, per_worker.flavor, prices, since, now)
        usage.worker_seconds += worker_s
        usage.cost += cost
        if worker_s > 0:
            usage.add_flavor(flavor_key(per_worker.flavor), worker_s, cost)
        usage.cpu_seconds += worker_s * per_worker.cpu
        usage.gpu_seconds += worker_s * per_worker.gpu
        if held:  # a job that never held workers adds 0 to every phase
            spans = phase_intervals(job, job_events, (rows or {}).get(job.id, []), now)
            for phase, seconds in phase_worker_seconds(spans, held, since, now).items():
                usage.phases[phase] += seconds
        usage.preemptions += sum(
            1 for e in job_events
            if e.to_state is JobState.PREEMPTING and e.from_state is not JobState.PREEMPTING
            and since <= e.time <= now)
        if job.state.is_terminal and job.finished_at is not None and since <= job.finished_at <= now:
            usage.jobs[job.state.value] = usage.jobs.get(job.state.value, 0) + 1
    return dict(sorted(found.items()))


def phase_rows(store, job: JobRecord) -> list[dict]:
    """The job's metrics rows with only the fields its phase intervals read
    (the row's TIMING_FIELDS: the database picks them out of each row's JSON,
    far less to load); none read for a job never launched (it has no rows)."""
    if not job.attempt:
        return []
    return [{name: value for name, value in zip(TIMING_FIELDS, values, strict=True)
             if value is not None}
            for _, *values in store.metric_columns(job.id, TIMING_FIELDS)]


def cluster_usage(usages: Iterable[TenantUsage]) -> TenantUsage:
    """All these tenants' usage added up (`tenant` is "*")."""
    total = TenantUsage("*")
    for usage in usages:
        total.add(usage)
    return total


def phase_goodput(phases: Mapping[str, float]) -> float | None:
    """`training` over all of it less `suspended`; None where that is 0."""
    useful = sum(phases.values()) - phases.get("suspended", 0.0)
    return phases.get("training", 0.0) / useful if useful > 0 else None


def held_stretches(events: Iterable[EventRecord], now: datetime, fallback: int) -> list[Stretch]:
    """Each stretch the job held workers up to `now`, with how many, in order."""
    stretches: list[Stretch] = []
    opened: tuple[float, int] | None = None  # (since when, how many workers)
    for event in events:
        if event.from_state is not None and event.from_state == event.to_state:
            continue  # a note: no change of what it holds
        at = event.time.timestamp()
        if opened is not None:
            stretches.append((opened[0], at, opened[1]))
            opened = None
        if event.to_state in HOLDING:
            opened = (at, event.workers or fallback)
    if opened is not None:
        stretches.append((opened[0], max(opened[0], now.timestamp()), opened[1]))
    return stretches


def held_cost(held: Iterable[Stretch], flavor: str | None, prices: PriceHistory,
              since: datetime, now: datetime) -> float:
    """What the stretches held of a job of `flavor` cost within [since, now]."""
    lo, hi = since.timestamp(), now.timestamp()
    return sum(stretch_cost(prices, flavor, max(start, lo), min(end, hi), n)
               for start, end, n in held)


def job_cost(job: JobRecord, events: Iterable[EventRecord], since: datetime, now: datetime,
             prices: PriceHistory) -> float:
    """What the job's workers cost within [since, now], from its events in
    order (only the cost: what a budget or a counter weighs, without the
    phases `usage_by_tenant` works out)."""
    held = held_stretches(events, now, fallback=job.spec.min_workers)
    return held_cost(held, job.spec.resources_per_worker.flavor, prices, since, now)


def held_worker_seconds(events: Iterable[EventRecord], since: datetime, now: datetime,
                        fallback: int) -> float:
    """Worker-seconds the job held within [since, now], from its events in order."""
    return sum(_overlap(start, end, since, now) * n
               for start, end, n in held_stretches(events, now, fallback))


def phase_worker_seconds(spans: Iterable[tuple[float, float, str]], held: list[Stretch],
                         since: datetime, now: datetime) -> dict[str, float]:
    """Worker-seconds by phase within [since, now]: each phase interval's
    overlap with each stretch held, times the workers held over it."""
    lo, hi = since.timestamp(), now.timestamp()
    phases = dict.fromkeys(PHASES, 0.0)
    for start, end, phase in spans:
        start, end = max(start, lo), min(end, hi)
        if end <= start:
            continue
        for held_start, held_end, workers in held:  # few: one a launch
            covered = min(end, held_end) - max(start, held_start)
            if covered > 0:
                phases[phase] += covered * workers
    return phases


def _overlap(start: float, end: float, since: datetime, now: datetime) -> float:
    return max(0.0, min(end, now.timestamp()) - max(start, since.timestamp()))
