"""Recovery after a rank is killed, end to end through the real service:
recovery in place against a whole-group restart, in the same run.

    .venv/bin/python -m bench.recovery [--mode both|in_place|restart] [--kills 5]

Starts `brigade serve` (its own local Ray head, SQLite, local checkpoints)
on 127.0.0.1 and, for each mode, submits one small 2-worker job:

- `in_place`: the product's defaults (async saves) with an in-memory snapshot
  every `--memory-every` steps: a lost rank is replaced while the other keeps
  its process, and every rank restores the newest snapshot all of them hold
  (docs/architecture.md, "Recovery in place");
- `restart`: `memory_every_steps: 0` and blocking saves, the path before
  issue 41: the group is restarted as a whole from the last committed disk
  checkpoint.

Each job is killed `--kills` times (SIGKILL to the process of rank 0, then
rank 1, in turn; pid from `GET /v1/jobs/{id}/workers`), each time once it has
trained two intervals (snapshot or checkpoint) past where the last recovery
went on and recorded a step 3, 1, 2, 4, 1 into the interval (a different point
of it each kill, so that the steps redone vary as they would). One job a mode:
the restart backoff resets when an attempt made progress (committed a
checkpoint), so each restart waits the first backoff (0.5 s), as a fresh job's.

Recovery time = kill -> the server's timestamp of the first step line in the
job's log that is a new step: one past the highest step done before the kill.
That is not the first step logged after the kill: the ranks go on from the
snapshot (or checkpoint) of step T and redo steps T+1 .. S, whose lines are
logged again, and where rank 0 survived, its rows of steps done before the
kill but not yet read are logged after the recovery, before the redone ones;
S is the highest of those and of the steps logged before the kill. The job's
events split it: in place, the `recovery` event (written once the new group is
formed) and its `detail.seconds` give detection (kill -> the recovery's start)
and replacement; restarting, the RESTARTING and RUNNING events give detection
and relaunch. Steps redone = S - T; the event's own `from_step - to_step` uses
the step the service had recorded when it saw the loss (<= S).
"""

from __future__ import annotations

import math
import os
import re
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field

from bench.report import Figure, Goal, cli, load, pyplot, save_plot
from bench.server import BrigadeServer, parse_time, wait_for

GOAL_MEDIAN_S = 1.0  # issue 41: kill -> next new step, in place, median over 5 kills
GOAL_MAX_S = 2.0  # issue 41: and the worst of them
RESTART_GOAL_S = 3.0  # issue 18: the whole-group restart, median over 5 kills
MODES = ("in_place", "restart")
INTO = (3, 1, 2, 4, 1)  # the step of the interval each kill lands at (modulo the interval)

STEP = re.compile(r"^step (\d+)/")
ATTEMPT = re.compile(r"^attempt (\d+):")
RECOVERED_ROWS = re.compile(r"^steps ([\d, ]+): metrics recovered")
REPLACED = re.compile(r"lost at step (\d+): replaced in place in ([\d.]+) s, every rank restored "
                      r"the in-memory snapshot of step (\d+)")


class ProductFailure(RuntimeError):
    """Recovery in place did not happen (the job restarted, failed or never
    went on): the bench stops here and says what it saw."""


def spec(mode: str, every: int, memory_every: int) -> dict:
    checkpoint: dict = {"every_steps": every, "keep_last": 2}
    if mode == "in_place":
        checkpoint["memory_every_steps"] = memory_every
    else:  # the path before issue 41: no snapshots, blocking saves
        checkpoint |= {"memory_every_steps": 0, "async": False}
    return {
        "name": f"bench-recovery-{mode.replace('_', '-')}",
        "workers": 2,
        "resources_per_worker": {"cpu": 1},
        "model": {"n_layers": 2, "d_model": 64, "n_heads": 4, "seq_len": 64},
        "data": {"source": "builtin"},
        "train": {"steps": 100_000, "global_batch_size": 8, "lr": 0.001},
        "checkpoint": checkpoint,
        "max_restarts": 100,
    }


