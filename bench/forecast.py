"""When a queued job will start: the forecast's error over a mixed workload.

    .venv/bin/python -m bench.forecast [--quick]

A `brigade serve` of 4 CPUs takes three tenants' jobs at once: tiny models
of three shapes (1, 2 and 4 workers), 30 to 120 steps, priorities 0 and 5,
more than the cluster holds, so most of them queue. Every 0.5 s the admin's
`GET /v1/cluster` lists every queued job with its `expected_start`; each
job's estimate is sampled when it is first seen queued with one (a job first
seen with none, because nothing of its shape has stepped yet, is counted).
Once all have run, each sampled job's real start (its first STARTING event)
gives its real wait from the sample; the error is |predicted wait - real
wait| / real wait, and the figure is its median.
"""

from __future__ import annotations

import statistics
import time

from bench.report import Figure, cli
from bench.server import BrigadeServer, parse_time

SMALL = {"n_layers": 2, "d_model": 64, "n_heads": 4, "seq_len": 32}
MEDIUM = {"n_layers": 4, "d_model": 128, "n_heads": 4, "seq_len": 64}
# (tenant, workers, model, steps, priority), submitted in this order.
WORKLOAD = [
    ("team-a", 4, MEDIUM, 60, 0), ("team-b", 2, SMALL, 80, 0), ("team-c", 1, SMALL, 120, 0),
    ("team-a", 2, SMALL, 60, 0), ("team-b", 4, MEDIUM, 40, 5), ("team-c", 1, SMALL, 90, 0),
    ("team-a", 1, SMALL, 100, 5), ("team-b", 2, SMALL, 50, 0), ("team-c", 4, MEDIUM, 30, 0),
    ("team-a", 2, SMALL, 70, 0), ("team-b", 1, SMALL, 60, 0), ("team-c", 2, SMALL, 40, 5),
]


def job_spec(workers: int, model: dict, steps: int, priority: int) -> dict:
    return {"name": f"fc-{workers}w-{steps}", "workers": workers,
            "resources_per_worker": {"cpu": 1}, "model": model, "data": {"source": "builtin"},
            "train": {"steps": steps, "global_batch_size": 12, "lr": 0.003},
            "checkpoint": {"every_steps": 20, "keep_last": 1}, "priority": priority}


def add_args(parser) -> None:
    parser.add_argument("--timeout-s", type=float, default=280.0)


def run(args) -> Figure:
    workload = WORKLOAD[:6] if args.quick else WORKLOAD
    with BrigadeServer() as server:
        keys = {tenant: server.post("/v1/tenants", {"name": tenant, "max_priority": 10})["api_key"]
                for tenant in sorted({t for t, *_ in workload})}
        ids = [_submit(server, keys[tenant], job_spec(w, m, s, p))
               for tenant, w, m, s, p in workload]
        samples: dict[str, tuple[float, float]] = {}  # job -> (read at, expected start)
        unforecast: set[str] = set()
        deadline = time.monotonic() + args.timeout_s
        while time.monotonic() < deadline:
            read_at = time.time()
            queue = server.get("/v1/cluster")["queue"]
            for q in queue:
                if q["id"] in samples:
                    continue
                if q["expected_start"]:
                    samples[q["id"]] = (read_at, parse_time(q["expected_start"]))
                else:
                    unforecast.add(q["id"])
            states = [server.get(f"/v1/jobs/{i}")["state"] for i in ids]
            if all(s in ("SUCCEEDED", "FAILED", "CANCELLED") for s in states):
                break
            time.sleep(0.5)
        errors, rows = [], []
        for job_id, (read_at, expected) in samples.items():
            events = server.get(f"/v1/jobs/{job_id}/events")
            started = next((e for e in events if e["to_state"] == "STARTING"), None)
            if started is None:
                continue
            real = parse_time(started["time"]) - read_at
            predicted = expected - read_at
            if real < 1.0:  # started at the next pass: nothing to forecast
                continue
            errors.append(abs(predicted - real) / real)
            rows.append((job_id, predicted, real))
    median = statistics.median(errors) if errors else float("nan")
    lines = [
        f"{len(workload)} jobs of 3 tenants on 4 CPUs (shapes: 1 and 2 workers of a 2-layer "
        "d_model 64 model, 4 workers of a 4-layer d_model 128 one; 30-120 steps; priorities "
        "0 and 5), all submitted at once. Each queued job's `expected_start` is sampled when "
        "it is first seen queued with one, and compared with its first STARTING event.",
        "",
        "| job | predicted wait (s) | real wait (s) | error |",
        "|---|---:|---:|---:|",
        *[f"| `{j}` | {p:.1f} | {r:.1f} | {abs(p - r) / r:.0%} |" for j, p, r in rows],
        "",
        f"**Median error: {median:.0%} of the real wait** over {len(errors)} jobs that waited "
        f"at least 1 s after their sample; {len(unforecast - set(samples))} queued job(s) "
        f"never had an estimate (nothing of their shape had stepped before they started), "
        f"and {len(unforecast & set(samples))} had none at first sight but one later.",
        "",
        "The forecast (service/scheduling/forecast.py) runs the scheduler's own admission "
        "and preemption rules forward over each running job's remaining steps times its "
        "recent seconds per step (from its rows' `wall_time`); a queued job's own pace is "
        "the latest seen for a job of its shape. Its error grows with how far ahead a job "
        "is: a job three jobs back inherits the errors of the start-up and pace estimates "
        "of each job ahead of it.",
    ]
    return Figure(
        name="forecast", title="When a queued job will start",
        command=".venv/bin/python -m bench.forecast",
        body="\n".join(lines) + "\n",
        headline=f"median error {median:.0%} of the real wait ({len(errors)} jobs)",
        goals=[],
    )


def _submit(server: BrigadeServer, key: str, spec: dict) -> str:
    """Submit with the tenant's own key."""
    r = server.http.post("/v1/jobs", json=spec, headers={"Authorization": f"Bearer {key}"})
    if r.status_code >= 400:
        raise RuntimeError(f"submit: {r.status_code} {r.text}")
    return r.json()["id"]


if __name__ == "__main__":
    cli("forecast", __doc__, add_args, run)
