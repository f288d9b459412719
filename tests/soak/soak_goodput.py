"""Faults priced: what the soak's cluster time bought, and what each kind of
fault cost, from what the service answers (pure: the soak reads it all back
over HTTP first).

**The cluster's goodput** is in worker-seconds: `GET /v1/usage`'s phases
(each job's phase intervals times the workers it held over them:
service/observability/usage.py) added up over the soak's four tenants, and
`training` over all of it less `suspended`. The admin's reference runs are
left out (they run alone, before the soak's jobs and faults).

**A fault's cost** is the `lost` and `recovering` seconds (one job's, not
times its workers) of the attempt it ended: the job's phase intervals
(`goodput.phase_intervals`, the same rules as `GET /v1/jobs/{id}/goodput`,
over the job's events and rows as the API gives them) clipped to a window
that runs from the end of the start-up of the attempt in progress when the
fault landed (or the landing, if it was still starting up) to the end of the
next attempt's start-up (its first piece that is neither start-up nor
queued), or to where the next fault on the same job takes over. So the
killed attempt's steps after its last surviving row (`lost`), its RESTARTING
and the next attempt's start-up up to its first new step (`recovering`) are
the fault's, and nothing of an earlier or a later fault's.

- A rank's SIGKILL or SIGTERM hits one job (the chaos thread records which,
  and when it sent the signal): the attempt in progress then is the one it
  ended, if the job went RESTARTING or PREEMPTING after it (a SIGTERM to a
  rank whose job had taken its last step ends nothing: the rank exits and the
  job succeeds).
- `brigade serve` killed and restarted, and the full disk, hit no job in
  particular: each ended the attempts of any soak job that entered
  RESTARTING between the fault and `GRACE_S` after it was over (the server
  back up, the disk freed) other than the ones a rank signal explains (the
  first RESTARTING after it on its job); such a fault's cost is the sum over
  the attempts it ended, 0 where it ended none (the ranks train on while the
  server is down, and a failed save fails only the save).

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
RANK_SIGNALS = ("sigkill", "sigterm")
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
                           workers=e.get("workers")) for e in events]
    span = JobSpan(at(job["created_at"]), at(job.get("finished_at")))
    return phase_intervals(span, records, rows, datetime.now(UTC))  # type: ignore[arg-type]


def entries(events: list[dict], state: str) -> list[float]:
    """When the job entered `state` (a note, the same state again, is no entry)."""
    return [at(e["time"]).timestamp() for e in events
            if e["to_state"] == state and e["from_state"] != state]


def window_begin(line: list[Piece], starts: list[float], landed: float) -> float | None:
    """Where the cost of a fault landed at `landed` begins: the first piece
    past the start-up of the attempt in progress then (its start-up, where it
    recovered from an earlier fault, is that fault's), or the landing if the
    attempt never got so far; None before any attempt."""
    k = max((i for i, s in enumerate(starts) if s <= landed), default=None)
    if k is None:
        return None
    return min(landed, next((p[0] for p in line if p[0] >= starts[k] and p[2] not in START_UP),
                            landed))


def attempt_cost(line: list[Piece], starts: list[float], landed: float, until: float) -> float:
    """`lost` + `recovering` of the attempt in progress at `landed` (the
    module's window), up to `until` at most."""
    begin = window_begin(line, starts, landed)
    if begin is None:
        return 0.0  # before any attempt: nothing of one to end
    end = until
    following = [s for s in starts if s > landed]
    if following:  # to the next attempt's first piece past its start-up
        after = [p for p in line if p[0] >= following[0] and p[2] not in START_UP]
        end = min(end, after[0][0] if after else end)
    return sum(max(0.0, min(e, end) - max(s, begin)) for s, e, phase in line if phase in COSTLY)


def fault_costs(faults: list[dict], jobs: dict[str, dict], events: dict[str, list[dict]],
                rows: dict[str, list[dict]]) -> list[dict]:
    """Each injected fault with `cost_s` and `attempts_ended` (the module's attribution)."""
    lines = {i: pieces(jobs[i], events[i], rows.get(i, [])) for i in events if i in jobs}
    starts = {i: entries(events[i], "STARTING") for i in lines}
    ends = {i: max((p[1] for p in line), default=0.0) for i, line in lines.items()}
    hits: dict[str, list[float]] = {}  # job -> when rank signals landed on it
    for f in faults:
        if f["kind"] in RANK_SIGNALS and f.get("job") in lines:
            hits.setdefault(f["job"], []).append(f.get("killed_at", f["at"]))
    for landed in hits.values():
        landed.sort()

    def until(job: str, landed: float) -> float:
        """The job's end, or where the next rank signal on it takes over."""
        later = [window_begin(lines[job], starts[job], t) for t in hits.get(job, []) if t > landed]
        return min([ends[job], *(b for b in later if b is not None)])

    def ended_by(job: str, landed: float) -> bool:
        """Whether the signal that landed then ended the attempt in progress: the job
        went RESTARTING or PREEMPTING after it, before the next signal on it landed (a
        SIGTERM to a rank whose job has taken its last step ends nothing: it exits)."""
        after = [t for t in hits[job] if t > landed]
        stopped = entries(events[job], "RESTARTING") + entries(events[job], "PREEMPTING")
        return any(landed <= t < min(after, default=float("inf")) for t in stopped)

    explained = {(job, min((r for r in entries(events[job], "RESTARTING") if r >= t), default=None))
                 for job, landed in hits.items() for t in landed}
    out = []
    for f in faults:
        if "skipped" in f:
            continue
        if f["kind"] in RANK_SIGNALS:
            job, landed = f.get("job"), f.get("killed_at", f["at"])
            if job not in lines:
                continue
            cost = attempt_cost(lines[job], starts[job], landed, until(job, landed))
            out.append({**f, "cost_s": cost, "attempts_ended": int(ended_by(job, landed))})
            continue
        over = f["at"] + f.get("down_s", f.get("full_s", 0.0)) + GRACE_S
        ended = [(job, r) for job in lines for r in entries(events[job], "RESTARTING")
                 if f["at"] <= r <= over and (job, r) not in explained]
        cost = sum(attempt_cost(lines[job], starts[job], r, until(job, r)) for job, r in ended)
        out.append({**f, "cost_s": cost, "attempts_ended": len(ended)})
    return out


def cost_by_kind(priced: list[dict]) -> dict[str, dict]:
    """Kind -> faults, attempts they ended, median and max cost (s)."""
    kinds: dict[str, list[dict]] = {}
    for f in priced:
        kinds.setdefault(f["kind"], []).append(f)
    return {kind: {"faults": len(fs), "attempts_ended": sum(f["attempts_ended"] for f in fs),
                   "median_s": round(statistics.median(f["cost_s"] for f in fs), 2),
                   "max_s": round(max(f["cost_s"] for f in fs), 2)}
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
