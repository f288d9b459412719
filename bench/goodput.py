"""Goodput under faults: one job through the real service with a rank killed
every 10, 30 or 60 s, against the same job with no kill; recovered in place
(the product's defaults), and where asked restarted as a whole as before.

    .venv/bin/python -m bench.goodput [--seconds 90] [--intervals 10,30,60]
                                      [--restart-intervals 0,10]

Starts `brigade serve` (its own local Ray head, SQLite, local checkpoints)
on 127.0.0.1; for each interval (0: no kill) submits the same 2-worker job
(long enough never to finish), SIGKILLs one of its ranks (pid from
`GET /v1/jobs/{id}/workers`, rank 0 and 1 in turn) every interval, and after
`--seconds` from its submission reads `GET /v1/jobs/{id}/goodput` (its wall
time so far, phase by phase: service/observability/goodput.py) and cancels
it. Each run is a fresh job on the same server, warmed by a short job first
(not reported): the no-kill run pays the same first start-up as the others.

The job's `checkpoint` is the product's defaults (async saves, the in-memory
snapshot interval chosen at its start) but for `every_steps`: a lost rank is
replaced in place. For the intervals of `--restart-intervals` the same job
runs again with `memory_every_steps: 0` and blocking saves (`async: false`),
the path before issue 41 (a whole-group restart from the last checkpoint),
right after the in-place run of that interval, so the two see the same load.

When a kill lands: `interval` seconds after the previous one (the first,
after the job first runs), or, where the job has not trained since then, as
soon as it does (RUNNING, the last kill dealt with: a restart or a recovery
more than then, a step past the one at that kill and the one the service
saw it at (the `recovery` event's `from_step`), or a first step, and its
ranks up): a kill is never wasted on a group that is already gone, nor lands
at the step the last one did (the service would call that a repeating
failure and restart the group as a whole: a kill a moment after a recovery
in place, before the job records a step, did so), so "every 10 s" kills as
often as the service lets it. The restart backoff (0.5 s
before a restart, doubled for each failure since the job last made progress,
at most 10 s; `BRIGADE_RESTART_BACKOFF_S`) is part of what a restart costs.
"""

from __future__ import annotations

import math
import os
import signal
import statistics
import sys
import time

from bench.report import Figure, Goal, cli, pyplot, save_plot
from bench.server import BrigadeServer, parse_time, wait_for

SHOWN = ("training", "starting", "recovering", "lost", "checkpoint_stall", "queued")
COLOURS = {"training": "tab:green", "starting": "tab:gray", "recovering": "tab:orange",
           "lost": "tab:red", "checkpoint_stall": "tab:blue", "queued": "tab:purple",
           "other": "black"}


MODES = ("in_place", "restart")
# issue 41: in place, by kill interval (0: no kill)
GOALS = {0.0: 0.93, 60.0: 0.90, 30.0: 0.85, 10.0: 0.70}


def spec(every: int, mode: str = "in_place") -> dict:
    checkpoint: dict = {"every_steps": every, "keep_last": 2}
    if mode == "restart":  # the path before issue 41: no snapshots, blocking saves
        checkpoint |= {"memory_every_steps": 0, "async": False}
    return {
        "name": f"bench-goodput-{mode.replace('_', '-')}",
        "workers": 2,
        "resources_per_worker": {"cpu": 1},
        "model": {"n_layers": 2, "d_model": 64, "n_heads": 4, "seq_len": 64},
        "data": {"source": "builtin"},
        "train": {"steps": 1_000_000, "global_batch_size": 8, "lr": 0.001},
        "checkpoint": checkpoint,
        "max_restarts": 100,  # the kills must never exhaust it
    }


