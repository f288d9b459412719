"""The dashboard with history, and a screenshot of every page.

    .venv/bin/python -m bench.ui [--jobs 10000] [--rows 100000] [--requests 40]

Before `brigade serve` starts, its SQLite store is filled (through the
store's own tables) with `--jobs` finished jobs of one tenant and one job
with `--rows` metrics rows. Then, one request at a time on loopback:

- the jobs page's data, `GET /v1/jobs?limit=50` (first page, a page deep in
  the history, a state filter, a name filter) and the page itself (`GET /`);
- the job page's curves, `GET /v1/jobs/{id}/series?points=2000` over the job
  with `--rows` rows: the time, and the points per series it answers.

Latency is the client's (it includes HTTP on loopback): an upper bound on
the server's time. Goal: the jobs page answers in <= 200 ms.

Then real tiny jobs run (one suspended and resumed on the way, then
exported; one left waiting for room; a dataset's preparation of six
files), and headless Chromium (tests/e2e/browser.py) takes a screenshot of
every page at 1280 px, and of the jobs and job pages at phone width, into
docs/ui/.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from bench.report import Figure, Goal, cli
from bench.server import KEY, BrigadeServer

SPEC = {"name": "history", "workers": 1, "model": {"n_layers": 1, "d_model": 32, "n_heads": 2,
                                                    "seq_len": 16}, "train": {"steps": 10}}
LIVE = {"name": "demo-llama", "workers": 2, "resources_per_worker": {"cpu": 1},
        "model": {"family": "llama", "n_layers": 2, "d_model": 48, "n_heads": 4, "seq_len": 32,
                  "vocab_size": 256},
        "data": {"source": "builtin"}, "train": {"steps": 160, "global_batch_size": 12, "lr": 0.003},
        "checkpoint": {"every_steps": 20, "keep_last": 3}}
GOAL_MS = 200.0


def fill_store(server: BrigadeServer, jobs: int, rows: int) -> str:
    """`jobs` CANCELLED jobs of tenant "history" (each with its two events) and
    one SUCCEEDED job with `rows` metrics rows; the long job's id."""
    from sqlalchemy import insert

    from service.states import JobState
    from service.store import JobStore
    from service.store.engine import transaction
    from service.store.models import Job, JobEvent
    from service.store.store import new_job_id
    from workers.schema import JobSpec

    store = JobStore(server.database_url)
    store.migrate()
    spec = JobSpec.model_validate(SPEC).to_json()
    start = datetime.now(UTC) - timedelta(days=30)
    try:
        store.tenants.create("history", weight=1.0)
        job_rows, events = [], []
        for i in range(jobs):
            at = start + timedelta(minutes=i)
            job_id = new_job_id()
            job_rows.append(dict(id=job_id, tenant="history", name=f"sweep-{i:05d}-lr{i % 7}",
                                 state=JobState.CANCELLED.value, spec=spec, priority=0, step=0,
                                 restarts=0, preemptions=0, attempt=0, created_at=at,
                                 finished_at=at, updated_at=at))
            events += [dict(job_id=job_id, time=at, from_state=None, to_state="QUEUED", reason="submitted"),
                       dict(job_id=job_id, time=at, from_state="QUEUED", to_state="CANCELLED",
                            reason="made up by bench.ui")]
        with transaction(store._writer) as session:
            for k in range(0, len(job_rows), 500):
                session.execute(insert(Job), job_rows[k:k + 500])
            for k in range(0, len(events), 500):
                session.execute(insert(JobEvent), events[k:k + 500])
        long_job, _ = store.create_job(tenant="history", name="long-run", spec=JobSpec.model_validate(SPEC))
        metrics = [{"step": s, "loss": 4.0 * (1 + s) ** -0.15 + 0.05 * ((s * 7919) % 13) / 13,
                    "tokens_per_s": 9000.0 + (s * 31) % 2000, "peak_mem_bytes": 400e6 + (s % 97) * 1e5,
                    "mem_theory_bytes": 350e6, "comm_bytes": 5e5, "comm_bytes_theory": 5e5}
                   for s in range(1, rows + 1)]
        metrics[rows // 3]["loss"] = 9.0  # a spike the downsampling must keep
        store.record_metrics(long_job.id, 1, metrics)
        for to in (JobState.STARTING, JobState.RUNNING, JobState.SUCCEEDED):
            store.transition(long_job.id, to, reason="made up by bench.ui", workers=1)
        store.update_job(long_job.id, step=rows, latest_loss=metrics[-1]["loss"])
    finally:
        store.dispose()
    return long_job.id


def timed(http: httpx.Client, path: str, n: int, **params) -> tuple[list[float], httpx.Response]:
    http.get(path, params=params)  # warm
    seconds, response = [], None
    for _ in range(n):
        t0 = time.perf_counter()
        response = http.get(path, params=params)
        seconds.append(time.perf_counter() - t0)
        response.raise_for_status()
    return seconds, response


def ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return 1e3 * ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def add_args(parser) -> None:
    parser.add_argument("--jobs", type=int, default=None, help="finished jobs (default 10000)")
    parser.add_argument("--rows", type=int, default=None, help="one job's metrics rows (default 100000)")
    parser.add_argument("--requests", type=int, default=None, help="timed requests per route (default 40)")
    parser.add_argument("--no-screenshots", action="store_true")


def run(args) -> Figure:
    jobs = args.jobs or (500 if args.quick else 10_000)
    rows = args.rows or (5_000 if args.quick else 100_000)
    n = args.requests or (5 if args.quick else 40)
    server = BrigadeServer(env={"BRIGADE_RATE_LIMIT_PER_S": "1000000",
                                "BRIGADE_RATE_LIMIT_BURST": "1000000"})
    t0 = time.perf_counter()
    long_id = fill_store(server, jobs, rows)
    fill_s = time.perf_counter() - t0
    lines, results = [], {}
    with server:
        http = server.http
        admin = {"tenant": "history"}
        cases = [
            ("`GET /v1/jobs?limit=50` (newest first)", "/v1/jobs", {"limit": 50, **admin}),
            ("... deep in the history (`offset` = half)", "/v1/jobs",
             {"limit": 50, "offset": jobs // 2, **admin}),
            ("... `state=CANCELLED`", "/v1/jobs", {"limit": 50, "state": "CANCELLED", **admin}),
            ("... `name=lr3`", "/v1/jobs", {"limit": 50, "name": "lr3", **admin}),
        ]
        for label, path, params in cases:
            results[label], r = timed(http, path, n, **params)
            assert r.json()["total"] >= 1 and len(r.json()["items"]) == 50, r.text[:200]
        session = httpx.Client(base_url=server.url, timeout=60)
        session.post("/ui/session", json={"api_key": KEY}).raise_for_status()
        results["the page itself, `GET /` (signed in)"], _ = timed(session, "/", n)
        session.close()
        t0 = time.perf_counter()
        http.get(f"/v1/jobs/{long_id}/series", params={"points": 2000}).raise_for_status()
        cold_s = time.perf_counter() - t0
        series_s, r = timed(http, f"/v1/jobs/{long_id}/series", max(3, n // 4), points=2000)
        body = r.json()
        per_series = {k: len(v["step"]) for k, v in body["series"].items()}
        spike_kept = max(body["series"]["loss"]["value"]) == 9.0
        shots = [] if args.no_screenshots else screenshots(server, args.png_dir / "ui")
    worst = max(ms(v, 90) for k, v in results.items() if k.startswith(("`GET /v1/jobs", "...")))
    lines += [
        f"`brigade serve` on 127.0.0.1 (its local Ray head idle), the store (SQLite) holding {jobs:,} "
        f"finished jobs of one tenant (filled in {fill_s:.0f} s) and one job with {rows:,} metrics rows; "
        f"one request at a time, {n} timed after one untimed; the client's latency on loopback "
        "(an upper bound on the server's time).",
        "",
        "| request | p50 (ms) | p90 (ms) | max (ms) |",
        "| --- | --- | --- | --- |",
    ]
    for label, values in results.items():
        lines.append(f"| {label} | {ms(values, 50):.1f} | {ms(values, 90):.1f} | {max(values) * 1e3:.1f} |")
    lines += [
        "",
        f"The job page's curves over the job with {rows:,} rows, `GET /v1/jobs/{{id}}/series?points=2000`: "
        f"the first request (it reads the job's metric columns, the database picking the fields out of "
        f"each row's JSON) {cold_s * 1e3:.0f} ms; later ones (the columns kept, only rows written since "
        f"read: what a running job's page costs every 2 s) p50 {ms(series_s, 50):.0f} ms, max "
        f"{max(series_s) * 1e3:.0f} ms over {len(series_s)} requests; points per "
        f"series: {', '.join(f'{k} {v}' for k, v in per_series.items())} (at most 2,000 each, every "
        f"bucket's minimum and maximum kept: the one spike in the loss {'is' if spike_kept else 'is NOT'} "
        "among them).",
    ]
    if shots:
        lines += ["", "Screenshots (headless Chromium, 1280 px wide unless named `-phone`, 390 px): "
                  + ", ".join(f"[{p.name}](ui/{p.name})" for p in shots) + "."]
    return Figure(
        name="ui", title="Dashboard: the jobs page over 10,000 jobs, a job of 100,000 steps",
        command=f".venv/bin/python -m bench.ui --jobs {jobs} --rows {rows} --requests {n}",
        body="\n".join(lines) + "\n",
        headline=(f"jobs page over {jobs:,} jobs: p90 <= {worst:.0f} ms; {rows:,}-row curves: "
                  f"{max(per_series.values())} points/series, {cold_s * 1e3:.0f} ms cold, "
                  f"{ms(series_s, 50):.0f} ms warm"),
        goals=[Goal(f"jobs page over {jobs:,} jobs <= {GOAL_MS:.0f} ms", f"p90 {worst:.0f} ms",
                    worst <= GOAL_MS),
               Goal("<= 2,000 points per series", f"{max(per_series.values())}",
                    max(per_series.values()) <= 2000 and spike_kept)],
    )


def screenshots(server: BrigadeServer, ui_dir: Path) -> list[Path]:
    """Real jobs on the server, then every page in headless Chromium."""
    from tests.e2e.browser import Browser, available

    why = available()
    if why:
        print(f"no screenshots: {why}", file=sys.stderr)
        return []
    http = server.http
    team = http.post("/v1/tenants", json={"name": "vision", "weight": 2.0,
                                          "quota": {"max_workers": 4, "max_queued_jobs": 20}}).json()
    http.post("/v1/tenants", json={"name": "speech", "quota": {"max_workers": 2}}).raise_for_status()
    live = http.post("/v1/jobs", json=LIVE).json()
    wait(server, live["id"], lambda j: j["step"] >= 60)
    http.post(f"/v1/jobs/{live['id']}/suspend").raise_for_status()
    wait(server, live["id"], lambda j: j["state"] == "SUSPENDED")
    http.post(f"/v1/jobs/{live['id']}/resume", json={"workers": 2}).raise_for_status()
    wait(server, live["id"], lambda j: j["state"] == "SUCCEEDED", timeout_s=300)
    export = http.post(f"/v1/jobs/{live['id']}/exports", json={}).json()["id"]
    deadline = time.monotonic() + 120
    while not any(x["id"] == export for x in server.get(f"/v1/jobs/{live['id']}/exports")):
        if time.monotonic() > deadline:
            raise RuntimeError(f"export {export} of {live['id']} not committed in 120 s")
        time.sleep(0.3)
    prep = prepare_job(server)
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {team['api_key']}"},
                      timeout=60) as vision:
        small = vision.post("/v1/jobs", json={**LIVE, "name": "vision-small",
                                              "train": {**LIVE["train"], "steps": 4000}}).json()
        wait(server, small["id"], lambda j: j["state"] == "RUNNING" and j["step"] >= 5)
        big = vision.post("/v1/jobs", json={**LIVE, "name": "vision-big", "workers": 4}).json()
    wait(server, big["id"], lambda j: j.get("waiting"))
    browser = Browser()
    shots: list[Path] = []
    d = browser.driver
    from selenium.webdriver.common.by import By

    def shot(name: str, path: str, ready: str, settle_s: float = 2.5, full_page: bool = True) -> None:
        d.get(server.url + path)
        deadline = time.monotonic() + 30
        while not d.find_elements(By.CSS_SELECTOR, ready) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(settle_s)
        out = ui_dir / f"{name}.png"
        browser.screenshot(out, full_page=full_page)
        shots.append(out)
        browser.resize(1280, 900)

    try:
        shot("login", "/login", "#login-form", 0.5)
        d.find_element(By.ID, "api-key").send_keys(KEY)
        d.find_element(By.CSS_SELECTOR, "#login-form button[type=submit]").click()
        time.sleep(2)
        shot("jobs", "/", "#jobs-table tbody tr[data-job-id]")
        shot("job", f"/jobs/{live['id']}", "polyline[data-series='loss']", 4)
        shot("job-running", f"/jobs/{small['id']}", "polyline[data-series='loss']", 4)
        shot("job-prepare", f"/jobs/{prep['id']}", "#prepare-files tr.done", 2)
        shot("submit", "/submit", "#spec-yaml", 0.5)
        d.find_element(By.ID, "spec-yaml").send_keys("\nsharding: {strategy: zero-9}\n")
        d.find_element(By.CSS_SELECTOR, "#submit-form button[type=submit]").click()
        time.sleep(1.5)
        out = ui_dir / "submit-refused.png"
        browser.screenshot(out)
        shots.append(out)
        browser.resize(1280, 900)
        shot("cluster", "/cluster", "#shares tbody tr", 3)
        shot("tenants", "/tenants", "#tenants tbody tr[data-tenant]", 1)
        shot("docs", "/docs", ".swagger-ui .info", 1.5, full_page=False)
        shot("redoc", "/redoc", ".menu-content", 2, full_page=False)
        browser.resize(390, 844)
        for name, path in (("jobs-phone", "/"), ("job-phone", f"/jobs/{live['id']}")):
            d.get(server.url + path)
            time.sleep(3)
            out = ui_dir / f"{name}.png"
            browser.screenshot(out, full_page=False)  # what a phone shows first
            shots.append(out)
        urls, console = browser.drain()
        foreign = [u for u in browser.foreign(urls, server.url) if not u.startswith("chrome://")]
        errors = [e for e in console if e["level"] == "SEVERE" and "/ui/jobs" not in e["message"]]
        if foreign or errors:
            raise RuntimeError(f"pages asked other hosts {foreign} or logged errors {errors}")
    finally:
        browser.close()
        for job_id in (big["id"], small["id"]):
            http.post(f"/v1/jobs/{job_id}/cancel")
    return shots


def prepare_job(server: BrigadeServer) -> dict:
    """A dataset's preparation of six files under the admin's data prefix, run to its end."""
    from tests.workers.datasets.corpus import write_inputs, write_tokenizer

    data = f"file://{server.data_dir.resolve()}/data-store/tenants/admin/data"
    write_tokenizer(f"{data}/tokenizer.json")
    write_inputs(f"{data}/raw", files=6, docs_per_file=300)
    answer = server.http.post("/v1/datasets", json={
        "name": "corpus-prepare", "inputs": [f"{data}/raw/*"], "output": f"{data}/corpus",
        "tokenizer": f"{data}/tokenizer.json", "workers": 2, "tokens_per_shard": 20000})
    answer.raise_for_status()
    job = answer.json()
    return wait(server, job["id"], lambda j: j["state"] == "SUCCEEDED")


def wait(server: BrigadeServer, job_id: str, until, timeout_s: float = 180) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        job = server.get(f"/v1/jobs/{job_id}")
        if until(job):
            return job
        if job["state"] in ("FAILED", "CANCELLED") or time.monotonic() > deadline:
            raise RuntimeError(f"job {job_id} is {job['state']}: {job.get('error')}")
        time.sleep(0.3)


if __name__ == "__main__":
    cli("ui", __doc__, add_args, run)