@dataclass
class Line:
    id: int
    time: float
    text: str

    @property
    def step(self) -> int | None:
        m = STEP.match(self.text)
        return int(m.group(1)) if m else None

    @property
    def steps(self) -> list[int]:
        """The steps it says were done: a step line's, or rows recovered from a checkpoint."""
        if self.step is not None:
            return [self.step]
        m = RECOVERED_ROWS.match(self.text)
        return [int(s) for s in m.group(1).split(",")] if m else []


@dataclass
class LogTail:
    """The job's log so far, read on from the last line seen."""

    server: BrigadeServer
    job_id: str
    lines: list[Line] = field(default_factory=list)

    def poll(self) -> list[Line]:
        after = self.lines[-1].id if self.lines else 0
        got = self.server.get(f"/v1/jobs/{self.job_id}/logs", after_id=after, limit=10_000)
        self.lines += [Line(r["id"], parse_time(r["time"]), r["line"]) for r in got]
        return self.lines

    def since(self, t: float) -> list[Line]:
        return [line for line in self.lines if line.time >= t]


@dataclass(frozen=True)
class Resumed:
    """Where the log shows training going on after a kill."""

    reached: int  # S: the highest step done before the kill
    resumed: Line  # the first step line of the redo (step T + 1)
    new: Line  # the first step line past S


SETTLE_S = 2.0  # a survivor's late rows are logged at once after the recovery: by then, all of them


def resumed_after(after: list[Line], marker_at: int, before_kill: int, snapshot: int | None,
                  late_possible: bool) -> Resumed | None:
    """Where training went on, from the log's lines since the kill (`after`;
    the recovery's line, or the new attempt's, at `marker_at`): None until
    the log says.

    Steps logged between the kill and that line were done before the kill.
    In place with rank 0 surviving, its rows of steps done before the kill and
    not read yet come first after it, a run rising from the step the service
    had recorded; the redo starts at `snapshot` + 1, where the steps drop, or
    (no drop: those rows ended at the snapshot's step) at `snapshot` + 1 itself.
    Until the log has gone on `SETTLE_S` past the recovery's line, a run with no
    drop yet may still be the late rows: undecided."""
    reached = max([before_kill, *(s for line in after[:marker_at] for s in line.steps)])
    steps = [line for line in after[marker_at + 1:] if line.step is not None]
    if not steps:
        return None
    start = 0
    if late_possible:
        drop = next((j for j in range(1, len(steps)) if steps[j].step <= steps[j - 1].step), None)
        if drop is not None:
            start = drop
        elif steps[-1].time - after[marker_at].time < SETTLE_S:
            return None
        else:
            start = next((j for j, line in enumerate(steps) if line.step == snapshot + 1), 0)
    reached = max([reached, *(line.step for line in steps[:start])])
    if snapshot is not None:  # the snapshot's step was done before the kill, logged or not
        reached = max(reached, snapshot)
    new = next((line for line in steps[start:] if line.step > reached), None)
    return None if new is None else Resumed(reached, steps[start], new)


def kill_when(server: BrigadeServer, job_id: str, mode: str, i: int, base: int,
              interval: int) -> dict:
    """Wait until the job is two intervals past `base` and `INTO[i]` into one; the job."""
    into = INTO[i % len(INTO)] % interval
    target = base + 2 * interval
    target += (into - target) % interval

    def ready():
        job = server.get(f"/v1/jobs/{job_id}")
        if job["state"] in ("FAILED", "CANCELLED", "SUCCEEDED"):
            raise ProductFailure(f"job {job_id} is {job['state']} before kill {i + 1}: {job['error']}")
        committed = (job["latest_checkpoint"] or {}).get("step", 0)
        # Restarting, the checkpoint at the start of the interval the kill lands in must be
        # committed: progress since the last restart (its backoff is the first one again).
        if mode == "restart" and committed < target - into:
            return None
        return job if job["state"] == "RUNNING" and job["step"] >= target else None

    return wait_for(f"job {job_id} at step {target}", ready, 240, 0.05)


