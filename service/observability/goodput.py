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

4. **Recoveries in place** (events of kind "recovery",
   service/store/recovery_event.py: lost ranks replaced while the others kept
   training, no restart, the same attempt). The event is written as training
   goes on, and its `seconds` before it are `recovering` wherever the job was
   RUNNING, before any row's span (the rows around it cannot claim them); the
   RUNNING time from the last surviving row before them to their start is
   `lost` (the steps the snapshot did not hold, and the one the loss cut
   short, are done again: their rows are the later ones). A fallback's event
   (not in place) marks its `seconds` `recovering` the same way; the
   RESTARTING that follows is counted by 1 to 3.

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

from service.states import HOLDING, IN_ATTEMPT, JobState
from service.store.records import EventRecord, JobRecord
from service.store.recovery_event import Recovery

S = JobState
PHASES = ("queued", "starting", "training", "data_wait", "eval", "checkpoint_stall",
          "recovering", "lost", "suspended")

# A piece of RUNNING that a recovery's `seconds` hold (4 above): no span claims it.
RECOVERING_IN_RUNNING = None

# What an instant in each state is when nothing more precise says (1 above).
_BY_STATE: dict[JobState | None, str] = {
    RECOVERING_IN_RUNNING: "recovering",
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
_RUNNING = frozenset({S.RUNNING})


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
    weighs by the workers held. `rows` need only the row's TIMING_FIELDS
    (workers/schema/metrics_row.py)."""
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
    order (RUNNING cut where a recovery held it: RECOVERING_IN_RUNNING), when
    each attempt began (each entry into STARTING) and each fault was seen
    (each entry into RESTARTING), and each in-place recovery's [start, end)."""

    segments: list[tuple[float, float, JobState | None]]
    attempts: list[float]
    faults: list[float]
    in_place: list[tuple[float, float]]

    @classmethod
    def of(cls, events: Iterable[EventRecord], begin: float, end: float) -> _Timeline:
        line = cls([], [], [], [])
        windows: list[tuple[float, float]] = []
        state, since = S.QUEUED, begin
        for event in events:
            if (recovery := Recovery.of(event)) is not None:
                done = min(end, max(begin, event.time.timestamp()))
                window = (max(begin, done - recovery.seconds), done)
                windows.append(window)
                if recovery.in_place:
                    line.in_place.append(window)
            if event.to_state is state and event.from_state is not None:
                continue  # a note (reattached to its group), a recovery: no change
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
        line.segments = _cut_running(line.segments, windows)
        return line

    def running_until(self, at: float, limit: float) -> float:
        """Where the RUNNING time from `at` on ends (`at` itself if not RUNNING
        then), recoveries in it included."""
        reached = at
        for seg_start, seg_end, state in self.segments:
            if seg_end <= reached:
                continue
            if seg_start > reached or state not in (S.RUNNING, RECOVERING_IN_RUNNING):
                break
            reached = seg_end
        return min(limit, reached) if reached > at else at


def _cut_running(segments: list[tuple[float, float, JobState | None]],
                 windows: list[tuple[float, float]]) -> list[tuple[float, float, JobState | None]]:
    """The RUNNING segments with the recoveries' windows cut out of them as
    RECOVERING_IN_RUNNING (4 above); other states as they are."""
    if not windows:
        return segments
    out: list[tuple[float, float, JobState | None]] = []
    for seg_start, seg_end, state in segments:
        if state is not S.RUNNING:
            out.append((seg_start, seg_end, state))
            continue
        reached = seg_start
        for w_start, w_end in sorted(windows):
            start, stop = max(w_start, reached), min(w_end, seg_end)
            if stop <= start:
                continue
            if start > reached:
                out.append((reached, start, S.RUNNING))
            out.append((start, stop, RECOVERING_IN_RUNNING))
            reached = stop
        if seg_end > reached:
            out.append((reached, seg_end, S.RUNNING))
    return out


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
            spans.append(_Span(start, stop, startup, IN_ATTEMPT))
            continue
        first = mine[0]
        spans.append(_Span(start, first["wall_time"] - _seconds(first, "eval_s"),
                           startup, IN_ATTEMPT))
        for n, row in enumerate(mine):
            spans.extend(_row_spans(row, compute=n > 0))
        spans.extend(_lost_to_recoveries(line, mine, start, stop))
        if later:  # done again by a later attempt: lost
            last = mine[-1]
            tail = last["wall_time"] + _seconds(last, "checkpoint_stall_s")
            spans.append(_Span(tail, line.running_until(tail, stop), "lost", _RUNNING))
    return spans


def _lost_to_recoveries(line: _Timeline, rows: list[dict], start: float,
                        stop: float) -> list[_Span]:
    """Each in-place recovery's lost span in the attempt [start, stop): its
    RUNNING time from the last surviving row before the recovery (or the
    recovery before it) to the recovery's start (4 above)."""
    spans, reached, row_at = [], start, 0
    for w_start, w_end in line.in_place:
        if not start <= w_start < stop:
            continue
        while row_at < len(rows) and rows[row_at]["wall_time"] < w_start:
            last = rows[row_at]
            reached = max(reached, last["wall_time"] + _seconds(last, "checkpoint_stall_s"))
            row_at += 1
        if row_at and reached < w_start:  # a row before it: the start-up ended
            spans.append(_Span(reached, w_start, "lost", _RUNNING))
        reached = max(reached, w_end)
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
        spans += [_Span(began, began + waited, "data_wait", HOLDING),
                  _Span(began + waited, wall - eval_s, "training", HOLDING)]
    spans += [_Span(wall - eval_s, wall, "eval", HOLDING),
              _Span(wall, wall + stall, "checkpoint_stall", HOLDING)]
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


def _attribute(segments: list[tuple[float, float, JobState | None]],
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
