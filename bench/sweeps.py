"""Sweeps: a trial's end to the next trial's first step; what ASHA saves.

    .venv/bin/python -m bench.sweeps [--quick] [--load N] [--search-steps S]

One `brigade serve` of 4 CPUs. (a) A sweep of 6 tiny trials, one at a time
(`max_concurrent: 1`, a grid over `train.lr`): for each trial after the first,
the time from the previous trial's final event (SUCCEEDED) to the end of its
own first step (its first metrics row's `wall_time`), split at the next job's
creation and its STARTING: the sweep's pass (the end seen, Optuna told and
asked, the submit), the scheduler's admission, and the rank's start with one step.
(b) The same space and seed (random sampler over a log-uniform learning rate,
high enough at the top to diverge) twice, each as its own tenant: without a
pruner and with ASHA, judged on the loss smoothed (`objective.smoothing:
ema`). Each run's worker-seconds (`GET /v1/usage`, the tenant's), the best
objective each found, each trial's steps and held seconds; the steps each
pruned trial's ranks began after the pruning decision (its PRUNING event:
rows whose step began, `wall_time - step_time_s`, after it); and, from the
run without a pruner, whether its best trial is better at every rung than
every other, in which case ASHA must keep it and find the same best.
`--load N` runs N busy processes beside (b), a loaded machine's share of the
cores; `--search-steps` makes its trials long enough to be still training
when their pruner speaks (a 120-step trial of this tiny model can end first
on a loaded machine, and then shows nothing of the stop).
"""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import sys
import time

from bench.figures import TITLES
from bench.report import Figure, Goal, cli, save_plot
from bench.server import BrigadeServer, parse_time, wait_for
from service.sweeps.objective import ObjectiveSeries, rung_steps
from workers.schema.sweep import SweepSpec

MODEL = {"n_layers": 2, "d_model": 32, "n_heads": 4, "seq_len": 32}
FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
OBJECTIVE = {"metric": "loss", "mode": "min", "smoothing": "ema", "ema_factor": 0.8}


def base(steps: int, workers: int = 1) -> dict:
    return {"workers": workers, "resources_per_worker": {"cpu": 1}, "model": MODEL,
            "data": {"source": "builtin"},
            "train": {"steps": steps, "global_batch_size": 4, "warmup_steps": 2},
            "checkpoint": {"every_steps": steps, "keep_last": 1}}


def handover_sweep(trials: int, steps: int) -> dict:
    lrs = [round(1e-3 * (k + 1), 4) for k in range(trials)]
    return {"name": "handover", "base": base(steps), "space": {"train.lr": {"grid": lrs}},
            "sampler": "grid", "objective": {"metric": "loss", "mode": "min"},
            "max_trials": trials, "max_concurrent": 1}