def one_kill(server: BrigadeServer, tail: LogTail, job_id: str, mode: str, i: int, base: int,
             args) -> dict:
    interval = args.memory_every if mode == "in_place" else args.every
    kill_when(server, job_id, mode, i, base, interval)
    ranks = server.get(f"/v1/jobs/{job_id}/workers")
    victim = ranks[i % len(ranks)]
    load_at_kill = load()
    t_kill = time.time()
    os.kill(victim["pid"], signal.SIGKILL)
    before_kill = max((s for line in tail.poll() if line.time < t_kill for s in line.steps),
                      default=0)

    def went_on():
        after = tail.poll() and tail.since(t_kill)
        for k, line in enumerate(after):
            if ATTEMPT.match(line.text):
                if mode == "in_place":
                    raise ProductFailure(evidence(server, job_id, t_kill,
                                                  "the job restarted instead of recovering in place"))
                return resumed_after(after, k, before_kill, None, late_possible=False)
            if m := REPLACED.search(line.text):
                if mode == "restart":
                    raise ProductFailure(evidence(server, job_id, t_kill, "recovered in place "
                                                  "with memory_every_steps 0"))
                return resumed_after(after, k, before_kill, int(m.group(3)),
                                     late_possible=victim["rank"] != 0)
        if mode == "in_place" and server.get(f"/v1/jobs/{job_id}")["state"] != "RUNNING":
            raise ProductFailure(evidence(server, job_id, t_kill, "the job left RUNNING"))
        return None

    try:
        got: Resumed = wait_for("the first new step", went_on, args.timeout, 0.05)
    except TimeoutError as e:
        raise ProductFailure(evidence(server, job_id, t_kill, str(e))) from None
    events = [e for e in server.get(f"/v1/jobs/{job_id}/events") if parse_time(e["time"]) >= t_kill]
    job = server.get(f"/v1/jobs/{job_id}")
    rows = {r["step"]: r for r in server.get(f"/v1/jobs/{job_id}/metrics",
                                             since_step=got.resumed.step,
                                             limit=got.new.step - got.resumed.step + 1)}
    step_ended = rows.get(got.new.step, {}).get("wall_time")
    first = rows.get(got.resumed.step, {})  # the first step after the snapshot or checkpoint
    first_started = (first.get("wall_time") or math.nan) - (first.get("step_time_s") or math.nan)
    recent = server.get(f"/v1/jobs/{job_id}/metrics", since_step=max(1, got.new.step - 20),
                        limit=20)
    step_s = statistics.median(r["step_time_s"] for r in recent if r.get("step_time_s")) \
        if any(r.get("step_time_s") for r in recent) else float("nan")
    resumed_from = got.resumed.step - 1
    row = {
        "mode": mode, "job": job_id, "rank": victim["rank"], "pid": victim["pid"],
        "recovery_s": got.new.time - t_kill,
        "step_ended_s": (step_ended - t_kill) if step_ended else float("nan"),
        "first_step_s": got.resumed.time - t_kill,
        "reached": got.reached, "resumed_from": resumed_from,
        "redone": max(0, got.reached - resumed_from), "step_time_s": step_s,
        "restarts": job["restarts"], "recoveries": job["recoveries"], "new_step": got.new.step,
        "first_step_time_s": first.get("step_time_s") or math.nan,
        "first_lag_s": got.resumed.time - (first.get("wall_time") or math.nan),
        "load": (load_at_kill, load()),
    }
    if mode == "in_place":
        recovery = next((e for e in events if e.get("kind") == "recovery"), None)
        if recovery is None or not recovery["detail"].get("in_place"):
            raise ProductFailure(evidence(server, job_id, t_kill, "no in-place recovery event"))
        d, t_event = recovery["detail"], parse_time(recovery["time"])
        row |= {"detect_s": t_event - d["seconds"] - t_kill, "restore_s": d["seconds"],
                "event_from": d["from_step"], "event_to": d["to_step"],
                "event_redone": d["from_step"] - d["to_step"],
                "resume_s": got.resumed.time - t_event, "build_s": first_started - t_event}
        if d["to_step"] != resumed_from:
            print(f"kill {i + 1}: the event says snapshot {d['to_step']}, the log resumed after "
                  f"{resumed_from}", file=sys.stderr)
    else:
        at = {e["to_state"]: parse_time(e["time"]) for e in reversed(events)}  # the first of each
        row |= {"detect_s": at.get("RESTARTING", math.nan) - t_kill,
                "restore_s": at.get("RUNNING", math.nan) - at.get("RESTARTING", math.nan),
                "resume_s": got.resumed.time - at.get("RUNNING", math.nan),
                "build_s": first_started - at.get("RUNNING", math.nan),
                "event_from": math.nan, "event_to": math.nan, "event_redone": math.nan}
    row["redo_s"] = got.new.time - got.resumed.time
    print(f"{mode} kill {i + 1}: rank {row['rank']} at step {row['reached']}: first new step "
          f"{row['new_step']} in {row['recovery_s']:.2f} s (detect {row['detect_s']:.2f}, "
          f"{'replace' if mode == 'in_place' else 'relaunch'} {row['restore_s']:.2f}, "
          f"first step {row['resume_s']:.2f}, redo {row['redo_s']:.2f}); went on from step "
          f"{resumed_from}, {row['redone']} steps redone; restarts {row['restarts']}, "
          f"recoveries {row['recoveries']}", file=sys.stderr)
    return row


