"""Faults priced: what the soak's cluster time bought, and what each kind of
fault cost, from what the service answers (pure: the soak reads it all back
over HTTP first).

**The cluster's goodput** is in worker-seconds: `GET /v1/usage`'s phases
(each job's phase intervals times the workers it held over them:
service/observability/usage.py) added up over the soak's four tenants, and
`training` over all of it less `suspended`. The admin's reference runs are
left out (they run alone, before the soak's jobs and faults).

**A fault's cost** is the `lost` and `recovering` seconds (one job's, not
times its workers) of the attempt it ended, or of the recovery in place it
caused: the job's phase intervals (`goodput.phase_intervals`, the same rules
as `GET /v1/jobs/{id}/goodput`, over the job's events and rows as the API
gives them) clipped to a window that runs from the end of the start-up of the
attempt in progress when the fault landed (or the landing, if it was still
starting up; or the end of a recovery in place before it in that attempt) to
the end of the next attempt's start-up (its first piece that is neither
start-up nor queued), or to the end of the recovery in place (its event), or
to where the next fault on the same job takes over. So the killed attempt's
steps after its last surviving row (`lost`), its RESTARTING and the next
attempt's start-up up to its first new step (`recovering`) are the fault's;
or, recovered in place, the steps after the last row the snapshot kept
(`lost`) and the recovery's own seconds (`recovering`); and nothing of an
earlier or a later fault's.

- A rank's SIGKILL or SIGTERM hits one job (the chaos thread records which,
  and when it sent the signal). What explains it, in this order:
  - **a recovery in place**: the job's first event of kind "recovery" after
    the landing (and before the next signal on the job) says `in_place`, and
    its loss was seen (the event's time less its `seconds`) within
    `RECOVERY_GRACE_S` of the landing. The attempt goes on, so the window
    ends at that event (the end of its `recovering`): its cost is the
    goodput module's `recovering` (the event's `seconds`, in RUNNING) and
    `lost` (the RUNNING time from the last surviving row before it: the
    steps the snapshot did not hold, done again) for it. A later fault's
    window on the same attempt begins where the recovery ended.
  - **a restart**: the job went RESTARTING (or PREEMPTING, a SIGTERM's
    notice) after it, before the next signal on it landed; where a recovery
    event that is not in place came first, a `fallback` (the group could not
    recover in place: no snapshot yet, a second failure), whose `recovering`
    before the RESTARTING is in the window too. The attempt in progress then
    is the one it ended (the windows above).
  - **finished**: the job's last step's row ended before the signal landed
    (it was winding down; a SIGTERM then ends nothing: the rank exits and
    the job succeeds).
  - **last_step** (a SIGTERM): the only step the job trained after it was
    its last (the notice's stop at the next step boundary is the job's end,
    so it ends nothing).
  - **with_next**: the next signal on the job landed before it trained a
    step after this one: one outage, which the next signal's explanation
    covers (a kill that lands while the job falls back from the one before).
  - Nothing else: `explained_by` None (the soak's checks name it).
- `brigade serve` killed and restarted, the leader killed, and the full
  disk, hit no job in particular: each ended the attempts of any soak job
  that entered RESTARTING between the fault and `GRACE_S` after it was over
  (the server back up, the disk freed) other than the ones a rank signal
  explains (the first RESTARTING after it on its job), and it caused any
  recovery in place whose loss was seen then that no rank signal explains
  (`recovered_in_place`); such a fault's cost is the sum over them, 0 where
  there were none (the ranks train on while the server is down, and a
  failed save fails only the save).

A kind's cost is the median over its faults.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import UTC, datetime

from service.observability.goodput import PHASES, phase_intervals
from service.states import JobState
from service.store.records import EventRecord

GRACE_S = 10.0  # a job's restart this long after a server restart or a freed disk is the fault's
# A rank's SIGKILL is recovered in place by a recovery whose loss was seen (its event's time
# less its `seconds`) this long after the kill at most: the runner sees the rank gone (a poll,
# Ray's notice of the dead process) and starts replacing it, on a loaded machine too.
RECOVERY_GRACE_S = 30.0
RANK_SIGNALS = ("sigkill", "sigterm")
ENDED = ("restart", "fallback", "preemption")  # what explains a rank signal by ending its attempt
COSTLY = ("lost", "recovering")
START_UP = ("recovering", "starting", "queued")
SUM_RTOL = 0.02  # issue 30: the phases sum to wall_s within 2%

Piece = tuple[float, float, str]


@dataclass(frozen=True)
class JobSpan:
    """What `phase_intervals` reads of a job: when it was submitted and ended."""

    created_at: datetime
    finished_at: datetime | None


def at(value: str | None) -> datetime | None:
    """An API timestamp as an aware UTC datetime (naive means UTC)."""
    if value is None:
        return None
    t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def pieces(job: dict, events: list[dict], rows: list[dict]) -> list[Piece]:
    """The job's life as (start, end, phase) pieces, from its API records."""
    records = [EventRecord(id=e["id"], job_id=job["id"], time=at(e["time"]),
                           from_state=JobState(e["from_state"]) if e["from_state"] else None,
                           to_state=JobState(e["to_state"]), reason=e.get("reason", ""),
                           workers=e.get("workers"), kind=e.get("kind"),
                           detail=e.get("detail")) for e in events]
    span = JobSpan(at(job["created_at"]), at(job.get("finished_at")))
    return phase_intervals(span, records, rows, datetime.now(UTC))  # type: ignore[arg-type]


