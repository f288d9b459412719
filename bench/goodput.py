"""Goodput under faults: one job through the real service with a rank killed
every 10, 30 or 60 s, against the same job with no kill.

    .venv/bin/python -m bench.goodput [--seconds 90] [--intervals 10,30,60]

Starts `brigade serve` (its own local Ray head, SQLite, local checkpoints)
on 127.0.0.1; for each interval (0: no kill) submits the same 2-worker job
(long enough never to finish), SIGKILLs one of its ranks (pid from
`GET /v1/jobs/{id}/workers`, rank 0 and 1 in turn) every interval, and after
`--seconds` from its submission reads `GET /v1/jobs/{id}/goodput` (its wall
time so far, phase by phase: service/observability/goodput.py) and cancels
it. Each run is a fresh job on the same server, warmed by a short job first
(not reported): the no-kill run pays the same first start-up as the others.

When a kill lands: `interval` seconds after the previous one (the first,
after the job first runs), or, where the job is still recovering then, as
soon as it runs again with its ranks up: a kill is never wasted on a group
that is already gone, so "every 10 s" kills as often as the service lets it.
The service's restart backoff (0.5 s x 2^(k-1) before the k-th restart, at
most 10 s; `BRIGADE_RESTART_BACKOFF_S`) is part of what a kill costs.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time

from bench.report import Figure, Goal, cli, pyplot, save_plot
from bench.server import BrigadeServer, wait_for

SHOWN = ("training", "starting", "recovering", "lost", "checkpoint_stall", "queued")
COLOURS = {"training": "tab:green", "starting": "tab:gray", "recovering": "tab:orange",
           "lost": "tab:red", "checkpoint_stall": "tab:blue", "queued": "tab:purple",
           "other": "black"}


def spec(every: int) -> dict:
    return {
        "name": "bench-goodput",
        "workers": 2,
        "resources_per_worker": {"cpu": 1},
        "model": {"n_layers": 2, "d_model": 64, "n_heads": 4, "seq_len": 64},
        "data": {"source": "builtin"},
        "train": {"steps": 1_000_000, "global_batch_size": 8, "lr": 0.001},
        "checkpoint": {"every_steps": every, "keep_last": 2},
        "max_restarts": 100,  # the kills must never exhaust it
    }


def one_run(server: BrigadeServer, interval: float, seconds: float, every: int) -> dict:
    """The job's goodput `seconds` after its submission, a rank killed every `interval` (0: none)."""
    job_id = server.post("/v1/jobs", spec(every))["id"]
    submitted = time.time()
    kills = 0
    try:
        wait_for("job running", lambda: server.get(f"/v1/jobs/{job_id}")["state"] == "RUNNING", 240, 0.2)
        due = time.time() + interval
        while time.time() - submitted < seconds:
            time.sleep(0.1)
            if not interval or time.time() < due:
                continue
            if server.get(f"/v1/jobs/{job_id}")["state"] != "RUNNING":
                continue  # still recovering from the last kill: kill it once it runs again
            ranks = [w for w in server.get(f"/v1/jobs/{job_id}/workers") if w["pid"]]
            if len(ranks) < 2:
                continue
            try:
                os.kill(ranks[kills % len(ranks)]["pid"], signal.SIGKILL)
            except ProcessLookupError:
                continue  # it went meanwhile: the next poll picks again
            kills += 1
            due = time.time() + interval
        good = server.get(f"/v1/jobs/{job_id}/goodput")
        job = server.get(f"/v1/jobs/{job_id}")
    finally:
        server.post(f"/v1/jobs/{job_id}/cancel")
        wait_for("job cancelled", lambda: server.get(f"/v1/jobs/{job_id}")["state"]
                 in ("CANCELLED", "FAILED", "SUCCEEDED"), 120, 0.3)
    phases = good["phases"]
    row = {"interval": interval, "kills": kills, "restarts": job["restarts"], "step": job["step"],
           "wall_s": good["wall_s"], "goodput": good["goodput"], "phases": phases,
           "sum_s": sum(phases.values())}
    print(f"every {interval or '-'} s: {kills} kills, goodput {good['goodput']:.3f}, lost "
          f"{phases['lost']:.1f} s, recovering {phases['recovering']:.1f} s, step {job['step']}",
          file=sys.stderr)
    return row


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
    parser.add_argument("--every", type=int, default=10, help="checkpoint every this many steps")


