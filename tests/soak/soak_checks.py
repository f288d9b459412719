"""What must hold at the end of a soak, job by job, and the report of it.

Pure functions over what the soak read back from the service (jobs, their
events and metrics rows) and what its threads saw: each returns the
problems it found, in words, so that one failing soak says everything that
went wrong at once.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from datetime import datetime

from service.states import TRANSITIONS, JobState
from tests.soak.soak_plan import CONFIGS, JobPlan

ELASTIC_RTOL = 1e-4  # a resume at another world size: float round-off (as tests/e2e's elastic test)
DISK_FULL = ("No space left on device", "unexpected pos")  # ENOSPC, or torch's short write
RANK_ACTOR = re.compile(r"^brigade-(?P<job>j-[0-9a-f]+)-a(?P<attempt>\d+)-rank-(?P<rank>\d+)$")
GROUP = re.compile(r"^brigade-(?P<job>j-[0-9a-f]+)-a(?P<attempt>\d+)$")  # service/run/launch.py group_name


def ranks_on_ray(names: list[str], pooled: dict[str, list | None | str]) -> dict[str, dict[str, set[int]]]:
    """Job id -> attempt -> the ranks alive on Ray, from two sources: the
    rank actors a group started, named `brigade-{job}-a{attempt}-rank-{r}`,
    and the warm ones it took from the pool, which keep the pool's names and
    say whose they are (`pooled`: name -> [group, rank] as the process itself
    answers, None while idle). Idle or silent pooled ones are no job's."""
    alive: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    for name in names:
        if m := RANK_ACTOR.match(name):
            alive[m["job"]][m["attempt"]].add(int(m["rank"]))
    for answer in pooled.values():
        if isinstance(answer, list) and (m := GROUP.match(answer[0])):
            alive[m["job"]][m["attempt"]].add(int(answer[1]))
    return {job: dict(attempts) for job, attempts in alive.items()}


def check_final(job: dict, plan: JobPlan) -> list[str]:
    """SUCCEEDED at its last step, or FAILED for the cause the soak injected on purpose."""
    where = f"job {job['id']} ({job['name']})"
    if plan.bad_data:
        if job["state"] != "FAILED" or "DataError" not in (job["error"] or "") \
                or "not restarted" not in job["error"]:
            return [f"{where}: meant to fail on its bad data, ended {job['state']}: {job['error']}"]
        return []
    if job["state"] != "SUCCEEDED":
        return [f"{where}: ended {job['state']} (stuck, or failed for a cause not injected): "
                f"{job['error']}"]
    steps = CONFIGS[plan.config][1]
    if job["step"] != steps:
        return [f"{where}: SUCCEEDED at step {job['step']} of {steps}"]
    return []


def check_events(job: dict, events: list[dict]) -> list[str]:
    """A legal path through the service's own transition table, from QUEUED to one final state."""
    where = f"job {job['id']}"
    if not events or events[0]["from_state"] is not None or events[0]["to_state"] != "QUEUED":
        return [f"{where}: its events do not begin with its submission: {events[:1]}"]
    problems = []
    for before, event in zip(events, events[1:], strict=False):
        came_from, to = JobState(event["from_state"]), JobState(event["to_state"])
        if came_from.value != before["to_state"]:
            problems.append(f"{where}: event {event['id']} leaves {came_from.value}, but the job was "
                            f"{before['to_state']}")
        if to is not came_from and to not in TRANSITIONS[came_from]:  # the same state: a note
            problems.append(f"{where}: event {event['id']} {came_from.value} -> {to.value} is not a "
                            "transition of the state machine")
    final = [e for e in events if JobState(e["to_state"]).is_terminal]
    if len(final) != 1 or final[0] is not events[-1] or events[-1]["to_state"] != job["state"]:
        problems.append(f"{where}: not exactly one final event, last, of its state {job['state']}: "
                        f"{[e['to_state'] for e in events]}")
    return problems