def entries(events: list[dict], state: str) -> list[float]:
    """When the job entered `state` (a note, the same state again, is no entry)."""
    return [at(e["time"]).timestamp() for e in events
            if e["to_state"] == state and e["from_state"] != state]


@dataclass(frozen=True)
class RecoveryEvent:
    """A job's event of kind "recovery" (service/store/recovery_event.py), as the API gives it."""

    at: float  # the event's time: training went on (in place), or the fallback began
    seconds: float  # before `at`: the recovery's `recovering`
    in_place: bool
    from_step: int | None
    to_step: int | None
    reason: str = ""  # in place: what was lost and why; not: why it fell back

    @property
    def seen(self) -> float:
        """When the recovery began (the loss seen)."""
        return self.at - self.seconds


def recoveries(events: list[dict]) -> list[RecoveryEvent]:
    """The job's recovery events, in order (one whose detail cannot be read: none)."""
    out = []
    for e in events:
        detail = e.get("detail")
        if e.get("kind") != "recovery" or not isinstance(detail, dict):
            continue
        try:
            seconds = max(0.0, float(detail["seconds"]))
            out.append(RecoveryEvent(at(e["time"]).timestamp(), seconds, bool(detail["in_place"]),
                                     detail.get("from_step"), detail.get("to_step"),
                                     str(detail.get("reason", ""))[:300]))
        except (KeyError, TypeError, ValueError):
            continue
    return sorted(out, key=lambda r: r.at)


def window_begin(line: list[Piece], starts: list[float], landed: float,
                 in_place: list[float] = ()) -> float | None:
    """Where the cost of a fault landed at `landed` begins: the first piece
    past the start-up of the attempt in progress then (its start-up, where it
    recovered from an earlier fault, is that fault's), or the landing if the
    attempt never got so far, and not before the end of a recovery in place
    (`in_place`: their events' times) before the landing (the same attempt
    went on: what came before it is that recovery's); None before any attempt."""
    k = max((i for i, s in enumerate(starts) if s <= landed), default=None)
    if k is None:
        return None
    begin = min(landed, next((p[0] for p in line if p[0] >= starts[k] and p[2] not in START_UP),
                             landed))
    return max([begin, *(r for r in in_place if r <= landed)])


def costly(line: list[Piece], begin: float, end: float) -> float:
    """`lost` + `recovering` seconds of the pieces within [begin, end)."""
    return sum(max(0.0, min(e, end) - max(s, begin)) for s, e, phase in line if phase in COSTLY)


def attempt_cost(line: list[Piece], starts: list[float], landed: float, until: float,
                 in_place: list[float] = ()) -> float:
    """`lost` + `recovering` of the attempt in progress at `landed` (the
    module's window), up to `until` at most."""
    begin = window_begin(line, starts, landed, in_place)
    if begin is None:
        return 0.0  # before any attempt: nothing of one to end
    end = until
    following = [s for s in starts if s > landed]
    if following:  # to the next attempt's first piece past its start-up
        after = [p for p in line if p[0] >= following[0] and p[2] not in START_UP]
        end = min(end, after[0][0] if after else end)
    return costly(line, begin, end)


def recovery_cost(line: list[Piece], starts: list[float], landed: float, recovery: RecoveryEvent,
                  in_place: list[float] = ()) -> float:
    """`lost` + `recovering` of a recovery in place of the fault landed at
    `landed`: from the module's window's begin to the recovery's end (its
    event: the attempt went on), so the RUNNING time lost before it and its
    own `seconds`."""
    begin = window_begin(line, starts, landed, in_place)
    return 0.0 if begin is None else costly(line, begin, recovery.at)