def run(args) -> Figure:
    seconds = args.seconds or (30.0 if args.quick else 90.0)
    intervals = [float(x) for x in (args.intervals or ("10" if args.quick else "10,30,60")).split(",")]
    with BrigadeServer() as server:
        warm_up(server)
        rows = [one_run(server, interval, seconds, args.every) for interval in [0.0, *intervals]]
    s = spec(args.every)
    lines = [
        "`brigade serve` on 127.0.0.1 with its own local Ray head (4 logical CPUs on these 2 "
        "cores), `BRIGADE_POLL_INTERVAL_S=0.2`, restart backoff 0.5 s x 2^(k-1) before the k-th "
        "restart (at most 10 s). One job a run, fresh each time on the same warm server: GPT "
        + ", ".join(f"{k} {v}" for k, v in s["model"].items())
        + f", 2 workers x 1 cpu, global batch {s['train']['global_batch_size']}, checkpoint every "
        f"{args.every} steps (blocking), never finishing; its goodput read from "
        f"`GET /v1/jobs/{{id}}/goodput` {seconds:g} s after its submission, then cancelled. "
        "A rank killed (SIGKILL, rank 0 and 1 in turn) every interval after the job first ran, or "
        "as soon as it runs again where it is still recovering when one is due.",
        "",
        "| kill every | kills | restarts | steps | goodput | training (s) | recovering (s) | lost (s) "
        "| starting (s) | checkpoint stall (s) | queued (s) | phases sum / wall |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        p = r["phases"]
        lines.append(
            f"| {every(r)} | {r['kills']} | {r['restarts']} "
            f"| {r['step']} | {r['goodput']:.3f} | {p['training']:.1f} | {p['recovering']:.1f} "
            f"| {p['lost']:.1f} | {p['starting']:.1f} | {p['checkpoint_stall']:.1f} "
            f"| {p['queued']:.1f} | {r['sum_s']:.1f} / {r['wall_s']:.1f} |")
    base = rows[0]
    lines += [
        "",
        "`recovering` is a kill to the next attempt's first new step (detection, the backoff, "
        "placement, the ranks, the group, the checkpoint load and that step); `lost` the time the "
        "killed attempt spent on steps after its last surviving row, done again by the next one "
        f"(at most the {args.every}-step checkpoint interval); `starting` the job's first start-up. "
        "A kill's cost is its recovery and its lost steps, and the backoff before a restart "
        "doubles with each restart of the job, so the more often a rank is killed, the longer "
        "each recovery. Against the no-kill run: "
        + "; ".join(f"every {r['interval']:g} s, goodput {r['goodput'] / base['goodput']:.2f}x, "
                    f"{(r['phases']['recovering'] + r['phases']['lost']) / max(1, r['kills']):.1f} s "
                    "recovering + lost a kill"
                    for r in rows[1:] if base["goodput"]) + ". "
        "Other jobs share these 2 cores: a step's time moves between runs, and with it `training`; "
        "so does the job's first start-up (`starting`, "
        f"{min(r['phases']['starting'] for r in rows):.1f} to "
        f"{max(r['phases']['starting'] for r in rows):.1f} s here), which no kill causes and "
        "which alone can put a run with a rare kill above the one without: what the kills cost "
        "is `recovering` + `lost` (the second goal).",
    ]
    png = plot(rows, args.png_dir / "goodput.png")
    lines += ["", f"![where the job's time went, by kill interval]({png})"]
    sums_ok = all(abs(r["sum_s"] - r["wall_s"]) <= 0.02 * r["wall_s"] for r in rows)
    # No kill first, then ever shorter intervals: what the kills cost must not shrink along it
    # (goodput itself moves with the first start-up too, which the load decides, not the kills).
    by_rate = sorted(rows, key=lambda r: -r["interval"] if r["interval"] else -math.inf)
    costs = [r["phases"]["recovering"] + r["phases"]["lost"] for r in by_rate]
    grows = all(a <= b for a, b in zip(costs, costs[1:], strict=False))
    return Figure(
        name="goodput", title="Goodput under faults",
        command=(f".venv/bin/python -m bench.goodput --seconds {seconds:g} --intervals "
                 + ",".join(f"{i:g}" for i in intervals)),
        body="\n".join(lines) + "\n",
        headline="goodput " + ", ".join(
            f"{r['goodput']:.2f} ({'kill every ' + every(r) if r['interval'] else 'no kill'})"
            for r in rows),
        goals=[Goal("phases sum to wall time (within 2%), every run",
                    ", ".join(f"{r['sum_s'] / r['wall_s']:.4f}" for r in rows), sums_ok),
               Goal("recovering + lost never less with more frequent kills",
                    " <= ".join(f"{c:.1f} s" for c in costs), grows)],
        pngs=[png],
    )


def every(row: dict) -> str:
    return f"{row['interval']:g} s" if row["interval"] else "never"


def plot(rows: list[dict], path) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    labels = [f"every {r['interval']:g} s\n({r['kills']} kills)" if r["interval"] else "no kill"
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
    ax.set_title("One 2-worker job's time by phase, a rank killed every interval", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=7)  # under the bars
    ax.invert_yaxis()
    return save_plot(fig, path)


if __name__ == "__main__":
    cli("goodput", __doc__, add_args, run)
