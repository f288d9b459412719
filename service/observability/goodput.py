"""Where a job's time went: its wall time since submit split into phases,
and its goodput (the share of its time, suspensions left out, spent training).

Pure: the caller reads the job, its events and its metrics rows from the
store and hands them in, so the answer is the same in any process and after
a restart of the control plane (nothing here is held in memory).

How each instant of [created_at, end) is attributed (end: `finished_at`, or
`now` while the job is not done), so that the phases sum to `wall_s` by
construction:

1. **The state it was in** (its events, in order; a note that does not
   change the state changes nothing; a final state ends the timeline):

       QUEUED                           queued
       PREEMPTING                       checkpoint_stall (preempted: the blocking
                                        save and the stop it asks for; the job
                                        holds its workers, so it is not queued)
       RESTARTING                       recovering
       SUSPENDING, SUSPENDED            suspended (a person asked it to stop)
       CANCELLING, PRUNING              suspended (the same: goodput leaves it out)
       STARTING                         starting, or recovering (see 2)
       RUNNING                          training, unless 2 or 3 says otherwise

2. **Attempts.** An attempt begins at each entry into STARTING and lasts
   until the next one (or the end). Its *start-up* runs from its STARTING
   to the end of the compute of its first surviving row (the first step is
   start-up: its `startup` row says the same); an attempt with no surviving
   timed row is start-up throughout. Start-up time in STARTING or RUNNING
   is `recovering` where a RESTARTING came since the attempt before began
   (a fault or restart to the next attempt's first new step), else
   `starting`. `starting_phases` adds up each surviving row's `startup`
   sub-phases (service/run/launch.py), whichever of the two they went to.

3. **Rows** (the surviving metrics rows, one a step: a step done again
   replaces the earlier attempt's row; each is placed in the attempt whose
   span holds its `wall_time`, when the step ended). After the start-up,
   over any state that holds a group (STARTING .. CANCELLING, PRUNING):

       [wall_time - eval_s - step_time_s, + data_wait_s)   data_wait
       the rest of the step's compute                      training
       [wall_time - eval_s, wall_time)                     eval
       [wall_time, + checkpoint_stall_s)                   checkpoint_stall

   Time in RUNNING between rows (the loop's own work) stays training.
   The time an attempt spent in RUNNING after its last surviving row (and
   that row's save) is `lost` where a later attempt followed: its steps were
   done again (their rows are the later attempt's now), and so was the step
   the fault cut short. The last attempt's tail is training (the step in
   progress, or the end's wind-down).

Rows without a `wall_time` (a dataset's preparation: a row a file) cannot be
placed: such a job's RUNNING is all training. Intervals are clipped into the
job's span and against each other, so clocks a little apart (the ranks' and
the store's) shift time between phases, never add or lose any.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from service.states import JobState
from service.store.records import EventRecord, JobRecord

S = JobState
PHASES = ("queued", "starting", "training", "data_wait", "eval", "checkpoint_stall",
          "recovering", "lost", "suspended")

# What an instant in each state is when nothing more precise says (1 above).
_BY_STATE = {
    S.QUEUED: "queued",
    S.PREEMPTING: "checkpoint_stall",
    S.RESTARTING: "recovering",
    S.SUSPENDING: "suspended",
    S.SUSPENDED: "suspended",
    S.CANCELLING: "suspended",
    S.PRUNING: "suspended",
    S.STARTING: "starting",
    S.RUNNING: "training",
}
_HOLDING = frozenset({S.STARTING, S.RUNNING, S.SUSPENDING, S.PREEMPTING, S.CANCELLING, S.PRUNING})
_STARTING_UP = frozenset({S.STARTING, S.RUNNING})
_RUNNING = frozenset({S.RUNNING})
# What of a metrics row the phase intervals read (a caller may load just these).
INTERVAL_FIELDS = ("wall_time", "step_time_s", "data_wait_s", "eval_s", "checkpoint_stall_s")


@dataclass(frozen=True)
class Goodput:
    wall_s: float  # submit to the end, or to now
    phases: dict[str, float]  # PHASES -> seconds; they sum to wall_s
    starting_phases: dict[str, float]  # start-up sub-phase -> seconds, over its attempts
    goodput: float | None  # training / (wall_s - suspended); None when that is 0


@dataclass(frozen=True)
class _Span:
    start: float
    end: float
    label: str
    over: frozenset[JobState]  # the states it may claim (a row's compute: any holding one)


def job_goodput(job: JobRecord, events: list[EventRecord], rows: list[dict],
                now: datetime) -> Goodput:
    """The job's wall time since submit, phase by phase (the module's rules)."""
    phases = dict.fromkeys(PHASES, 0.0)
    for start, end, phase in phase_intervals(job, events, rows, now):
        phases[phase] += end - start
    begin = job.created_at.timestamp()
    wall_s = max(begin, (job.finished_at or now).timestamp()) - begin
    useful = wall_s - phases["suspended"]
    return Goodput(
        wall_s=wall_s,
        phases=phases,
        starting_phases=_startup_sums(rows),
        goodput=phases["training"] / useful if useful > 0 else None,
    )


def phase_intervals(job: JobRecord, events: list[EventRecord], rows: list[dict],
                    now: datetime) -> list[tuple[float, float, str]]:
    """The job's life as (start, end, phase) pieces in epoch seconds, in
    order, covering [created_at, end) with no gap or overlap (the module's
    rules): what `job_goodput` sums, and what a caller clips to a window or
    weighs by the workers held. `rows` need only INTERVAL_FIELDS."""
    begin = job.created_at.timestamp()
    end = max(begin, (job.finished_at or now).timestamp())
    line = _Timeline.of(events, begin, end)
    timed = sorted((r for r in rows if _number(r.get("wall_time")) is not None),
                   key=lambda r: r["wall_time"])
    spans: list[_Span] = []
    if timed or not rows:  # untimed rows (a preparation's files) place nothing
        spans = _clipped(_attempt_spans(line, timed, end))
    return _attribute(line.segments, spans)


@dataclass
class _Timeline:
    """The job's states as [start, end, state) pieces covering its span, in
    order, and when each attempt began (each entry into STARTING) and each
    fault was seen (each entry into RESTARTING)."""

    segments: list[tuple[float, float, JobState]]
    attempts: list[float]
    faults: list[float]

    @classmethod
    def of(cls, events: Iterable[EventRecord], begin: float, end: float) -> _Timeline:
        line = cls([], [], [])
        state, since = S.QUEUED, begin
        for event in events:
            if event.to_state is state and event.from_state is not None:
                continue  # a note (reattached to its group): no change
            at = min(end, max(since, event.time.timestamp()))
            if at > since:
                line.segments.append((since, at, state))
            since = at
            if event.to_state.is_terminal:
                break  # its end; time after it (finished_at later) stays the last state's
            state = event.to_state
            if state is S.STARTING:
                line.attempts.append(at)
            elif state is S.RESTARTING:
                line.faults.append(at)
        if end > since:
            line.segments.append((since, end, state))
        return line

    def running_until(self, at: float, limit: float) -> float:
        """Where the RUNNING time from `at` on ends (`at` itself if not RUNNING then)."""
        for seg_start, seg_end, state in self.segments:
            if seg_start <= at < seg_end:
                return min(limit, seg_end) if state is S.RUNNING else at
        return at


def _attempt_spans(line: _Timeline, rows: list[dict], end: float) -> list[_Span]:
    """The start-up, rows' and lost spans of every attempt (2 and 3 above)."""
    spans: list[_Span] = []
    row_at = 0
    for i, start in enumerate(line.attempts):
        later = i + 1 < len(line.attempts)
        stop = line.attempts[i + 1] if later else end
        mine = []
        while row_at < len(rows) and rows[row_at]["wall_time"] < stop:
            if rows[row_at]["wall_time"] >= start:
                mine.append(rows[row_at])
            row_at += 1
        previous = line.attempts[i - 1] if i else -math.inf
        startup = ("recovering" if any(previous <= t <= start for t in line.faults)
                   else "starting")
        if not mine:
            spans.append(_Span(start, stop, startup, _STARTING_UP))
            continue
        first = mine[0]
        spans.append(_Span(start, first["wall_time"] - _seconds(first, "eval_s"),
                           startup, _STARTING_UP))
        for n, row in enumerate(mine):
            spans.extend(_row_spans(row, compute=n > 0))
        if later:  # done again by a later attempt: lost
            last = mine[-1]
            tail = last["wall_time"] + _seconds(last, "checkpoint_stall_s")
            spans.append(_Span(tail, line.running_until(tail, stop), "lost", _RUNNING))
    return spans