def fault_costs(faults: list[dict], jobs: dict[str, dict], events: dict[str, list[dict]],
                rows: dict[str, list[dict]]) -> list[dict]:
    """Each injected fault with `cost_s`, `attempts_ended` and
    `recovered_in_place` (counts), and for a rank signal `explained_by`
    ("in_place", "fallback", "restart", "preemption", "finished", "last_step", "with_next" or
    None)
    and the in-place recovery's `recovery` (from_step, to_step, seconds):
    the module's attribution."""
    lines = {i: pieces(jobs[i], events[i], rows.get(i, [])) for i in events if i in jobs}
    starts = {i: entries(events[i], "STARTING") for i in lines}
    ends = {i: max((p[1] for p in line), default=0.0) for i, line in lines.items()}
    recs = {i: recoveries(events[i]) for i in lines}
    hits: dict[str, list[float]] = {}  # job -> when rank signals landed on it
    for f in faults:
        if f["kind"] in RANK_SIGNALS and f.get("job") in lines and "skipped" not in f:
            hits.setdefault(f["job"], []).append(f.get("killed_at", f["at"]))
    for landed in hits.values():
        landed.sort()

    def next_hit(job: str, landed: float) -> float:
        return min((t for t in hits.get(job, []) if t > landed), default=float("inf"))

    def recovery_of(job: str, landed: float) -> RecoveryEvent | None:
        """The recovery that followed the signal landed then: the job's first after it, before
        the next signal on it, its loss seen within RECOVERY_GRACE_S."""
        first = next((r for r in recs[job] if landed <= r.at < next_hit(job, landed)), None)
        return first if first is not None and first.seen <= landed + RECOVERY_GRACE_S else None

    # Where a recovery in place ended, by job: a later fault's window begins there at the
    # earliest (what came before is that recovery's, whatever explains it).
    in_place = {job: [r.at for r in recs[job] if r.in_place] for job in lines}

    def begin_of(job: str, landed: float) -> float | None:
        return window_begin(lines[job], starts[job], landed, in_place[job])

    def until(job: str, landed: float) -> float:
        """The job's end, or where the next rank signal on it takes over."""
        later = [begin_of(job, t) for t in hits.get(job, []) if t > landed]
        return min([ends[job], *(b for b in later if b is not None)])

    def stopped(job: str, landed: float, state: str) -> bool:
        """Whether the job entered `state` after the signal landed, before the next one did."""
        return any(landed <= t < next_hit(job, landed) for t in entries(events[job], state))

    def finished(job: str, landed: float, steps: int | None) -> bool:
        """Whether the job's last step's row had ended before the signal landed."""
        return steps is not None and any(r.get("step") == steps and r.get("wall_time") is not None
                                         and r["wall_time"] <= landed for r in rows.get(job, []))

    def in_last_step(job: str, landed: float, steps: int | None) -> bool:
        """Whether the only step the job trained after the signal landed was its last (a
        SIGTERM's checkpointed stop at the next step boundary is then the job's end)."""
        after = [r.get("step") for r in rows.get(job, [])
                 if r.get("wall_time") is not None and r["wall_time"] > landed]
        return steps is not None and after == [steps]

    def with_next(job: str, landed: float) -> bool:
        """Whether the next signal on the job landed before it trained a step
        after this one (one outage: the next signal's recovery or restart is
        this one's too, e.g. a kill that lands while the job falls back)."""
        nxt = next_hit(job, landed)
        return nxt < float("inf") and not any(
            r.get("wall_time") is not None and landed < r["wall_time"] < nxt
            for r in rows.get(job, []))

    def explain(f: dict, job: str, landed: float) -> tuple[str | None, RecoveryEvent | None]:
        recovery = recovery_of(job, landed)
        if recovery is not None and recovery.in_place:
            return "in_place", recovery
        if stopped(job, landed, "RESTARTING"):
            return ("fallback" if recovery is not None else "restart"), recovery
        if stopped(job, landed, "PREEMPTING"):
            return "preemption", recovery
        if finished(job, landed, f.get("steps")):
            return "finished", recovery
        if f["kind"] == "sigterm" and in_last_step(job, landed, f.get("steps")):
            return "last_step", recovery
        if with_next(job, landed):
            return "with_next", recovery
        return None, recovery

    explained = set()  # (job, time) of the RESTARTINGs and in-place recoveries the signals explain
    for job, landed in hits.items():
        for t in landed:
            recovery = recovery_of(job, t)
            if recovery is not None and recovery.in_place:
                explained.add((job, recovery.at))
            else:
                explained.add((job, min((r for r in entries(events[job], "RESTARTING") if r >= t),
                                        default=None)))
    out = []
    for f in faults:
        if "skipped" in f:
            continue
        if f["kind"] in RANK_SIGNALS:
            job, landed = f.get("job"), f.get("killed_at", f["at"])
            if job not in lines:
                continue
            why, recovery = explain(f, job, landed)
            if why == "in_place":
                cost = recovery_cost(lines[job], starts[job], landed, recovery, in_place[job])
            else:
                cost = attempt_cost(lines[job], starts[job], landed, until(job, landed),
                                    in_place[job])
            record = {**f, "cost_s": cost, "attempts_ended": int(why in ENDED),
                      "recovered_in_place": int(why == "in_place"), "explained_by": why}
            if recovery is not None:
                record["recovery"] = {"in_place": recovery.in_place, "from_step": recovery.from_step,
                                      "to_step": recovery.to_step, "seconds": recovery.seconds,
                                      "reason": recovery.reason}
            out.append(record)
            continue
        over = f["at"] + f.get("down_s", f.get("full_s", 0.0)) + GRACE_S
        ended = [(job, r) for job in lines for r in entries(events[job], "RESTARTING")
                 if f["at"] <= r <= over and (job, r) not in explained]
        recovered = [(job, r) for job in lines for r in recs[job]
                     if r.in_place and f["at"] <= r.seen <= over and (job, r.at) not in explained]
        cost = sum(attempt_cost(lines[job], starts[job], r, until(job, r), in_place[job])
                   for job, r in ended)
        cost += sum(recovery_cost(lines[job], starts[job], r.seen, r, in_place[job])
                    for job, r in recovered)
        out.append({**f, "cost_s": cost, "attempts_ended": len(ended),
                    "recovered_in_place": len(recovered)})
    return out