def evidence(server: BrigadeServer, job_id: str, t_kill: float, what: str) -> str:
    """What the job says about itself since the kill: its events, its log and its record."""
    job = server.get(f"/v1/jobs/{job_id}")
    events = [e for e in server.get(f"/v1/jobs/{job_id}/events") if parse_time(e["time"]) >= t_kill - 1]
    lines = [r for r in server.get(f"/v1/jobs/{job_id}/logs", limit=10_000)
             if parse_time(r["time"]) >= t_kill - 1]
    keep = {k: job.get(k) for k in ("state", "step", "restarts", "recoveries", "latest_checkpoint",
                                    "error", "workers")}
    return "\n".join([
        f"{what} (job {job_id}, killed at {time.strftime('%H:%M:%S', time.gmtime(t_kill))}"
        f".{int(t_kill % 1 * 1000):03d} UTC)",
        f"GET /v1/jobs/{job_id}: {keep}",
        "events since the kill:",
        *(f"  {e['time']} {e.get('from_state')} -> {e['to_state']} kind={e.get('kind')} "
          f"{e.get('reason', '')!r} detail={e.get('detail')}" for e in events),
        "log since the kill:",
        *(f"  {r['time']} {r['line']}" for r in lines[:80]),
    ])


def kill_series(server: BrigadeServer, mode: str, kills: int, args) -> tuple[list[dict], dict]:
    """One job of `mode`, killed `kills` times; each kill's row and the job at the end."""
    job_id = server.post("/v1/jobs", spec(mode, args.every, args.memory_every))["id"]
    tail = LogTail(server, job_id)
    rows: list[dict] = []
    try:
        base = 0
        for i in range(kills):
            rows.append(one_kill(server, tail, job_id, mode, i, base, args))
            base = rows[-1]["new_step"]
        job = server.get(f"/v1/jobs/{job_id}")
    finally:
        server.post(f"/v1/jobs/{job_id}/cancel")
        wait_for("job cancelled", lambda: server.get(f"/v1/jobs/{job_id}")["state"]
                 in ("CANCELLED", "FAILED", "SUCCEEDED"), 120, 0.3)
    return rows, job


def add_args(parser) -> None:
    parser.add_argument("--mode", choices=("both", *MODES), default="both")
    parser.add_argument("--kills", type=int, default=None, help="a mode (default 5, --quick 1)")
    parser.add_argument("--every", type=int, default=5, help="checkpoint every this many steps")
    parser.add_argument("--memory-every", type=int, default=5,
                        help="in place: an in-memory snapshot every this many steps")
    parser.add_argument("--timeout", type=float, default=120.0, help="kill -> first new step (s)")


