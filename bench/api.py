"""REST API latency at 100 concurrent clients, against `brigade serve` on loopback.

    .venv/bin/python -m bench.api [--clients 100] [--requests 40] [--jobs 500]

Before the server starts, its SQLite store is filled (through `JobStore`,
the same code the server runs) with `--jobs` finished jobs, so that listing
and lookups work on a store that is not empty. Then `--clients` concurrent
clients (asyncio tasks in one process, each with its own keep-alive
connection) send `--requests` requests each, a fixed mix:

- `GET /v1/jobs?limit=50` (a page, newest first), 40%;
- `GET /v1/jobs/{id}` of a random job, 40%;
- `POST /v1/jobs`, 20%: a tiny job with an `Idempotency-Key` already used, so
  the server does the whole submit (auth, spec validation, the runnability
  and capacity checks, the store's transaction) and answers 200 with the
  existing job rather than starting a new one on these 2 cores.

Per-tenant rate limits would turn most of these into 429s: the bench sets
`BRIGADE_RATE_LIMIT_PER_S` and `BRIGADE_RATE_LIMIT_BURST` to 10^6.
Latency is measured by the client, so it includes the client's own event
loop, which shares the 2 cores with the server (and Ray's idle head).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import time

import httpx

from bench.report import Figure, cli, load, pyplot, save_plot
from bench.server import KEY, BrigadeServer

RATE = "1000000"
SPEC = {
    "name": "bench-api",
    "workers": 1,
    "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16},
    "train": {"steps": 10},
}
IDEMPOTENCY_KEY = "bench-api-post"
ROUTES = ("GET /v1/jobs", "GET /v1/jobs/{id}", "POST /v1/jobs (idempotent)")


def fill_store(server: BrigadeServer, jobs: int) -> list[str]:
    """`jobs` CANCELLED jobs of the admin, one of them under IDEMPOTENCY_KEY."""
    from service.states import JobState
    from service.store import JobStore
    from service.store.tenants import ADMIN_TENANT
    from workers.spec import JobSpec

    store = JobStore(server.database_url)
    store.migrate()
    spec = JobSpec.model_validate(SPEC)
    ids = []
    try:
        for i in range(jobs):
            job, _ = store.create_job(tenant=ADMIN_TENANT, name=f"bench-api-{i}", spec=spec,
                                      idempotency_key=IDEMPOTENCY_KEY if i == 0 else None)
            store.transition(job.id, JobState.CANCELLED, reason="made up by bench.api")
            ids.append(job.id)
    finally:
        store.dispose()
    return ids


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


async def drive(url: str, ids: list[str], clients: int, per_client: int, warmup: int, seed: int):
    rng = random.Random(seed)
    headers = {"Authorization": f"Bearer {KEY}"}
    plans = [[rng.choices(ROUTES, weights=(4, 4, 2))[0] for _ in range(warmup + per_client)]
             for _ in range(clients)]
    latencies: dict[str, list[float]] = {r: [] for r in ROUTES}
    codes: dict[int, int] = {}

    async def one(http: httpx.AsyncClient, route: str) -> tuple[float, int]:
        start = time.perf_counter()
        if route == ROUTES[0]:
            r = await http.get("/v1/jobs", params={"limit": 50})
        elif route == ROUTES[1]:
            r = await http.get(f"/v1/jobs/{rng.choice(ids)}")
        else:
            r = await http.post("/v1/jobs", json=SPEC, headers={"Idempotency-Key": IDEMPOTENCY_KEY})
        return time.perf_counter() - start, r.status_code

    start_gate = asyncio.Event()
    ready = 0

    async def client(plan: list[str]) -> None:
        nonlocal ready
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120) as http:
            for route in plan[:warmup]:  # opens the connection; not timed
                await one(http, route)
            ready += 1
            if ready == clients:
                start_gate.set()
            await start_gate.wait()  # all clients start the timed part together
            for route in plan[warmup:]:
                seconds, code = await one(http, route)
                latencies[route].append(seconds)
                codes[code] = codes.get(code, 0) + 1

    t0 = time.perf_counter()
    tasks = [asyncio.create_task(client(p)) for p in plans]
    await start_gate.wait()
    t_timed = time.perf_counter()
    await asyncio.gather(*tasks)
    return latencies, codes, time.perf_counter() - t_timed, t_timed - t0


def add_args(parser) -> None:
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--requests", type=int, default=None,
                        help="timed requests per client (default 40, --quick 5)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="jobs in the store (default 500, --quick 60)")


def run(args) -> Figure:
    per_client = args.requests or (5 if args.quick else 40)
    jobs = args.jobs or (60 if args.quick else 500)
    env = {"BRIGADE_RATE_LIMIT_PER_S": RATE, "BRIGADE_RATE_LIMIT_BURST": RATE}
    server = BrigadeServer(env=env)
    ids = fill_store(server, jobs)
    with server:
        # One client alone first: what a request costs without queueing, the baseline.
        solo_before = load()
        solo, _, solo_wall, _ = asyncio.run(drive(server.url, ids, 1, 5 * per_client, warmup=2,
                                                  seed=1))
        solo_load = (solo_before, load())
        before = load()
        latencies, codes, wall, warm_s = asyncio.run(
            drive(server.url, ids, args.clients, per_client, warmup=2, seed=0))
        after = load()
    total = sum(len(v) for v in latencies.values())
    everything = [x for v in latencies.values() for x in v]
    stats = {route: v for route, v in latencies.items()} | {"all": everything}
    solo_all = [x for v in solo.values() for x in v]
    solo_n = len(solo_all)
    print(f"{total} requests in {wall:.1f} s, codes {codes}", file=sys.stderr)
    lines = [
        f"`brigade serve` on 127.0.0.1 (one uvicorn process, its local Ray head idle), the store "
        f"holding {jobs} finished jobs; {args.clients} concurrent clients (asyncio tasks in one "
        f"process, one keep-alive connection each), {per_client} timed requests each after 2 "
        f"untimed ones, all clients starting the timed part together: {total} requests in "
        f"{wall:.1f} s = {total / wall:.0f} requests/s. Rate limit raised for the bench "
        f"(`BRIGADE_RATE_LIMIT_PER_S={RATE}`, `BRIGADE_RATE_LIMIT_BURST={RATE}`; the default, "
        "50/s with bursts of 100 per tenant, would answer most of these 429). "
        f"Status codes: {', '.join(f'{c}: {n}' for c, n in sorted(codes.items()))}. "
        f"Load average (1 min) {before:.2f} before, {after:.2f} after.",
        "",
        "| route | requests | p50 (ms) | p90 (ms) | p99 (ms) | max (ms) | mean (ms) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for route, v in stats.items():
        lines.append(f"| {route} | {len(v)} | {percentile(v, 50) * 1e3:.0f} "
                     f"| {percentile(v, 90) * 1e3:.0f} | {percentile(v, 99) * 1e3:.0f} "
                     f"| {max(v) * 1e3:.0f} | {statistics.mean(v) * 1e3:.0f} |")
    png = plot(stats, args.clients, args.png_dir / "api_latency.png")
    lines += [
        "",
        f"Baseline, one client alone just before (same server, same mix, {solo_n} requests in "
        f"{solo_wall:.1f} s, load {solo_load[0]:.2f} / {solo_load[1]:.2f}): p50 "
        f"{percentile(solo_all, 50) * 1e3:.1f} ms, p99 {percentile(solo_all, 99) * 1e3:.1f} ms, "
        f"{solo_n / solo_wall:.0f} requests/s. At {args.clients} clients, p50 is "
        f"{percentile(everything, 50) / percentile(solo_all, 50):.0f}x and p99 "
        f"{percentile(everything, 99) / percentile(solo_all, 99):.0f}x the lone client's, and "
        f"throughput {(total / wall) / (solo_n / solo_wall):.2f}x: where that is near 1x, the "
        "server was already as busy as it gets here with one client, and more clients only "
        "queue.",
        "",
        f"With {args.clients} requests always in flight, latency is mostly queueing: by Little's "
        f"law the mean is about clients / throughput = {args.clients / (total / wall) * 1e3:.0f} "
        "ms here. The server runs the synchronous routes in a thread pool under one Python "
        "interpreter, so on 2 shared cores the throughput, not a single request's work, sets "
        "these figures. No latency goal has been set for the API.",
        "",
        f"![API latency distribution]({png})",
    ]
    p50, p99 = percentile(everything, 50) * 1e3, percentile(everything, 99) * 1e3
    return Figure(
        name="api", title="API latency at 100 concurrent clients",
        command=f".venv/bin/python -m bench.api --clients {args.clients} --requests {per_client} "
                f"--jobs {jobs}",
        body="\n".join(lines) + "\n",
        headline=f"all routes: p50 {p50:.0f} ms, p99 {p99:.0f} ms at {args.clients} clients, "
                 f"{total / wall:.0f} req/s",
        goals=[],
        pngs=[png],
    )


def plot(stats: dict[str, list[float]], clients: int, path) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for route, v in stats.items():
        xs = sorted(x * 1e3 for x in v)
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        ax.plot(xs, ys, label=f"{route}: p50 {percentile(v, 50) * 1e3:.0f}, "
                f"p99 {percentile(v, 99) * 1e3:.0f} ms", lw=2 if route == "all" else 1)
    ax.axhline(0.5, color="gray", lw=0.5)
    ax.axhline(0.99, color="gray", lw=0.5)
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(f"brigade serve on loopback, {clients} concurrent clients", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return save_plot(fig, path)


if __name__ == "__main__":
    cli("api", __doc__, add_args, run)