def ending_costs(priced: list[dict]) -> list[float]:
    """The costs of the faults that ended an attempt or were recovered in place."""
    return [f["cost_s"] for f in priced if f["attempts_ended"] or f.get("recovered_in_place")]


def cost_by_kind(priced: list[dict]) -> dict[str, dict]:
    """Kind -> faults, attempts they ended, recoveries in place, median and max cost (s), and
    the median cost of the faults that ended an attempt or were recovered in place
    (`ending_median_s`, None where none did: a SIGTERM in a job's last step ends nothing)."""
    kinds: dict[str, list[dict]] = {}
    for f in priced:
        kinds.setdefault(f["kind"], []).append(f)

    def ending(fs: list[dict]) -> float | None:
        costs = ending_costs(fs)
        return round(statistics.median(costs), 2) if costs else None

    return {kind: {"faults": len(fs), "attempts_ended": sum(f["attempts_ended"] for f in fs),
                   "recovered_in_place": sum(f.get("recovered_in_place", 0) for f in fs),
                   "median_s": round(statistics.median(f["cost_s"] for f in fs), 2),
                   "max_s": round(max(f["cost_s"] for f in fs), 2), "ending_median_s": ending(fs)}
            for kind, fs in sorted(kinds.items())}


def cluster_goodput(usage: dict, tenants: set[str]) -> dict:
    """The soak tenants' phases in worker-seconds (GET /v1/usage), summed, and their goodput."""
    phases = dict.fromkeys(PHASES, 0.0)
    for t in usage["tenants"]:
        if t["tenant"] in tenants:
            for phase, seconds in (t.get("phases") or {}).items():
                phases[phase] = phases.get(phase, 0.0) + seconds
    held = sum(phases.values())
    useful = held - phases["suspended"]
    return {"goodput": round(phases["training"] / useful, 4) if useful > 0 else None,
            "worker_seconds": round(held, 1),
            "phases_worker_s": {p: round(s, 1) for p, s in phases.items()}}


def check_goodput(job: dict, good: dict) -> list[str]:
    """A job's `GET /v1/jobs/{id}/goodput`: its phases sum to its wall time
    within 2%, none negative, and its goodput a share (0..1)."""
    where = f"job {job['id']} ({job['name']})"
    problems = []
    phases, wall = good["phases"], good["wall_s"]
    if set(phases) != set(PHASES):
        problems.append(f"{where}: goodput phases {sorted(phases)} are not {list(PHASES)}")
    if any(s < 0 for s in phases.values()):
        problems.append(f"{where}: a negative phase: {phases}")
    if abs(sum(phases.values()) - wall) > SUM_RTOL * wall:
        problems.append(f"{where}: phases sum to {sum(phases.values()):.2f} s, wall {wall:.2f} s "
                        f"(over {SUM_RTOL:.0%} apart)")
    if good["goodput"] is not None and not 0.0 <= good["goodput"] <= 1.0:
        problems.append(f"{where}: goodput {good['goodput']} is not within 0..1")
    return problems