def check_rows(job: dict, plan: JobPlan, rows: list[dict]) -> list[str]:
    """Each step's metrics row exactly once, and none of a step not taken."""
    if plan.bad_data:
        return [f"job {job['id']}: rows of a job that never stepped: {len(rows)}"] if rows else []
    steps = [r["step"] for r in rows]
    want = list(range(1, CONFIGS[plan.config][1] + 1))
    if steps != want:
        doubled = sorted(s for s, n in Counter(steps).items() if n > 1)
        missing = sorted(set(want) - set(steps))
        return [f"job {job['id']}: metrics rows are not each step once, in order "
                f"(doubled {doubled[:10]}, missing {missing[:10]}, {len(steps)} rows)"]
    return [f"job {job['id']}: step {r['step']}: a save failed not for the full disk the soak "
            f"made: {r['checkpoint_error']}" for r in rows
            if r.get("checkpoint_error") and not any(c in r["checkpoint_error"] for c in DISK_FULL)]


def check_losses(job: dict, plan: JobPlan, rows: list[dict],
                 reference: dict[int, dict[int, float]]) -> list[str]:
    """The uninterrupted run's curve: bitwise at the same (fixed) world size,
    within round-off for an elastic job (it may resume at another size)."""
    if plan.bad_data or job["state"] != "SUCCEEDED":
        return []
    got = {r["step"]: r["loss"] for r in rows}
    if not plan.elastic:
        want = reference[plan.workers]
        wrong = [s for s in want if got.get(s) != want[s]]
        return [f"job {job['id']} ({plan.config}, {plan.workers} workers): losses differ from the "
                f"uninterrupted run's at steps {wrong[:10]}"] if wrong else []
    worst = min(max(abs(got.get(s, float("inf")) - w[s]) / abs(w[s]) for s in w)
                for w in reference.values())
    return [f"job {job['id']} ({plan.config}, elastic): largest relative loss difference from "
            f"the uninterrupted runs {worst:.2e} > {ELASTIC_RTOL:g}"] if worst > ELASTIC_RTOL else []


INTERRUPTED = {"RESTARTING": "restart", "PREEMPTING": "preemption"}
RECOVERY = "recovery"  # an event's kind: ranks lost from a running group (service/store/recovery_event.py)


def is_recovery(event: dict) -> bool:
    """An event of kind "recovery" whose detail says in place or not."""
    return (event.get("kind") == RECOVERY and isinstance(event.get("detail"), dict)
            and isinstance(event["detail"].get("in_place"), bool))


def recovery_events(events: list[dict]) -> list[dict]:
    """The job's recovery events, in order."""
    return [e for e in events if is_recovery(e)]


def interruptions(events: list[dict]) -> list[tuple[str, float]]:
    """(kind, seconds) of each time the job was interrupted, from its events:
    it entered RESTARTING or PREEMPTING and was RUNNING again after (the
    seconds between), or a rank was lost and recovered in place ("recovery":
    the recovery's own `seconds`, the job RUNNING throughout). A recovery that
    fell back is the restart that follows it. The rows' `recovery_s` is on an
    attempt's first new row only, and a tiny job resumed after its last
    recorded step has none: the events see them all."""
    out = []
    for i, event in enumerate(events):
        if is_recovery(event):
            if event["detail"]["in_place"]:
                out.append((RECOVERY, float(event["detail"].get("seconds") or 0.0)))
            continue
        kind = INTERRUPTED.get(event["to_state"])
        if kind is None or event["from_state"] == event["to_state"]:
            continue
        back = next((e for e in events[i + 1:] if e["to_state"] == "RUNNING"
                     and e["from_state"] != "RUNNING"), None)
        if back is not None:
            out.append((kind, (_at(back) - _at(event)).total_seconds()))
    return out


