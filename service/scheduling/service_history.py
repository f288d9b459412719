"""Each tenant's recent service for weighted fair share: what its jobs
held and for how long, over a sliding window, charging a job just started
for a typical run's length (`ServiceHistory.owed`).

The scheduling pass feeds it the active jobs (`observe`); at a control
plane's start it is rebuilt from the job events (`spans_holding_workers`,
`restore`), so a restart does not hand the tenant that had most the next
free workers.
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from service.scheduling import Resources
from service.scheduling.fair_share import dominant_share
from service.states import JobState


class StateChange(Protocol):
    """What the history reads of a job's event: when it reached which state
    (the store's `EventRecord` is one; this package reads no database)."""

    @property
    def time(self) -> datetime: ...

    @property
    def to_state(self) -> JobState: ...


@dataclass
class _Holding:
    tenant: str
    held: Resources
    started: float


@dataclass
class _Ran(_Holding):
    """A closed run: it held `held` from `started` until `ended`."""

    ended: float


class ServiceHistory:
    """What each tenant's jobs held and for how long, over a sliding window.
    `observe` is called with the active jobs at every pass; a job's run opens
    when it is first seen holding workers and closes when it is seen no more
    (or its size changes)."""

    def __init__(self, window_s: float):
        self.window_s = window_s
        self._open: dict[str, _Holding] = {}
        self._closed: list[_Ran] = []

    def observe(self, holding: dict[str, tuple[str, Resources]], now: float) -> None:
        for job_id, run in list(self._open.items()):
            now_held = holding.get(job_id)
            if now_held is None or now_held[1] != run.held:
                self._closed.append(_Ran(run.tenant, run.held, run.started, now))
                del self._open[job_id]
        for job_id, (tenant, held) in holding.items():
            if job_id not in self._open:
                self._open[job_id] = _Holding(tenant, held, now)
        horizon = now - self.window_s
        self._closed = [run for run in self._closed if run.ended > horizon]

    def restore(self, job_id: str, tenant: str, held: Resources, started: float,
                ended: float | None, now: float) -> None:
        """A stretch read back from a job's events: closed if it `ended`
        (kept if within the window), else open since `started`."""
        if ended is None:
            self._open[job_id] = _Holding(tenant, held, started)
        elif ended > now - self.window_s:
            self._closed.append(_Ran(tenant, held, started, ended))

    def typical_run_s(self, default: float) -> float:
        """The median length of the runs that ended within the window."""
        lengths = sorted(run.ended - run.started for run in self._closed)
        return lengths[len(lengths) // 2] if lengths else default

    def owed(self, total: Resources, now: float, expected_s: float) -> dict[str, float]:
        """Each tenant's service for fair share, in dominant share-seconds:
        what its runs held within the window, where a run still open is
        charged for at least `expected_s` (a job just started will use about
        a typical run's worth: without that charge, slots freed together all
        go to the tenant that had least, round after round).

        The `Scheduler` adds `horizon_s x share held now` itself; with its
        horizon set to `expected_s`, this returns the rest: an open run's
        time beyond `expected_s`."""
        since = now - self.window_s
        amounts: dict[str, Resources] = {}
        for run in self._closed:
            seconds = run.ended - max(since, run.started)
            if seconds > 0:
                amounts[run.tenant] = amounts.get(run.tenant, Resources()) + run.held.times(seconds)
        for opened in self._open.values():
            seconds = now - max(since, opened.started) - expected_s
            if seconds > 0:
                amounts[opened.tenant] = amounts.get(opened.tenant, Resources()) + opened.held.times(seconds)
        return {tenant: dominant_share(amount, total) for tenant, amount in amounts.items()}


def spans_holding_workers(
    events: Iterable[StateChange], holding: Set[JobState]
) -> list[tuple[float, float | None]]:
    """(start, end) in seconds since the epoch of each stretch a job spent in
    the `holding` states, from its events in order; end None: it is there still."""
    spans: list[tuple[float, float | None]] = []
    opened: float | None = None
    for event in events:
        inside = event.to_state in holding
        if inside and opened is None:
            opened = event.time.timestamp()
        elif not inside and opened is not None:
            spans.append((opened, event.time.timestamp()))
            opened = None
    if opened is not None:
        spans.append((opened, None))
    return spans
