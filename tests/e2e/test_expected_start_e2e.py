"""A queued job's `expected_start` over real HTTP against `brigade serve` (a
local Ray head of 4 CPUs): job A holds every CPU and steps at a pace its
rows show; job B waits behind it. B's expected start, read while A runs,
is within 25% of when B really started, both counted from the read; `brigade
status` shows it."""

from __future__ import annotations

import time
from datetime import datetime

import pytest
from typer.testing import CliRunner

from api.cli import app
from tests.e2e.serve_harness import KEY, Server, spec

pytestmark = pytest.mark.timeout(300)
STEPS_A = 40
# Steps slow enough (a few tenths of a second on 4 ranks) that A's remaining run, not the
# fixed costs around it, is most of B's wait.
MODEL = {"n_layers": 4, "d_model": 128, "n_heads": 4, "seq_len": 64}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("forecast")).start()
    yield srv
    srv.stop()


def at(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def test_a_job_behind_a_running_one_is_forecast_within_a_quarter_of_its_real_wait(server):
    a = spec(STEPS_A, workers=4, name="holder", checkpoint={"every_steps": 20, "keep_last": 1})
    a["model"] = MODEL
    job_a = server.submit(a)
    server.wait(job_a["id"], lambda j: j["state"] == "RUNNING" and j["step"] >= 8)
    job_b = server.submit(spec(5, workers=4, name="behind"))
    assert job_b["state"] == "QUEUED"

    deadline = time.monotonic() + 30
    while True:  # the forecast is remade every few seconds: B is in the next one
        read_at = time.time()
        seen = server.job(job_b["id"])
        if seen["expected_start"] or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert seen["state"] == "QUEUED", seen
    assert seen["expected_start"], seen
    assert seen["expected_start_reason"] is None
    predicted = at(seen["expected_start"]) - read_at

    shown = CliRunner().invoke(app, ["status", job_b["id"]],
                               env={"BRIGADE_URL": server.url, "BRIGADE_API_KEY": KEY})
    assert shown.exit_code == 0, shown.output
    assert "expected start" in shown.stdout and " s)" in shown.stdout, shown.stdout

    server.wait(job_b["id"], lambda j: j["state"] != "QUEUED", timeout_s=120)
    events = server.get(f"/v1/jobs/{job_b['id']}/events")
    started = next(e for e in events if e["to_state"] == "STARTING")
    real = at(started["time"]) - read_at
    assert real > 3, f"A ended too soon after the read ({real:.1f} s) to measure anything"
    rows = server.get(f"/v1/jobs/{job_a['id']}/metrics")
    paces = [(r["step"], round(r["wall_time"] - read_at, 2), round(r["step_time_s"], 3))
             for r in rows]
    assert abs(predicted - real) <= 0.25 * real, (
        f"predicted wait {predicted:.1f} s, real {real:.1f} s; A's steps (step, end since "
        f"the read, step time): {paces}\n{server.event_lines(job_a['id'])}")
    # Once it runs, no forecast is shown.
    assert server.job(job_b["id"])["expected_start"] is None
    server.wait(job_b["id"], lambda j: j["state"] == "SUCCEEDED")
