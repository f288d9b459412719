"""A job's goodput phases on a real job over real HTTP (`brigade serve`, its
own Ray head of 4 CPUs): one job that saves asynchronously, has
a rank killed after a checkpoint, is preempted by a job of higher priority,
is suspended and resumed, and is cancelled; its phases must show each of
those, sum to its wall time, and read the same after the server restarts on
the same database."""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime

import pytest

from tests.e2e.serve_harness import Server

pytestmark = pytest.mark.timeout(600)

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
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("goodput"), env=ENV).start()
    yield srv
    srv.stop()


def at(event: dict) -> float:
    return datetime.fromisoformat(event["time"]).timestamp()


def test_a_killed_preempted_and_suspended_job_shows_each_phase_and_keeps_them_across_a_restart(
        server):
    job = server.submit(tiny(1_000_000, 2, priority=1,
                             checkpoint={"every_steps": 5, "keep_last": 2, "async": True}))
    jid = job["id"]
    # A rank killed a few steps after a committed checkpoint: those steps are lost.
    running = server.wait(jid, lambda j: j["state"] == "RUNNING" and j["latest_checkpoint"]
                          and j["step"] >= j["latest_checkpoint"]["step"] + 3
                          and server.get(f"/v1/jobs/{jid}/workers"))
    pid = server.get(f"/v1/jobs/{jid}/workers")[1]["pid"]
    os.kill(pid, signal.SIGKILL)
    server.wait(jid, lambda j: j["restarts"] == 1 and j["state"] == "RUNNING"
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
    # Suspended: from SUSPENDING to its resume, less the last step's work and save.
    suspending = next(e for e in events if e["to_state"] == "SUSPENDING")
    resume = next(e for e in events if e["from_state"] == "SUSPENDED")
    assert at(resume) - at(suspending) >= phases["suspended"] >= 1.0, told
    assert set(got["starting_phases"]) >= {"placement_ready", "built"}, told
    assert 0 < got["goodput"] < 1

    # The same answer from a server that starts again on the same database.
    server.kill()
    server.start()
    assert server.get(f"/v1/jobs/{jid}/goodput") == got


def _wait_cancelled(server: Server, jid: str) -> dict:
    deadline = time.monotonic() + 60
    while (job := server.job(jid))["state"] != "CANCELLED":
        assert time.monotonic() < deadline, server.event_lines(jid)
        time.sleep(0.1)
    return job
