"""Start-up: submit -> first step through `brigade serve`, against Ray Train's
`TorchTrainer` on the same job, both with their cluster up, interleaved in one run.

    .venv/bin/python -m bench.startup [--rounds 4]

(a) Brigade: `brigade serve` on 127.0.0.1 with its own local Ray head (up
and idle before each trial): POST a 2-worker tiny GPT job over HTTP, then
poll its log until the first step's line appears. The phases come from the
API: admission (the STARTING event), the attempt's start-up phases (its
first metrics row's `startup`: placement group, actors, torch import,
process group, engine import, model build, first step; service/run/launch.py)
and when the first step was visible (the log line's server time) and seen
by the client.

(b) Ray Train: `TorchTrainer` of 2 workers x 1 CPU on gloo, its local
cluster up and settled, from `fit()` to the first step's report, each
worker running Brigade's own engine (the same model build and step:
bench/torch_trainer_peer.py) in a fresh driver process per trial.

The ratio is Brigade's submit -> first step (as the API shows it) over
TorchTrainer's fit() -> first step reported, per round, and its median.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from bench.report import Figure, Goal, cli, load, pyplot, save_plot
from bench.server import BrigadeServer, parse_time, wait_for

GOAL = 0.15  # Brigade's submit -> first step <= this x TorchTrainer's fit() -> first step
BEFORE = (
    "Before the warm pool (this benchmark at commit 94f0b4f, 2 rounds, every rank started cold): "
    "Brigade 4.63 s vs TorchTrainer 12.12 s, 0.38x; of Brigade's, torch import 2.18 s, engine "
    "import 1.01 s, actors 0.47 s, model build 0.57 s, first step 0.26 s. The warm pool "
    "(`BRIGADE_RANK_POOL_SIZE`, workers/cluster/pool.py) takes the imports and the actor start out of a "
    "job's start-up; the model build (meta-device build, `fully_shard`, seeded init) is now the "
    "largest phase."
)
FIRST_STEP = re.compile(r"^step 1/")
PHASES = [  # (key of the first row's `startup`, label)
    ("placement_ready", "placement group"),
    ("actors_ready", "actors"),
    ("torch_imported", "torch import"),
    ("group_formed", "rendezvous (process group)"),
    ("engine_imported", "engine import"),
    ("built", "model build"),
    ("first_step", "first step"),
]


def spec() -> dict:
    return {
        "name": "bench-startup",
        "workers": 2,
        "resources_per_worker": {"cpu": 1},
        "model": {"n_layers": 2, "d_model": 64, "n_heads": 4, "seq_len": 64},
        "data": {"source": "builtin"},
        "train": {"steps": 3, "global_batch_size": 8, "lr": 0.001},
    }


def brigade_trial(server: BrigadeServer, settle_s: float) -> dict:
    """One submit -> first step through the API, with its phases."""
    time.sleep(settle_s)  # the cluster (and anything it keeps warm) idle before the submit
    before = load()
    t_submit = time.time()
    job_id = server.post("/v1/jobs", spec())["id"]
    t_answered = time.time()

    def first_step_line():
        lines = server.get(f"/v1/jobs/{job_id}/logs", limit=1000)
        return next((line for line in lines if FIRST_STEP.match(line["line"])), None)

    line = wait_for("the first step in the job's log", first_step_line, 120, poll_s=0.02)
    t_seen = time.time()
    t_api = parse_time(line["time"])
    events = server.get(f"/v1/jobs/{job_id}/events")
    at = {e["to_state"]: parse_time(e["time"]) for e in reversed(events)}  # the first of each
    [row] = server.get(f"/v1/jobs/{job_id}/metrics", since_step=1, limit=1)
    wait_for("the job's end", lambda: server.get(f"/v1/jobs/{job_id}")["state"]
             in ("SUCCEEDED", "FAILED", "CANCELLED"), 120, 0.2)
    startup = row.get("startup") or {}
    launched = row["wall_time"] - startup.get("total", float("nan"))
    phases = {
        "admission": at.get("STARTING", float("nan")) - t_submit,
        "runner hand-off": launched - at.get("STARTING", float("nan")),
        **{label: startup.get(key, 0.0) for key, label in PHASES},
        "API shows it": t_api - row["wall_time"],
    }
    return {"job": job_id, "total": t_api - t_submit, "seen_by_client": t_seen - t_submit,
            "post_answered": t_answered - t_submit, "phases": phases, "loss": row["loss"],
            "load": (before, load())}


def peer_trial(settle_s: float) -> dict:
    """One TorchTrainer trial in a fresh driver process (bench/torch_trainer_peer.py)."""
    with tempfile.TemporaryDirectory(prefix="startup-peer-") as tmp:
        spec_path, out = os.path.join(tmp, "spec.json"), os.path.join(tmp, "out.json")
        with open(spec_path, "w") as f:
            json.dump(spec(), f)
        before = load()
        subprocess.run([sys.executable, "-m", "bench.torch_trainer_peer", "--spec", spec_path,
                        "--out", out, "--settle", str(settle_s)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
        with open(out) as f:
            t = json.load(f)
    phases = {
        "controller and worker actors, process group": t["entered"] - t["fit"],
        "engine import and model build": t["built"] - t["entered"],
        "first step": t["first_step"] - t["built"],
        "report": t["reported"] - t["first_step"],
    }
    return {"total": t["reported"] - t["fit"], "fit_s": t["fit_returned"] - t["fit"],
            "phases": phases, "loss": t["loss"], "load": (before, load())}


def add_args(parser) -> None:
    parser.add_argument("--rounds", type=int, default=None, help="default 4 (--quick: 1)")
    parser.add_argument("--settle", type=float, default=8.0,
                        help="idle seconds before each trial, the cluster up")


def phase_table(whose: str, trials: list[dict]) -> list[str]:
    """A table of each phase's median and per-round seconds over `trials`."""
    lines = ["", f"{whose} phases (s, median over the rounds):", "",
             "| phase | median | per round |", "| --- | --- | --- |"]
    for phase in trials[0]["phases"]:
        vals = [t["phases"][phase] for t in trials]
        lines.append(f"| {phase} | {statistics.median(vals):.2f} | "
                     + ", ".join(f"{v:.2f}" for v in vals) + " |")
    return lines