def run(args) -> Figure:
    kills = args.kills or (1 if args.quick else 5)
    modes = MODES if args.mode == "both" else (args.mode,)
    rows: dict[str, list[dict]] = {}
    jobs: dict[str, dict] = {}
    with BrigadeServer() as server:
        for mode in modes:
            rows[mode], jobs[mode] = kill_series(server, mode, kills, args)
    stats = {mode: summary(rs) for mode, rs in rows.items()}
    png = plot(rows, args.png_dir / "recovery.png")
    body = describe(rows, jobs, stats, kills, args, png)
    goals, headline = [], []
    if "in_place" in rows:
        s, job = stats["in_place"], jobs["in_place"]
        goals += [
            Goal(f"in place: kill -> next new step median <= {GOAL_MEDIAN_S:g} s, max <= "
                 f"{GOAL_MAX_S:g} s", f"median {s['median']:.2f} s, max {s['max']:.2f} s",
                 s["median"] <= GOAL_MEDIAN_S and s["max"] <= GOAL_MAX_S),
            Goal(f"in place: steps redone per kill <= memory_every_steps ({args.memory_every})",
                 f"max {s['redone_max']} (the event's from_step - to_step: max "
                 f"{s['event_redone_max']:g})", s["redone_max"] <= args.memory_every),
            Goal("in place: restarts stay 0, recoveries count the kills",
                 f"restarts {job['restarts']}, recoveries {job['recoveries']} of {kills} kills",
                 job["restarts"] == 0 and job["recoveries"] == kills),
        ]
        headline.append(f"in place: kill -> next new step median {s['median']:.2f} s, max "
                        f"{s['max']:.2f} s, redone max {s['redone_max']} steps")
    if "restart" in rows:
        s = stats["restart"]
        goals.append(Goal(f"restart (memory_every_steps 0): median <= {RESTART_GOAL_S:g} s",
                          f"median {s['median']:.2f} s, max {s['max']:.2f} s",
                          s["median"] <= RESTART_GOAL_S))
        headline.append(f"restart: median {s['median']:.2f} s, max {s['max']:.2f} s")
    if len(rows) == 2:
        headline.append(f"in place / restart {stats['in_place']['median'] / stats['restart']['median']:.2f}x")
    return Figure(
        name="recovery", title="Recovery after a rank is killed",
        command=(f".venv/bin/python -m bench.recovery --mode {args.mode} --kills {kills} "
                 f"--every {args.every} --memory-every {args.memory_every}"),
        body=body, headline="; ".join(headline), goals=goals, pngs=[png],
    )


def summary(rows: list[dict]) -> dict:
    times = [r["recovery_s"] for r in rows]
    event = [r["event_redone"] for r in rows if not math.isnan(r["event_redone"])]
    return {
        "median": statistics.median(times), "max": max(times),
        "redone_median": statistics.median(r["redone"] for r in rows),
        "redone_max": max(r["redone"] for r in rows),
        "event_redone_max": max(event) if event else math.nan,
        **{f"{k}_median": statistics.median(r[k] for r in rows)
           for k in ("detect_s", "restore_s", "resume_s", "build_s", "first_step_time_s",
                     "first_lag_s", "redo_s", "step_ended_s")},
    }