def _row_spans(row: dict, *, compute: bool) -> list[_Span]:
    """One row's spans (3 above); the first of an attempt's rows is start-up
    up to its eval (`compute` False)."""
    wall = row["wall_time"]
    eval_s, stall = _seconds(row, "eval_s"), _seconds(row, "checkpoint_stall_s")
    spans = []
    if compute:
        step = _seconds(row, "step_time_s")
        began = wall - eval_s - step
        waited = min(step, _seconds(row, "data_wait_s"))
        spans += [_Span(began, began + waited, "data_wait", _HOLDING),
                  _Span(began + waited, wall - eval_s, "training", _HOLDING)]
    spans += [_Span(wall - eval_s, wall, "eval", _HOLDING),
              _Span(wall, wall + stall, "checkpoint_stall", _HOLDING)]
    return spans


def _clipped(spans: list[_Span]) -> list[_Span]:
    """In time order, none overlapping the one before it (a later span gives
    way: clocks apart by a little move time between phases, never add any)."""
    out: list[_Span] = []
    reached = -math.inf
    for span in sorted(spans, key=lambda s: s.start):
        start = max(span.start, reached)
        if span.end > start:
            out.append(_Span(start, span.end, span.label, span.over))
            reached = span.end
    return out


def _attribute(segments: list[tuple[float, float, JobState]],
               spans: list[_Span]) -> list[tuple[float, float, str]]:
    """Each segment's time to the spans over it that may claim its state,
    the rest to the state's own phase, as pieces in order."""
    pieces: list[tuple[float, float, str]] = []

    def put(start: float, end: float, phase: str) -> None:
        if end <= start:
            return
        if pieces and pieces[-1][2] == phase and pieces[-1][1] == start:
            pieces[-1] = (pieces[-1][0], end, phase)  # one piece, not many touching
        else:
            pieces.append((start, end, phase))

    first = 0  # the first span that may still reach the current segment
    for seg_start, seg_end, state in segments:
        while first < len(spans) and spans[first].end <= seg_start:
            first += 1
        own = _BY_STATE.get(state, "training")
        reached, k = seg_start, first
        while k < len(spans) and spans[k].start < seg_end:
            span = spans[k]
            if state in span.over:
                start, end = max(span.start, seg_start), min(span.end, seg_end)
                put(reached, start, own)
                put(start, end, span.label)
                reached = max(reached, end)
            k += 1
        put(reached, seg_end, own)
    return pieces


def _startup_sums(rows: Iterable[dict]) -> dict[str, float]:
    sums: dict[str, float] = {}
    for row in rows:
        startup = row.get("startup")
        if not isinstance(startup, dict):
            continue
        for name, seconds in startup.items():
            if name != "total" and (value := _number(seconds)) is not None:
                sums[name] = sums.get(name, 0.0) + value
    return sums


def _seconds(row: dict, name: str) -> float:
    value = _number(row.get(name))
    return max(0.0, value) if value is not None else 0.0


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)