def run(args) -> Figure:
    rounds = args.rounds or (1 if args.quick else 4)
    ours, peers = [], []
    with BrigadeServer() as server:
        for i in range(rounds):  # interleaved: the machine's load hits both alike
            ours.append(brigade_trial(server, args.settle))
            print(f"round {i + 1}: Brigade {ours[-1]['total']:.2f} s", file=sys.stderr)
            peers.append(peer_trial(args.settle))
            print(f"round {i + 1}: TorchTrainer {peers[-1]['total']:.2f} s", file=sys.stderr)
    ratios = [o["total"] / p["total"] for o, p in zip(ours, peers, strict=True)]
    ratio = statistics.median(ratios)
    med_ours = statistics.median(o["total"] for o in ours)
    med_peer = statistics.median(p["total"] for p in peers)
    med_fit = statistics.median(p["fit_s"] for p in peers)
    png = plot(ours, peers, args.png_dir / "startup.png")
    s = spec()
    lines = [
        "Both with their cluster up and idle (" + f"{args.settle:g} s before each trial), "
        f"interleaved, {rounds} round(s) in one run. The job: GPT "
        + ", ".join(f"{k} {v}" for k, v in s["model"].items())
        + f", 2 workers x 1 cpu, gloo, global batch {s['train']['global_batch_size']}. "
        "Brigade: `brigade serve` on 127.0.0.1 (its own Ray head, 4 logical CPUs, "
        "`BRIGADE_POLL_INTERVAL_S=0.2`), POST /v1/jobs -> the job's log shows `step 1/` "
        "(the server's timestamp of the line; the client polled every 20 ms). TorchTrainer: "
        "`fit()` -> the first step reported (`ray.train.report` returned on rank 0), a fresh "
        "driver and local cluster per trial, each worker running Brigade's engine "
        "(bench/torch_trainer_peer.py). Ratio: Brigade / TorchTrainer, per round.",
        "",
        "| round | Brigade submit -> first step (s) | TorchTrainer fit() -> first step (s) "
        "| ratio | TorchTrainer whole fit() (s) | load before (ours / peer) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for k, (o, p, r) in enumerate(zip(ours, peers, ratios, strict=True), 1):
        lines.append(f"| {k} | {o['total']:.2f} | {p['total']:.2f} | {r:.3f}x | {p['fit_s']:.1f} "
                     f"| {o['load'][0]:.2f} / {p['load'][0]:.2f} |")
    lines += phase_table("Brigade's", ours) + phase_table("TorchTrainer's", peers)
    lines += [
        "",
        f"Median: Brigade {med_ours:.2f} s, TorchTrainer {med_peer:.2f} s to its first step "
        f"({med_fit:.1f} s for the whole `fit()` of one step, its shutdown included): "
        f"{ratio:.3f}x (rounds: {', '.join(f'{r:.2f}' for r in ratios)}); against the whole "
        f"`fit()`, {med_ours / med_fit:.3f}x.",
        "",
        BEFORE,
        "",
        f"![start-up phases]({png})",
    ]
    return Figure(
        name="startup", title="Start-up: submit -> first step vs Ray Train's TorchTrainer",
        command=f".venv/bin/python -m bench.startup --rounds {rounds} --settle {args.settle:g}",
        body="\n".join(lines) + "\n",
        headline=f"submit -> first step {med_ours:.2f} s vs TorchTrainer's fit() -> first step "
                 f"{med_peer:.2f} s: {ratio:.2f}x",
        goals=[Goal(f"Brigade <= {GOAL:g}x TorchTrainer (submit / fit() -> first step)",
                    f"{ratio:.3f}x ({med_ours:.2f} s vs {med_peer:.2f} s)", ratio <= GOAL)],
        pngs=[png],
    )


def plot(ours: list[dict], peers: list[dict], path) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    rows = [("Brigade", ours), ("TorchTrainer", peers)]
    colours = plt.get_cmap("tab20").colors
    for y, (name, trials) in enumerate(rows):
        left = 0.0
        for i, phase in enumerate(trials[0]["phases"]):
            width = max(0.0, statistics.median(t["phases"][phase] for t in trials))
            ax.barh(y, width, left=left, color=colours[(i + 6 * y) % len(colours)],
                    label=f"{name}: {phase}", edgecolor="white", linewidth=0.5)
            left += width
        ax.text(left, y, f" {statistics.median(t['total'] for t in trials):.2f} s", va="center",
                fontsize=8)
    ax.set_yticks([0, 1], [name for name, _ in rows])
    ax.invert_yaxis()
    ax.set_xlabel("seconds (median phase durations)")
    ax.set_title("Submit (Brigade) / fit() (TorchTrainer) -> first step, cluster up", fontsize=9)
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3)
    ax.grid(axis="x", alpha=0.3)
    return save_plot(fig, path)


if __name__ == "__main__":
    cli("startup", __doc__, add_args, run)