def describe(rows: dict[str, list[dict]], jobs: dict[str, dict], stats: dict, kills: int,
             args, png: str) -> str:
    s = spec("in_place", args.every, args.memory_every)
    lines = [
        "`brigade serve` on 127.0.0.1 with its own local Ray head (4 logical CPUs on these 2 "
        "cores), `BRIGADE_POLL_INTERVAL_S=0.2`. One job a mode: GPT "
        + ", ".join(f"{k} {v}" for k, v in s["model"].items())
        + f", 2 workers x 1 cpu, global batch {s['train']['global_batch_size']}, checkpoint every "
        f"{args.every} steps; **in place**: async saves (the default) and an in-memory snapshot "
        f"every {args.memory_every} steps (`checkpoint.memory_every_steps`); **restart**: "
        "`memory_every_steps: 0` and blocking saves (`async: false`), the path before issue 41. "
        f"Each job killed {kills} times, rank 0 and 1 in turn (SIGKILL to the rank actor's "
        "process, pid from `GET /v1/jobs/{id}/workers`), each once it had trained two intervals "
        "past where the last recovery went on and recorded a step 3, 1, 2, 4, 1 into the "
        "interval; restarting, also once it had committed a checkpoint since (progress: the "
        "backoff before the next restart is the first one, 0.5 s).",
        "",
        "Recovery = kill -> the server's timestamp of the first *new* step in the job's log (one "
        "past the highest step done before the kill; the runner records progress every 0.2 s); "
        "`step ended` is the same step's end on the rank (its metrics row's `wall_time`). "
        "In place: detect = kill -> the start of the recovery (the `recovery` event's time less "
        "its `detail.seconds`), replace = `detail.seconds` (survivors leave the broken group, a "
        "pooled replacement, a new process group, each rank fetches its snapshot), first step = "
        "the event -> the first step after the snapshot logged. "
        "Restart: detect = kill -> RESTARTING, relaunch = RESTARTING -> RUNNING (backoff, "
        "placement group, pooled ranks, process group), first step = RUNNING -> the new attempt's "
        "first step. The first step splits into build (to the step's start, its metrics row's "
        "`wall_time - step_time_s`: the trainer built, restored from the snapshot or loaded from "
        "the checkpoint), the step (`step_time_s`) and recorded (its end -> its line in the "
        "log). Redo = that first step -> the first new one. Step reached = the highest step "
        "done before the kill (a surviving rank 0's rows not yet read when it was killed are "
        "logged after the recovery, before the redone ones, and count; in place, at least the "
        "snapshot's step, which a killed rank 0 may not have reported); went on from = the "
        "snapshot's or checkpoint's step; redone = the "
        "difference (in place, the event's `from_step - to_step` beside it: the step the service "
        "had recorded when it saw the loss).",
        "",
        "| mode | kill | rank | recovery (s) | step ended (s) | detect (s) "
        "| replace / relaunch (s) | first step (s) | of which build / step / recorded (s) "
        "| redo (s) | step reached | went on from "
        "| redone | event's from - to | load at kill / after |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for mode, rs in rows.items():
        for k, r in enumerate(rs, 1):
            event = (f"{r['event_from']} - {r['event_to']} = {r['event_redone']}"
                     if mode == "in_place" else "-")
            lines.append(
                f"| {mode.replace('_', ' ')} | {k} | {r['rank']} | {r['recovery_s']:.2f} "
                f"| {r['step_ended_s']:.2f} | {r['detect_s']:.2f} "
                f"| {r['restore_s']:.2f} | {r['resume_s']:.2f} | {r['build_s']:.2f} / "
                f"{r['first_step_time_s']:.2f} / {r['first_lag_s']:.2f} | {r['redo_s']:.2f} "
                f"| {r['reached']} | {r['resumed_from']} | {r['redone']} | {event} "
                f"| {r['load'][0]:.2f} / {r['load'][1]:.2f} |")
    lines += [
        "",
        "| median over the kills | " + " | ".join(m.replace("_", " ") for m in rows)
        + (" | in place / restart |" if len(rows) == 2 else " |"),
        "| --- |" + " --- |" * (len(rows) + (len(rows) == 2)),
    ]
    for key, label in [("median", "kill -> next new step (s)"), ("max", "its max (s)"),
                       ("step_ended_s_median", "kill -> that step's end on the rank (s)"),
                       ("detect_s_median", "detect (s)"),
                       ("restore_s_median", "replace / relaunch (s)"),
                       ("resume_s_median", "first step after it (s)"),
                       ("build_s_median", "of which to the step's start: build, restore (s)"),
                       ("first_step_time_s_median", "of which the step (s)"),
                       ("first_lag_s_median", "of which its end -> logged (s)"),
                       ("redo_s_median", "redo to the new step (s)"),
                       ("redone_median", "steps redone"), ("redone_max", "steps redone, max")]:
        vals = [stats[m][key] for m in rows]
        ratio = (f" | {vals[0] / vals[1]:.2f}x" if vals[1] else " | -") if len(rows) == 2 else ""
        lines.append(f"| {label} | " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v)
                                                  for v in vals) + ratio + " |")
    lines += [""]
    if "in_place" in rows:
        lines += [where_it_goes(rows["in_place"], stats["in_place"]), ""]
    lines.append("Jobs at the end: " + "; ".join(
        f"{mode.replace('_', ' ')}: restarts {j['restarts']}, recoveries {j['recoveries']}, "
        f"step {j['step']}" for mode, j in jobs.items())
        + ". Step time here "
        + ", ".join(f"{m.replace('_', ' ')} {statistics.median(r['step_time_s'] for r in rs):.3f} s"
                    for m, rs in rows.items()) + " (median of the 20 steps before the new one).")
    lines += ["", f"![recovery time per kill, by mode]({png})"]
    return "\n".join(lines) + "\n"