def one_run(server: BrigadeServer, interval: float, seconds: float, every: int,
            mode: str) -> dict:
    """The job's goodput `seconds` after its submission, a rank killed every `interval` (0: none)."""
    job_id = server.post("/v1/jobs", spec(every, mode))["id"]
    submitted = time.time()
    kills, handled, last_step, last_pid = 0, 0, 0, None
    try:
        wait_for("job running", lambda: server.get(f"/v1/jobs/{job_id}")["state"] == "RUNNING", 240, 0.2)
        due = time.time() + interval
        while time.time() - submitted < seconds:
            time.sleep(0.1)
            if not interval or time.time() < due:
                continue
            job = server.get(f"/v1/jobs/{job_id}")
            # Still recovering from the last kill: kill it once it trains again.
            if job["state"] != "RUNNING" or job["restarts"] + job["recoveries"] < handled:
                continue
            if kills:  # past the step the service saw the last loss at, too (its events')
                seen = [e["detail"]["from_step"] for e in server.get(f"/v1/jobs/{job_id}/events")
                        if e.get("kind") == "recovery" and e.get("detail")]
                last_step = max([last_step, *seen])
            if job["step"] <= last_step:
                continue
            ranks = [w for w in server.get(f"/v1/jobs/{job_id}/workers") if w["pid"]]
            if len(ranks) < 2 or last_pid in {w["pid"] for w in ranks}:
                continue
            victim = ranks[kills % len(ranks)]
            try:
                os.kill(victim["pid"], signal.SIGKILL)
            except ProcessLookupError:
                continue  # it went meanwhile: the next poll picks again
            kills += 1
            handled = job["restarts"] + job["recoveries"] + 1
            last_step, last_pid = job["step"], victim["pid"]
            due = time.time() + interval
        good = server.get(f"/v1/jobs/{job_id}/goodput")
        job = server.get(f"/v1/jobs/{job_id}")
        events = server.get(f"/v1/jobs/{job_id}/events")
        rows = server.get(f"/v1/jobs/{job_id}/metrics", limit=1_000_000)
    finally:
        server.post(f"/v1/jobs/{job_id}/cancel")
        wait_for("job cancelled", lambda: server.get(f"/v1/jobs/{job_id}")["state"]
                 in ("CANCELLED", "FAILED", "SUCCEEDED"), 120, 0.3)
    phases = good["phases"]
    recoveries = [e["detail"] for e in events if e.get("kind") == "recovery" and e.get("detail")]
    row = {"mode": mode, "interval": interval, "kills": kills, "restarts": job["restarts"],
           "recoveries": job["recoveries"], "step": job["step"], "wall_s": good["wall_s"],
           "goodput": good["goodput"], "phases": phases, "sum_s": sum(phases.values()),
           "fallbacks": fallbacks(recoveries),
           "replace_s": [d["seconds"] for d in recoveries if d.get("in_place")],
           "redone": [d["from_step"] - d["to_step"] for d in recoveries if d.get("in_place")],
           "snapshots": [d["to_step"] for d in recoveries if d.get("in_place")],
           "rebuild_s": rebuilds(events, rows),
           "committed": (job["latest_checkpoint"] or {}).get("step", 0)}
    print(f"{mode} every {interval or '-'} s: {kills} kills ({job['restarts']} restarts, "
          f"{job['recoveries']} recoveries), goodput {good['goodput']:.3f}, lost "
          f"{phases['lost']:.1f} s, recovering {phases['recovering']:.1f} s, starting "
          f"{phases['starting']:.1f} s, step {job['step']}", file=sys.stderr)
    return row


def fallbacks(recoveries: list[dict]) -> list[str]:
    """Each recovery that fell back to a whole-group restart, as its event says."""
    out = []
    for i, d in enumerate(recoveries):
        if d.get("in_place"):
            continue
        before = f", the loss before at step {recoveries[i - 1]['from_step']}" if i else ""
        out.append(f"rank {', '.join(map(str, d['ranks']))} lost at step {d['from_step']}{before}: "
                   f"fell back after {d['seconds']:.4f} s; its reason ends \"...{d['reason'][-60:]}\"")
    return out


