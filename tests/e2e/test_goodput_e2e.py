"""Where jobs' time goes, over real HTTP (`brigade serve`, its own Ray head of
4 CPUs). Goodput: one job that saves asynchronously, has a rank killed after
a checkpoint, is preempted by a job of higher priority, is suspended and
resumed, and is cancelled; its phases must show each of those, sum to its
wall time, and read the same after the server restarts on the same database.
Expected start: job A holds every CPU and steps at a pace its rows show; job
B waits behind it. B's expected start, read while A runs, is within 25% of
when B really started, both counted from the read; `brigade status` shows it."""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime

import pytest
from typer.testing import CliRunner

from api.cli.main import app
from tests.e2e.serve_harness import KEY, Server, spec

# alone (make test's second phase, docs/testing.md): goodput is measured against wall time
pytestmark = [pytest.mark.timeout(600), pytest.mark.alone]
STEPS_A = 40
# Steps slow enough (a few tenths of a second on 4 ranks) that A's remaining run, not the
# fixed costs around it, is most of B's wait.
MODEL = {"n_layers": 4, "d_model": 128, "n_heads": 4, "seq_len": 64}

ENV = {
    "BRIGADE_RAY_NUM_CPUS": "4",
    "BRIGADE_POLL_INTERVAL_S": "0.1",
    "BRIGADE_RESTART_BACKOFF_S": "0.5",
    "BRIGADE_RANK_POOL_SIZE": "4",  # warm ranks: the job starts four times
}


def tiny(steps: int, workers: int, priority: int, **extra) -> dict:
    return {
        "name": "goodput", "workers": workers, "priority": priority,
        "resources_per_worker": {"cpu": 1},
        "model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16, "vocab_size": 256},
        "data": {"source": "builtin"},
        "train": {"steps": steps, "global_batch_size": 4, "lr": 0.003},
        **extra,
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory, shared_ray):
    srv = Server(tmp_path_factory.mktemp("goodput"), env=ENV, ray_address=shared_ray, shared=True).start()
    yield srv
    srv.stop()


def at(event: dict) -> float:
    return datetime.fromisoformat(event["time"]).timestamp()