def search_sweep(name: str, pruner: str, trials: int, steps: int) -> dict:
    spec = {"name": name, "base": base(steps),
            "space": {"train.lr": {"loguniform": [1e-4, 3.0]}},
            "sampler": "random", "seed": 0, "objective": OBJECTIVE,
            "max_trials": trials, "max_concurrent": 2, "pruner": pruner}
    if pruner == "asha":
        spec["pruner_options"] = {"min_steps": max(2, steps // 8), "reduction_factor": 3}
    return spec


def add_args(parser) -> None:
    parser.add_argument("--timeout-s", type=float, default=600.0, help="each sweep")
    parser.add_argument("--load", type=int, default=0,
                        help="busy processes run beside the search sweeps (a loaded machine)")
    parser.add_argument("--search-steps", type=int, default=120, help="steps of each search trial")


@contextlib.contextmanager
def busy(processes: int):
    """`processes` pure-Python busy loops (each ends by itself within 15 minutes)."""
    loop = "import time\nend = time.time() + 900\nwhile time.time() < end: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(processes)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def run(args) -> Figure:
    handover_trials, handover_steps = (3, 3) if args.quick else (6, 5)
    search_trials, search_steps = (4, 16) if args.quick else (8, args.search_steps)
    with BrigadeServer() as server:
        gaps, handover = handover_gaps(server, handover_sweep(handover_trials, handover_steps),
                                       args.timeout_s)
        with busy(args.load):
            searches = {pruner: search(server, pruner, search_trials, search_steps, args.timeout_s)
                        for pruner in ("none", "asha")}
    median = statistics.median(g["total"] for g in gaps)
    none, asha = searches["none"], searches["asha"]
    seconds_ratio = asha["worker_seconds"] / none["worker_seconds"]
    asha_spec = SweepSpec.model_validate(search_sweep("rungs", "asha", search_trials, search_steps))
    rungs = rung_steps(asha_spec)
    leader = rung_leader(none, rungs, asha_spec)
    after = [t["begun_after"] for t in asha["trials"] if t["begun_after"] is not None]
    most_after = max(after, default=0)
    same_best = asha["best_number"] == none["best_number"]
    lines = [
        "`brigade serve` on 127.0.0.1 with its own local Ray head (4 logical CPUs on these 2 "
        "cores), `BRIGADE_POLL_INTERVAL_S=0.2`. GPT "
        + ", ".join(f"{k} {v}" for k, v in MODEL.items())
        + ", 1 worker x 1 cpu, global batch 4.",
        "",
        f"**A trial's end to the next trial's first step.** A grid of {handover_trials} trials "
        f"over `train.lr`, {handover_steps} steps each, `max_concurrent: 1`: from a trial's "
        "SUCCEEDED event to the end of the next trial's first step (its first metrics row's "
        "`wall_time`). That is the sweep's pass seeing the end and asking Optuna for the next "
        "point, the submit, the scheduler's admission, the rank's start (forked) and one step.",
        "",
        "| hand-over | the pass: end -> next job (s) | admission: -> STARTING (s) "
        "| start: -> first step's end (s) | in all (s) |",
        "|---:|---:|---:|---:|---:|",
        *[f"| {k + 1} | {g['pass']:.2f} | {g['admit']:.2f} | {g['start']:.2f} | {g['total']:.2f} |"
          for k, g in enumerate(gaps)],
        "",
        f"**Median {median:.2f} s** over {len(gaps)} hand-overs (sweep {handover}); of it the "
        f"sweep's own pass {statistics.median(g['pass'] for g in gaps):.2f} s median, the "
        f"scheduler's admission {statistics.median(g['admit'] for g in gaps):.2f} s and the "
        f"rank's start with the first step {statistics.median(g['start'] for g in gaps):.2f} s. "
        "The load average above counts other work sharing these 2 cores: the start-up, a "
        "process's, is what it slows most.",
        "",
        f"**ASHA against no pruner.** The same sweep twice, each as its own tenant: "
        f"`train.lr` log-uniform over [1e-4, 3], random sampler, seed 0 (so the same "
        f"{search_trials} points in the same order), {search_steps} steps a trial, "
        "`max_concurrent: 2`, objective the `loss` smoothed (`smoothing: ema, ema_factor: "
        f"{OBJECTIVE['ema_factor']}`, min); ASHA with `min_steps: {max(2, search_steps // 8)}, "
        f"reduction_factor: 3`: rungs at steps {', '.join(map(str, rungs))}. Worker-seconds are "
        "the tenant's (`GET /v1/usage`: each job's time holding its workers)."
        + (f" Beside both runs, {args.load} busy processes (pure-Python loops) load the "
           "machine's cores." if args.load else ""),
        "",
        "| pruner | trials succeeded | pruned | worker-seconds | best objective | best trial "
        "| best lr |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *[f"| {p} | {r['succeeded']} | {r['pruned']} | {r['worker_seconds']:.1f} "
          f"| {r['best']:.4f} | {r['best_number']} | {r['best_lr']:.3g} |"
          for p, r in searches.items()],
        "",
        "Each trial (the same point in both runs):",
        "",
        "| trial | lr | none: steps | none: held (s) | none: objective | asha: state "
        "| asha: pruned at | asha: objective there | asha: steps | asha: begun after the decision "
        "| asha: held (s) |",
        "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|",
        *[f"| {n['number']} | {n['lr']:.3g} | {n['step']} | {n['held_s']:.1f} "
          f"| {_loss(n['objective'])} | {a['state']} | {a['pruned_step'] or '-'} "
          f"| {_loss(a['objective'])} | {a['step']} "
          f"| {'-' if a['begun_after'] is None else a['begun_after']} | {a['held_s']:.1f} |"
          for n, a in zip(none["trials"], asha["trials"], strict=False)],
        "",
        f"A pruned trial went from PRUNING to PRUNED in {_lags(asha)}. `pruned at` is the rung "
        "step whose objective the pruner judged; the ranks are told to stop the moment it "
        "decides, and `begun after the decision` counts the steps they began after it (rows "
        "whose step began, `wall_time - step_time_s`, after the PRUNING event); the steps "
        "between `pruned at` and `steps` are the ones the ranks had taken already when the "
        "decision came (the rows' way to the store, a runner poll, and the sweep's pass). Held "
        "is the job's goodput phases but `queued`.",
        "",
        f"**Steps begun after the pruning decision: at most {most_after}** over the "
        f"{len(after)} pruned trials still training when their pruner decided (`-`: its ranks "
        "had taken all their steps before the verdict came). The stop is a key the sweep "
        "pass's thread writes in the cluster's GCS the moment the pruner decides (before the "
        "store's PRUNING is written: that write waits its turn behind the runners' rows on a "
        "busy database, tenths of a second under load), and that rank 0's training thread "
        "reads itself after every step of a sweep trial (workers/cluster/stop_signal.py); the "
        "ranks then agree to stop at that boundary. The PRUNING event is dated at the verdict, "
        "so the count runs from the decision itself: a step whose boundary read came just "
        "before the key landed begins after it, and the next boundary stops. An actor call "
        "(`request_stop`, answered on the rank's second thread) follows the key, for a rank "
        "that could not read the GCS. Before the key (2026-12-05, the actor call alone, whose "
        "way to a rank took 2 to 26 ms on this loaded machine against steps of 10 to 30 ms), "
        "the same run had its pruned trials begin 5, 1, 0, 0, 0 and 0 steps after the decision.",
        "",
        f"**ASHA used {seconds_ratio:.2f}x the worker-seconds of no pruner**, and found a best "
        f"objective {asha['best']:.4f} (trial {asha['best_number']}) against {none['best']:.4f} "
        f"(trial {none['best_number']}). " + _leader_line(leader, same_best, rungs),
    ]
    png = plot(gaps, searches, args.png_dir / "sweeps.png")
    lines += ["", f"![hand-over gaps; worker-seconds and best loss with and without ASHA]({png})"]
    return Figure(
        name="sweeps", title=TITLES["sweeps"],
        command=".venv/bin/python -m bench.sweeps" + (
            f" --load {args.load}" if args.load else "") + (
            f" --search-steps {args.search_steps}" if args.search_steps != 120 else ""),
        body="\n".join(lines) + "\n",
        headline=(f"hand-over median {median:.2f} s; ASHA {seconds_ratio:.2f}x the worker-seconds, "
                  f"best {asha['best']:.3f} vs {none['best']:.3f}; at most {most_after} "
                  f"step{'' if most_after == 1 else 's'} begun after a prune"),
        goals=[Goal("ASHA uses fewer worker-seconds than no pruner", f"{seconds_ratio:.2f}x",
                    seconds_ratio < 1.0),
               Goal("a pruned trial's ranks begin at most 1 step after the decision",
                    f"at most {most_after}", most_after <= 1),
               *([Goal("ASHA finds the best trial of no pruner, which leads at every rung",
                       f"trial {asha['best_number']} vs {none['best_number']}", same_best)]
                 if leader is not None else [])],
        pngs=[png],
    )


def run_sweep(server: BrigadeServer, spec: dict, timeout_s: float, key: str | None = None) -> dict:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    r = server.http.post("/v1/sweeps", json=spec, headers=headers)
    if r.status_code >= 400:
        raise RuntimeError(f"POST /v1/sweeps: {r.status_code} {r.text}")
    sweep_id = r.json()["id"]

    def final():
        view = server.get(f"/v1/sweeps/{sweep_id}")
        return view if view["state"] in FINAL else None

    view = wait_for(f"sweep {sweep_id}", final, timeout_s, poll_s=0.5)
    if view["state"] != "SUCCEEDED":
        raise RuntimeError(f"sweep {sweep_id} {view['state']}: {view['error']}")
    return view


def handover_gaps(server: BrigadeServer, spec: dict, timeout_s: float) -> tuple[list[dict], str]:
    """Each hand-over's seconds: from the trial's end to the next job's creation
    (the sweep's pass: the end seen, Optuna told and asked, the submit), to its
    STARTING (the scheduler's admission) and to the end of its first step (the
    rank's start, the model's build, one step)."""
    view = run_sweep(server, spec, timeout_s)
    jobs = [t["job"] for t in sorted(view["trials"], key=lambda t: t["number"])]
    gaps = []
    for before, after in zip(jobs, jobs[1:], strict=False):
        ended = parse_time(next(e for e in server.get(f"/v1/jobs/{before}/events")
                                if e["to_state"] == "SUCCEEDED")["time"])
        created = parse_time(server.get(f"/v1/jobs/{after}")["created_at"])
        starting = parse_time(next(e for e in server.get(f"/v1/jobs/{after}/events")
                                   if e["to_state"] == "STARTING")["time"])
        first_step = server.get(f"/v1/jobs/{after}/metrics", limit=1)[0]["wall_time"]
        gaps.append({"pass": created - ended, "admit": starting - created,
                     "start": first_step - starting, "total": first_step - ended})
    return gaps, view["id"]


def search(server: BrigadeServer, pruner: str, trials: int, steps: int, timeout_s: float) -> dict:
    tenant = f"sweep-{pruner}"
    key = server.post("/v1/tenants", {"name": tenant})["api_key"]
    started = time.time()
    view = run_sweep(server, search_sweep(f"lr-{pruner}", pruner, trials, steps), timeout_s, key)
    window = time.time() - started + 60
    usage = server.get("/v1/usage", window_s=window, tenant=tenant)["tenants"]
    worker_seconds = sum(u["worker_seconds"] for u in usage if u["tenant"] == tenant)
    counts, best = view["counts"], view["best"]
    rows = {t["number"]: server.get(f"/v1/jobs/{t['job']}/metrics", limit=100_000)
            for t in view["trials"] if t["job"]}
    return {"id": view["id"], "worker_seconds": worker_seconds, "best": best["objective"],
            "best_lr": best["params"]["train.lr"], "best_number": best["number"],
            "succeeded": counts["SUCCEEDED"], "pruned": counts["PRUNED"], "rows": rows,
            "trials": [trial_row(server, t, rows.get(t["number"], [])) for t in view["trials"]]}


def rung_leader(run: dict, rungs: list[int], spec: SweepSpec) -> int | None:
    """The run's best trial if its objective is better than every other
    trial's at every rung step (what ASHA compares), else None."""
    at: dict[int, dict[int, float]] = {}
    for number, rows in run["rows"].items():
        series = ObjectiveSeries(spec.objective)
        series.feed(rows)
        at[number] = {r: series.values[r] for r in rungs if r in series.values}
    best = run["best_number"]
    better = all(at[best].get(r) is not None and all(
        at[best][r] < values[r] for n, values in at.items() if n != best and r in values)
        for r in rungs)
    return best if better else None


def trial_row(server: BrigadeServer, trial: dict, rows: list[dict]) -> dict:
    """A trial's point, end, steps, the seconds its job held its worker (its
    goodput phases but queued) and, pruned, the seconds from the prune to
    PRUNED and the steps its ranks began after the prune (the decision)."""
    job = trial["job"]
    lag = begun_after = None
    if trial["state"] == "PRUNED":  # its job may still be stopping (PRUNING) as the sweep ends
        events = wait_for(f"job {job} PRUNED", lambda: (lambda es: es if any(
            e["to_state"] == "PRUNED" for e in es) else None)(server.get(f"/v1/jobs/{job}/events")),
            120, poll_s=0.5)
        asked = next(e for e in events if e["to_state"] == "PRUNING")
        done = next(e for e in events if e["to_state"] == "PRUNED")
        decided = parse_time(asked["time"])
        lag = parse_time(done["time"]) - decided
        rows = server.get(f"/v1/jobs/{job}/metrics", limit=100_000)  # as its ranks stopped
        if rows and max(r["wall_time"] for r in rows) > decided:  # still training at the verdict
            begun_after = sum(1 for r in rows if r["wall_time"] - r["step_time_s"] > decided)
    phases = server.get(f"/v1/jobs/{job}/goodput")["phases"]
    held = sum(v for phase, v in phases.items() if phase not in ("queued", "suspended"))
    step = server.get(f"/v1/jobs/{job}")["step"] if lag is not None else trial["step"]
    return {"number": trial["number"], "lr": trial["params"]["train.lr"], "state": trial["state"],
            "step": step, "objective": trial["objective"], "last_loss": trial.get("last_loss"),
            "held_s": held, "lag_s": lag, "begun_after": begun_after,
            "pruned_step": trial["pruned_step"]}


def _leader_line(leader: int | None, same_best: bool, rungs: list[int]) -> str:
    """Whether ASHA had to keep no pruner's best trial, and did."""
    where = f"steps {', '.join(map(str, rungs))}"
    if leader is None:
        return (f"Without a pruner the best trial was not ahead of every other at each rung "
                f"({where}), so ASHA may rightly stop it: its rungs compare trials there.")
    return (f"Without a pruner trial {leader} was the best and ahead of every other trial at "
            f"each rung ({where}): ASHA " + ("kept it and found the same best." if same_best
                                             else "did NOT find it as its best."))


def _loss(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _lags(run: dict) -> str:
    lags = [t["lag_s"] for t in run["trials"] if t["lag_s"] is not None]
    if not lags:
        return "- (none was pruned)"
    return f"{statistics.median(lags):.2f} s median ({min(lags):.2f} to {max(lags):.2f} s)"


def plot(gaps: list[dict], searches: dict[str, dict], path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(10, 3.4))
    labels, bottom = [str(k + 1) for k in range(len(gaps))], [0.0] * len(gaps)
    for part, colour in (("pass", "#4c78a8"), ("admit", "#f58518"), ("start", "#72b7b2")):
        values = [g[part] for g in gaps]
        left.bar(labels, values, bottom=bottom, color=colour, label=part)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    left.axhline(statistics.median(g["total"] for g in gaps), color="#e45756", linestyle="--",
                 label="median")
    left.set(title="trial end -> next first step", xlabel="hand-over", ylabel="seconds")
    left.legend(fontsize=7)
    names = list(searches)
    middle.bar(names, [searches[n]["worker_seconds"] for n in names], color=["#9d9d9d", "#54a24b"])
    middle.set(title="worker-seconds", xlabel="pruner")
    right.bar(names, [searches[n]["best"] for n in names], color=["#9d9d9d", "#54a24b"])
    right.set(title="best objective found", xlabel="pruner")
    return save_plot(fig, path)


if __name__ == "__main__":
    cli("sweeps", __doc__, add_args, run)