def rebuilds(events: list[dict], rows: list[dict]) -> list[float]:
    """Each in-place recovery's time from its event (the new group formed) to
    the start of the first step after it: every rank's trainer built again
    and the snapshot restored. Goodput counts it as training (the event's
    `seconds` end where it begins; RUNNING between rows is training)."""
    timed = sorted((r["wall_time"], r) for r in rows if r.get("wall_time") and r.get("step_time_s"))
    out = []
    for e in events:
        if e.get("kind") != "recovery" or not (e.get("detail") or {}).get("in_place"):
            continue
        formed = parse_time(e["time"])
        first = next((r for wall, r in timed if wall > formed), None)
        if first is not None:
            out.append(max(0.0, first["wall_time"] - first["step_time_s"] - formed))
    return out


def warm_up(server: BrigadeServer) -> None:
    """A short job first, not reported: the first job on a fresh server pays for what
    every later one reuses (the rank pool's first ranks, the fork server's imports)."""
    job_id = server.post("/v1/jobs", {**spec(10), "name": "bench-goodput-warm-up",
                                      "train": {"steps": 5, "global_batch_size": 8, "lr": 0.001}})["id"]
    wait_for("warm-up job", lambda: server.get(f"/v1/jobs/{job_id}")["state"]
             in ("SUCCEEDED", "FAILED", "CANCELLED"), 240, 0.3)


def add_args(parser) -> None:
    parser.add_argument("--seconds", type=float, default=None,
                        help="each run, submit to the goodput read (default 90, --quick 30)")
    parser.add_argument("--intervals", default=None,
                        help="seconds between kills, comma-separated (default 10,30,60; "
                             "--quick 10); a run with no kill always comes first")
    parser.add_argument("--restart-intervals", default=None,
                        help="the intervals (0: no kill) run again restarting as a whole "
                             "(memory_every_steps 0, blocking saves), comma-separated; default "
                             "0,10; '' for none")
    parser.add_argument("--every", type=int, default=10, help="checkpoint every this many steps")


def run(args) -> Figure:
    seconds = args.seconds or (30.0 if args.quick else 90.0)
    intervals = [float(x) for x in (args.intervals or ("10" if args.quick else "10,30,60")).split(",")]
    again = args.restart_intervals if args.restart_intervals is not None else "0,10"
    restart = {float(x) for x in again.split(",") if x.strip()}
    plan = [(mode, interval) for interval in [0.0, *intervals]
            for mode in MODES if mode == "in_place" or interval in restart]
    with BrigadeServer() as server:
        warm_up(server)
        rows = [one_run(server, interval, seconds, args.every, mode) for mode, interval in plan]
    by_mode = {mode: [r for r in rows if r["mode"] == mode] for mode in MODES}
    by_mode = {mode: rs for mode, rs in by_mode.items() if rs}
    body = describe(rows, by_mode, seconds, args.every)
    png = plot(rows, args.png_dir / "goodput.png")
    body += f"\n![where the job's time went, by kill interval and recovery]({png})\n"

    goals = []
    for r in by_mode.get("in_place", []):
        want = GOALS.get(r["interval"])
        if want is not None:
            goals.append(Goal(f"in place, {'no kill' if not r['interval'] else 'kill every ' + every(r)}: "
                              f"goodput >= {want:.2f}", f"{r['goodput']:.3f}; " + spent(r),
                              r["goodput"] >= want))
    inplace = by_mode.get("in_place", [])
    if inplace:
        goals.append(Goal("in place: no restart, a recovery in place per kill",
                          ", ".join(f"every {every(r)}: {r['restarts']} restarts, "
                                    f"{r['recoveries']} recoveries of {r['kills']} kills"
                                    for r in inplace if r["kills"]),
                          all(r["restarts"] == 0 and r["recoveries"] == r["kills"] for r in inplace)))
    goals.append(Goal("phases sum to wall time (within 2%), every run",
                      ", ".join(f"{r['sum_s'] / r['wall_s']:.4f}" for r in rows),
                      all(abs(r["sum_s"] - r["wall_s"]) <= 0.02 * r["wall_s"] for r in rows)))
    for mode, rs in by_mode.items():
        # No kill first, then ever shorter intervals: what the kills cost must not shrink along
        # it (goodput itself moves with the first start-up too, which the load decides).
        costs = [r["phases"]["recovering"] + r["phases"]["lost"]
                 for r in sorted(rs, key=lambda r: -r["interval"] if r["interval"] else -math.inf)]
        if len(costs) > 1:
            goals.append(Goal(f"{label(mode)}: recovering + lost never less with more frequent kills",
                              " <= ".join(f"{c:.1f} s" for c in costs),
                              all(a <= b for a, b in zip(costs, costs[1:], strict=False))))
    return Figure(
        name="goodput", title="Goodput under faults",
        command=(f".venv/bin/python -m bench.goodput --seconds {seconds:g} --intervals "
                 + ",".join(f"{i:g}" for i in intervals) + " --restart-intervals "
                 + (",".join(f"{i:g}" for i in sorted(restart)) or "''")),
        body=body,
        headline="in place: goodput " + ", ".join(
            f"{r['goodput']:.2f} ({'kill every ' + every(r) if r['interval'] else 'no kill'})"
            for r in by_mode.get("in_place", []))
        + ("; restart: " + ", ".join(
            f"{r['goodput']:.2f} ({'kill every ' + every(r) if r['interval'] else 'no kill'})"
            for r in by_mode["restart"]) if "restart" in by_mode else ""),
        goals=goals, pngs=[png],
    )