def test_a_killed_preempted_and_suspended_job_shows_each_phase_and_keeps_them_across_a_restart(
        server):
    job = server.submit(tiny(1_000_000, 2, priority=1,
                             checkpoint={"every_steps": 5, "keep_last": 2, "async": True}))
    jid = job["id"]
    # A rank killed a few steps after a committed checkpoint: the steps since its
    # in-memory snapshot are lost.
    running = server.wait(jid, lambda j: j["state"] == "RUNNING" and j["latest_checkpoint"]
                          and j["step"] >= j["latest_checkpoint"]["step"] + 3
                          and server.get(f"/v1/jobs/{jid}/workers"))
    pid = server.get(f"/v1/jobs/{jid}/workers")[1]["pid"]
    os.kill(pid, signal.SIGKILL)
    # Replaced in place (recovery in place, the default): the same attempt goes on.
    server.wait(jid, lambda j: j["recoveries"] == 1 and j["state"] == "RUNNING"
                and j["step"] > running["step"] + 3)

    # Preempted by a job of higher priority that needs the whole cluster: queued meanwhile.
    urgent = server.submit(tiny(3, 4, priority=50))
    server.wait(urgent["id"], lambda j: j["state"] == "SUCCEEDED")
    back = server.wait(jid, lambda j: j["preemptions"] == 1 and j["state"] == "RUNNING"
                       and server.get(f"/v1/jobs/{jid}/metrics?limit=1"))
    server.wait(jid, lambda j: j["step"] > back["step"] + 3)

    # Suspended a while, resumed, then cancelled: it ends, so its phases stop moving.
    assert server.http.post(f"/v1/jobs/{jid}/suspend").status_code == 200
    server.wait(jid, lambda j: j["state"] == "SUSPENDED")
    time.sleep(1.0)
    assert server.http.post(f"/v1/jobs/{jid}/resume", json={}).status_code == 200
    resumed = server.wait(jid, lambda j: j["state"] == "RUNNING" and j["step"] > 0)
    server.wait(jid, lambda j: j["step"] > resumed["step"] + 3)
    assert server.http.post(f"/v1/jobs/{jid}/cancel").status_code == 200
    _wait_cancelled(server, jid)

    got = server.get(f"/v1/jobs/{jid}/goodput")
    phases, events = got["phases"], server.get(f"/v1/jobs/{jid}/events")
    told = f"{got}\n{server.event_lines(jid)}"
    assert sum(phases.values()) == pytest.approx(got["wall_s"], rel=0.02), told
    created = datetime.fromisoformat(server.job(jid)["created_at"]).timestamp()
    assert got["wall_s"] == pytest.approx(at(events[-1]) - created, abs=0.5), told
    for phase in ("starting", "training", "checkpoint_stall", "recovering", "lost",
                  "suspended"):
        assert phases[phase] > 0, (phase, told)
    # The wait after the preemption (requeued to started again) is in `queued`.
    requeued = next(e for e in events if e["from_state"] == "PREEMPTING")
    restarted = next(e for e in events if e["to_state"] == "STARTING" and at(e) > at(requeued))
    assert phases["queued"] >= at(restarted) - at(requeued) - 0.05, told
    # Suspended: the stretch from SUSPENDING to its resume and the cancel's (CANCELLING to
    # the end), each less the steps' work and saves the ranks' rows show in it (the group
    # still held: the step in progress, the save at the stop); all of SUSPENDED, no group.
    end = created + got["wall_s"]
    suspending = next(e for e in events if e["to_state"] == "SUSPENDING")
    suspended = next(e for e in events if e["to_state"] == "SUSPENDED")
    resume = next(e for e in events if e["from_state"] == "SUSPENDED")
    cancelling = next(e for e in events if e["to_state"] == "CANCELLING")
    assert at(suspending) < at(suspended) < at(resume) < at(cancelling) < end, told
    assert at(resume) - at(suspended) >= 1.0, told  # the wait above, with no group
    worked = [(r["wall_time"] - (r.get("eval_s") or 0) - (r.get("step_time_s") or 0),
               r["wall_time"] + (r.get("checkpoint_stall_s") or 0))
              for r in server.get(f"/v1/jobs/{jid}/metrics") if r.get("wall_time") is not None]
    held = [(at(suspending), at(suspended)), (at(cancelling), end)]
    expected = at(resume) - at(suspended) + sum(
        (stop - start) - _covered(worked, start, stop) for start, stop in held)
    pieces = [(round(stop - start, 3), round(_covered(worked, start, stop), 3))
              for start, stop in held]
    assert phases["suspended"] == pytest.approx(expected, abs=0.01), (
        f"suspended {phases['suspended']:.3f} s; SUSPENDED {at(resume) - at(suspended):.3f} s; "
        f"SUSPENDING and CANCELLING (their seconds, the rows' work in them): {pieces}\n{told}")
    assert set(got["starting_phases"]) >= {"placement_ready", "built"}, told
    assert 0 < got["goodput"] < 1

    # The same answer from a server that starts again on the same database.
    server.kill()
    server.start()
    assert server.get(f"/v1/jobs/{jid}/goodput") == got


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
    predicted = datetime.fromisoformat(seen["expected_start"]).timestamp() - read_at

    shown = CliRunner().invoke(app, ["status", job_b["id"]],
                               env={"BRIGADE_URL": server.url, "BRIGADE_API_KEY": KEY})
    assert shown.exit_code == 0, shown.output
    assert "expected start" in shown.stdout and " s)" in shown.stdout, shown.stdout

    server.wait(job_b["id"], lambda j: j["state"] != "QUEUED", timeout_s=120)
    events = server.get(f"/v1/jobs/{job_b['id']}/events")
    started = next(e for e in events if e["to_state"] == "STARTING")
    real = at(started) - read_at
    assert real > 3, f"A ended too soon after the read ({real:.1f} s) to measure anything"
    rows = server.get(f"/v1/jobs/{job_a['id']}/metrics")
    paces = [(r["step"], round(r["wall_time"] - read_at, 2), round(r["step_time_s"], 3))
             for r in rows]
    assert abs(predicted - real) <= 0.25 * real, (
        f"predicted wait {predicted:.1f} s, real {real:.1f} s; A's steps (step, end since "
        f"the read, step time): {paces}\n{server.event_lines(job_a['id'])}")
    # Once it runs, no forecast is shown.
    assert server.job(job_b["id"])["expected_start"] is None
    assert server.http.post(f"/v1/jobs/{job_b['id']}/cancel").status_code == 200
    _wait_cancelled(server, job_b["id"])


def _covered(spans: list[tuple[float, float]], start: float, stop: float) -> float:
    """The seconds of [start, stop) that the union of `spans` covers."""
    covered, reached = 0.0, start
    for lo, hi in sorted(spans):
        lo, hi = max(lo, reached), min(hi, stop)
        if hi > lo:
            covered += hi - lo
            reached = hi
    return covered


def _wait_cancelled(server: Server, jid: str) -> dict:
    deadline = time.monotonic() + 60
    while (job := server.job(jid))["state"] != "CANCELLED":
        assert time.monotonic() < deadline, server.event_lines(jid)
        time.sleep(0.1)
    return job