def where_it_goes(rows: list[dict], s: dict) -> str:
    """The in-place median and max taken apart, against the goals."""
    steady = statistics.median(r["step_time_s"] for r in rows)
    worst = max(rows, key=lambda r: r["recovery_s"])
    parts = {"detect": worst["detect_s"], "replace": worst["restore_s"],
             "build": worst["build_s"], "the step": worst["first_step_time_s"],
             "recorded": worst["first_lag_s"], "redo": worst["redo_s"]}
    biggest = max(parts, key=lambda k: parts[k])
    return (
        f"Where the in-place recovery's time goes (medians): detect {s['detect_s_median']:.2f} s, "
        f"replace {s['restore_s_median']:.2f} s, then {s['build_s_median']:.2f} s from the new "
        "group formed to the start of the first step (every rank builds a new trainer and "
        f"restores the snapshot into it), that step {s['first_step_time_s_median']:.2f} s "
        f"(a step in steady state: {steady:.3f} s), {s['first_lag_s_median']:.2f} s from its end "
        f"to its line in the log (the runner reads progress every 0.2 s), and redo "
        f"{s['redo_s_median']:.2f} s: {s['median']:.2f} s against the goal's "
        f"{GOAL_MEDIAN_S:g} s. The slowest kill, {rows.index(worst) + 1} (rank {worst['rank']}), "
        f"{worst['recovery_s']:.2f} s against {GOAL_MAX_S:g} s: most of it {biggest} "
        f"({parts[biggest]:.2f} s).")


def plot(rows: dict[str, list[dict]], path) -> str:
    plt = pyplot()
    fig, axes = plt.subplots(1, len(rows), figsize=(4.2 * len(rows), 3.8), sharey=True,
                             squeeze=False)
    top = max(r["recovery_s"] for rs in rows.values() for r in rs)
    for ax, (mode, rs) in zip(axes[0], rows.items(), strict=True):
        xs = range(1, len(rs) + 1)
        bottom = [0.0] * len(rs)
        restore = "replace" if mode == "in_place" else "relaunch"
        for key, label, colour in [("detect_s", "detect", "tab:red"),
                                   ("restore_s", restore, "tab:blue"),
                                   ("resume_s", "first step after it", "tab:green"),
                                   ("redo_s", "redo to the new step", "tab:olive")]:
            vals = [max(0.0, r[key]) if not math.isnan(r[key]) else 0.0 for r in rs]
            ax.bar(xs, vals, bottom=bottom, label=label, color=colour)
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        if mode == "in_place":
            ax.axhline(GOAL_MEDIAN_S, color="red", ls="--", lw=1, label=f"median goal {GOAL_MEDIAN_S:g} s")
            ax.axhline(GOAL_MAX_S, color="red", ls=":", lw=1, label=f"max goal {GOAL_MAX_S:g} s")
        for x, r in zip(xs, rs, strict=True):
            ax.text(x, r["recovery_s"], f"{r['recovery_s']:.2f}\nr{r['rank']}", ha="center",
                    va="bottom", fontsize=7)
        ax.set_xticks(list(xs))
        ax.set_xlabel(f"kill ({mode.replace('_', ' ')})")
        ax.set_title("in place (snapshot in memory)" if mode == "in_place"
                     else "restart (memory_every_steps 0)", fontsize=9)
        ax.legend(fontsize=6, loc="upper left")
        ax.grid(axis="y", alpha=0.3)
        ax.set_ylim(0, max(GOAL_MAX_S, top) * 1.6)
    axes[0][0].set_ylabel("seconds from SIGKILL to the next new step")
    return save_plot(fig, path)


if __name__ == "__main__":
    cli("recovery", __doc__, add_args, run)