def describe(rows: list[dict], by_mode: dict[str, list[dict]], seconds: float, every_steps: int) -> str:
    s = spec(every_steps)
    lines = [
        "`brigade serve` on 127.0.0.1 with its own local Ray head (4 logical CPUs on these 2 "
        "cores), `BRIGADE_POLL_INTERVAL_S=0.2`. One job a run, fresh each time on the same warm "
        "server: GPT " + ", ".join(f"{k} {v}" for k, v in s["model"].items())
        + f", 2 workers x 1 cpu, global batch {s['train']['global_batch_size']}, never finishing; "
        f"its goodput read from `GET /v1/jobs/{{id}}/goodput` {seconds:g} s after its submission, "
        "then cancelled. A rank killed (SIGKILL, rank 0 and 1 in turn) every interval after the "
        "job first ran, or as soon as it trains again (a step past the last kill's and past the "
        "step the service saw that loss at, or a first step) where it has not when one is due. "
        "**in place**: `checkpoint` the product's defaults (async saves, the in-memory "
        f"snapshot interval chosen at the job's start) with `every_steps: {every_steps}`; a lost "
        "rank is replaced and every rank restores the newest snapshot all hold. **restart**: the "
        "same with `memory_every_steps: 0` and `async: false`, the path before issue 41: the "
        "group restarts as a whole from the last committed checkpoint after a backoff of 0.5 s "
        "(doubled for each failure since the job last made progress), run right after the "
        "in-place run of the same interval.",
        "",
        "| recovery | kill every | kills | restarts | recoveries in place | steps | goodput "
        "| training (s) | recovering (s) | lost (s) | starting (s) | checkpoint stall (s) "
        "| queued (s) | phases sum / wall |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        p = r["phases"]
        lines.append(
            f"| {label(r['mode'])} | {every(r)} | {r['kills']} | {r['restarts']} | {r['recoveries']} "
            f"| {r['step']} | {r['goodput']:.3f} | {p['training']:.1f} | {p['recovering']:.1f} "
            f"| {p['lost']:.1f} | {p['starting']:.1f} | {p['checkpoint_stall']:.1f} "
            f"| {p['queued']:.1f} | {r['sum_s']:.1f} / {r['wall_s']:.1f} |")
    pairs = [(r, next(q for q in by_mode["restart"] if q["interval"] == r["interval"]))
             for r in by_mode.get("in_place", [])
             if any(q["interval"] == r["interval"] for q in by_mode.get("restart", []))]
    if pairs:
        lines += [
            "",
            "| kill every | goodput in place | restart | in place / restart "
            "| recovering + lost a kill, in place | restart | steps in place / restart |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for a, b in pairs:
            lines.append(
                f"| {every(a)} | {a['goodput']:.3f} | {b['goodput']:.3f} "
                f"| {a['goodput'] / b['goodput']:.2f}x | {cost(a)} | {cost(b)} "
                f"| {a['step'] / max(1, b['step']):.2f}x |")
    inplace = by_mode.get("in_place", [])
    base = next((r for r in inplace if not r["interval"]), None)
    notes = [
        "`recovering`: in place, each `recovery` event's `detail.seconds` (the loss seen to the "
        "new group formed); restarting, a kill to the next attempt's first new step (detection, "
        "the backoff, placement, the ranks, the group, the checkpoint load and that step). "
        "`lost`: the time spent on steps after the last surviving row, done again (in place, "
        "from the last row to the recovery's start: the steps past the snapshot and the one "
        "cut short; restarting, past the last checkpoint). `starting`: the job's first "
        "start-up, which no kill causes.",
    ]
    if inplace and any(r["kills"] for r in inplace):
        killed = [r for r in inplace if r["kills"]]
        notes.append(
            "In place, per kill: replace "
            + "; ".join(f"every {every(r)}: median {statistics.median(r['replace_s']):.2f} s, "
                        f"max {max(r['replace_s']):.2f} s, steps redone (the event's from_step - "
                        f"to_step) max {max(r['redone'])}, snapshot steps restored "
                        f"{', '.join(str(x) for x in r['snapshots'])}"
                        for r in killed if r["replace_s"]) + ".")
        built = [r for r in killed if r["rebuild_s"]]
        if built:
            notes.append(
                "Not in `recovering`: from each recovery's event (the new group formed, where its "
                "`seconds` end) to the start of the first step after it, every rank builds its "
                "trainer again and restores the snapshot; goodput counts that time as training "
                "(RUNNING between rows). Per kill: "
                + "; ".join(f"every {every(r)}: median {statistics.median(r['rebuild_s']):.2f} s, "
                            f"{sum(r['rebuild_s']):.1f} s in all" for r in built)
                + ". Counted as recovering, the goodput would be "
                + ", ".join(f"{adjusted(r):.3f} (every {every(r)})" for r in built) + ".")
        falls = [f"every {every(r)}: " + " / ".join(r["fallbacks"]) for r in killed if r["fallbacks"]]
        if falls:
            notes.append("Recoveries that fell back to a whole-group restart (their events): "
                         + "; ".join(falls) + ". The event's reason is the lost rank's error's "
                         "first line and then why it fell back, cut at 512 characters: a "
                         "SIGKILLed rank's first line (Ray's) is longer, so the why is cut off.")
    restarted = [r for r in by_mode.get("restart", []) if r["kills"]]
    if restarted:
        notes.append(
            "Restarting: " + "; ".join(
                f"every {every(r)}, {r['kills']} kills, {r['phases']['recovering'] / r['kills']:.1f} s "
                f"recovering a kill, the last checkpoint committed at step {r['committed']} of "
                f"{r['step']}" for r in restarted)
            + f". A restart made progress only where its attempt committed a checkpoint (every "
            f"{every_steps} steps) or took 20 steps: otherwise the next kill's backoff doubles "
            "(0.5, 1, 2, 4, 8 s), and the start-up of each attempt is paid again.")
    if pairs and not pairs[0][0]["interval"]:
        a, b = pairs[0]
        rate = {m: r["step"] / r["phases"]["training"] for m, r in (("in_place", a), ("restart", b))}
        notes.append(
            f"Goodput counts time, not steps: with no kill, in place trained {rate['in_place']:.1f} "
            f"steps a second of `training`, restarting {rate['restart']:.1f} "
            f"({rate['in_place'] / rate['restart']:.2f}x): the in-memory snapshots (their capture "
            "on the loop, their copies sent to the peer from a thread beside it) and the async "
            "saves share these 2 cores with the steps, and the load moves between runs too.")
    if base is not None:
        notes.append(
            "Against the no-kill run in place: "
            + "; ".join(f"every {every(r)}, goodput {r['goodput'] / base['goodput']:.2f}x"
                        for r in inplace if r["interval"] and base["goodput"])
            + ". The no-kill run's time besides training: "
            + ", ".join(f"{k} {v:.1f} s" for k, v in base["phases"].items()
                        if k != "training" and v >= 0.05)
            + f" of {base['wall_s']:.1f} s; "
            f"the first start-up alone is {base['phases']['starting'] / base['wall_s']:.1%} of "
            f"this {seconds:g} s run. Other jobs share these 2 cores: a step's time moves between "
            "runs, and with it `training`; so does the job's first start-up (`starting`, "
            f"{min(r['phases']['starting'] for r in rows):.1f} to "
            f"{max(r['phases']['starting'] for r in rows):.1f} s here).")
    return "\n".join(lines) + "\n\n" + "\n\n".join(notes) + "\n"


def spent(row: dict) -> str:
    """Where the time that was not training went, in a run."""
    p = row["phases"]
    return (f"starting {p['starting']:.1f} s, recovering + lost {p['recovering'] + p['lost']:.1f} s, "
            f"checkpoint stall {p['checkpoint_stall']:.1f} s of {row['wall_s']:.1f} s")


def adjusted(row: dict) -> float:
    """The goodput with the in-place recoveries' rebuilds taken out of training."""
    held = row["wall_s"] - row["phases"].get("suspended", 0.0)
    return (row["phases"]["training"] - sum(row["rebuild_s"])) / held


def cost(row: dict) -> str:
    if not row["kills"]:
        return "-"
    return f"{(row['phases']['recovering'] + row['phases']['lost']) / row['kills']:.2f} s"


def label(mode: str) -> str:
    return "in place" if mode == "in_place" else "restart"


def every(row: dict) -> str:
    return f"{row['interval']:g} s" if row["interval"] else "never"


def plot(rows: list[dict], path) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 1.6 + 0.45 * len(rows)))
    labels = [f"{label(r['mode'])}: "
              + (f"every {r['interval']:g} s\n({r['kills']} kills)" if r["interval"] else "no kill")
              for r in rows]
    left = [0.0] * len(rows)
    for phase in (*SHOWN, "other"):
        vals = [(r["wall_s"] - sum(r["phases"][p] for p in SHOWN)) if phase == "other"
                else r["phases"][phase] for r in rows]
        vals = [max(0.0, v) for v in vals]
        ax.barh(labels, vals, left=left, label=phase, color=COLOURS[phase])
        left = [a + v for a, v in zip(left, vals, strict=True)]
    for y, r in enumerate(rows):
        ax.text(r["wall_s"] * 1.01, y, f"goodput {r['goodput']:.2f}", va="center", fontsize=8)
    ax.set_xlim(0, max(r["wall_s"] for r in rows) * 1.25)
    ax.set_xlabel("seconds since submit")
    ax.set_title("One 2-worker job's time by phase, a rank killed every interval:\n"
                 "recovered in place, or restarted as a whole", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=4)  # under the bars
    ax.invert_yaxis()
    return save_plot(fig, path)


if __name__ == "__main__":
    cli("goodput", __doc__, add_args, run)