def check_recoveries(job: dict, events: list[dict]) -> list[str]:
    """The job's `recoveries` (GET /v1/jobs/{id}) counts its events of a
    recovery in place, each of which names the snapshot's step it went on
    from; a recovery that fell back is followed by a state change (the
    restart), not by more training in the same attempt."""
    where = f"job {job['id']}"
    found = recovery_events(events)
    in_place = [e for e in found if e["detail"]["in_place"]]
    problems = []
    if job.get("recoveries", 0) != len(in_place):
        problems.append(f"{where}: recoveries {job.get('recoveries')}, but {len(in_place)} events of "
                        "a recovery in place")
    for e in in_place:
        d = e["detail"]
        if not isinstance(d.get("to_step"), int):
            problems.append(f"{where}: event {e['id']}: a recovery in place from step "
                            f"{d.get('from_step')} names no snapshot step: {d}")
    for e in (e for e in found if not e["detail"]["in_place"]):
        after = events[events.index(e) + 1:]
        if not any(x["to_state"] != x["from_state"] for x in after):
            problems.append(f"{where}: event {e['id']}: a recovery fell back and the job never left "
                            f"{e['to_state']} after it: {e.get('reason', '')}")
    return problems


def _at(event: dict) -> datetime:
    return datetime.fromisoformat(event["time"].replace("Z", "+00:00"))


def report(jobs: list[dict], plans: dict[str, JobPlan], rows: dict[str, list[dict]],
           faults: list[dict], seconds: float, events: dict[str, list[dict]] | None = None) -> dict:
    """Jobs, faults injected, restarts and recoveries in place (and the ones
    that fell back to a restart), recoveries (count, median and max time),
    lost steps."""
    events = events or {}
    back = [x for job_events in events.values() for x in interruptions(job_events)]
    recovered = [e["detail"] for i, job_events in events.items() if i in plans
                 for e in recovery_events(job_events)]
    back_s = [s for _, s in back]
    recoveries = [r for job_rows in rows.values() for r in job_rows if r.get("recovered_from")]
    times = [r["recovery_s"] for r in recoveries if r.get("recovery_s") is not None]
    lost = [r.get("lost_steps") or 0 for r in recoveries]
    save_failures = sum(1 for job_rows in rows.values() for r in job_rows if r.get("checkpoint_error"))
    return {
        "seconds": round(seconds, 1),
        "jobs": len([j for j in jobs if j["id"] in plans]),
        "by_tenant": dict(sorted(Counter(plans[j["id"]].tenant for j in jobs if j["id"] in plans).items())),
        "by_state": dict(sorted(Counter(j["state"] for j in jobs if j["id"] in plans).items())),
        "elastic": sum(1 for p in plans.values() if p.elastic),
        "faults": dict(sorted(Counter(f["kind"] for f in faults if "skipped" not in f).items())),
        "faults_skipped": [f for f in faults if "skipped" in f],
        "restarts": sum(j["restarts"] for j in jobs if j["id"] in plans),
        "preemptions": sum(j["preemptions"] for j in jobs if j["id"] in plans),
        # the jobs' counter; the recovery events that fell back (their restarts are counted above)
        "recoveries_in_place": sum(j.get("recoveries", 0) for j in jobs if j["id"] in plans),
        "recoveries_fallback": sum(1 for d in recovered if not d["in_place"]),
        "recovery_in_place_s_max": round(max((d.get("seconds") or 0.0 for d in recovered
                                              if d["in_place"]), default=0.0), 2),
        "recoveries": dict(sorted(Counter(r["recovered_from"] for r in recoveries).items())),
        "recovery_s_median": round(statistics.median(times), 2) if times else None,
        "recovery_s_max": round(max(times), 2) if times else None,
        "lost_steps": sum(lost),
        "lost_steps_max": max(lost) if lost else 0,
        "failed_saves": save_failures,
        "serve_down_s": [round(f["down_s"], 1) for f in faults if "down_s" in f],
        "interruptions": dict(sorted(Counter(kind for kind, _ in back).items())),
        "back_running_s_median": round(statistics.median(back_s), 2) if back_s else None,
        "back_running_s_max": round(max(back_s), 2) if back_s else None,
    }
