"""Whole flows over real HTTP against `brigade serve` in a subprocess: its own
local Ray head, SQLite and checkpoint storage under a temporary data dir."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.e2e.serve_harness import Server, losses_by_step, spec, uninterrupted


@pytest.fixture(scope="module")
def server(tmp_path_factory, shared_ray):
    srv = Server(tmp_path_factory.mktemp("brigade"), env={"BRIGADE_LOG_FORMAT": "json"},
                 ray_address=shared_ray, shared=True).start()
    yield srv
    srv.stop()


def test_the_server_logs_json_records_that_name_the_job(server):
    job = server.submit(spec(4))
    server.wait(job["id"], lambda j: j["state"] == "SUCCEEDED")
    lines = server.log_path.read_text().splitlines()
    records = [json.loads(line) for line in lines if line.startswith("{")]
    about = [r for r in records if r.get("job_id") == job["id"]]
    assert about and all(r["tenant"] == "admin" for r in about), server.log_tail()
    assert any("-> SUCCEEDED" in r["message"] for r in about)
    assert any(r["logger"] == "uvicorn.access" and "/v1/jobs" in r["message"] for r in records)
    assert {r["level"] for r in records} <= {"INFO", "WARNING", "ERROR", "CRITICAL"}


def test_a_job_runs_to_success_with_falling_loss_and_committed_checkpoints(server):
    job = server.submit(spec(40))
    assert job["state"] == "QUEUED"
    done = server.wait(job["id"], lambda j: j["state"] == "SUCCEEDED")
    assert done["step"] == 40
    rows = server.get(f"/v1/jobs/{job['id']}/metrics")
    assert [r["step"] for r in rows] == list(range(1, 41))
    assert rows[-1]["loss"] < 0.8 * rows[0]["loss"]
    for name in ("loss", "lr", "tokens_per_s", "step_time_s", "peak_mem_bytes",
                 "mem_theory_bytes", "comm_bytes", "comm_bytes_theory"):
        assert name in rows[0]
    checkpoints = server.get(f"/v1/jobs/{job['id']}/checkpoints")
    assert [c["step"] for c in checkpoints] == [20, 30, 40]  # keep_last 3
    step_dir = Path(checkpoints[-1]["uri"].removeprefix("file://"))
    names = {p.name for p in step_dir.iterdir()}
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata", "manifest.json"} <= names
    assert done["latest_checkpoint"] == {"step": 40, "world_size": 2}
    states = [e["to_state"] for e in server.get(f"/v1/jobs/{job['id']}/events")]
    assert states == ["QUEUED", "STARTING", "RUNNING", "SUCCEEDED"]


def test_suspend_then_resume_at_three_workers_follows_the_uninterrupted_curve(server):
    job = server.submit(spec(60))
    server.wait(job["id"], lambda j: j["state"] == "RUNNING" and j["step"] >= 5)
    r = server.http.post(f"/v1/jobs/{job['id']}/suspend")
    assert r.status_code == 200, r.text
    suspended = server.wait(job["id"], lambda j: j["state"] in ("SUSPENDED", "SUCCEEDED"))
    assert suspended["state"] == "SUSPENDED", "the job finished before the suspend landed"
    stopped_at = suspended["latest_checkpoint"]["step"]
    assert stopped_at == suspended["step"] < 60
    r = server.http.post(f"/v1/jobs/{job['id']}/resume", json={"workers": 3})
    assert r.status_code == 200, r.text
    finished = server.wait(job["id"], lambda j: j["state"] == "SUCCEEDED")
    assert finished["latest_checkpoint"]["world_size"] == 3

    resumed, straight = losses_by_step(server, job["id"]), uninterrupted(spec(60))
    after = list(range(stopped_at + 1, 61))
    assert [resumed[s] for s in after] == pytest.approx([straight[s] for s in after], rel=1e-4)
    states = [e["to_state"] for e in server.get(f"/v1/jobs/{job['id']}/events")]
    assert states == ["QUEUED", "STARTING", "RUNNING", "SUSPENDING", "SUSPENDED", "QUEUED",
                      "STARTING", "RUNNING", "SUCCEEDED"]


def test_a_killed_server_reattaches_to_the_live_ranks_and_the_job_finishes_once(server):
    """SIGKILL `brigade serve` while a job trains and start it again: it must
    reattach to the same live rank processes (not restart the job from a
    checkpoint), and the job's curve has each step's row exactly once."""
    steps = 300  # ~100 steps pass while the server restarts, on 2 shared cores
    job = server.submit(spec(steps))
    running = server.wait(job["id"], lambda j: j["state"] == "RUNNING" and j["step"] >= 5
                          and server.get(f"/v1/jobs/{j['id']}/workers"))
    before = [w["pid"] for w in server.get(f"/v1/jobs/{job['id']}/workers")]
    assert len(before) == 2 and all(before)
    server.kill()
    server.start()  # same data dir, same port
    # The ranks went on training while no server watched; reattached, the
    # server asks the same processes (their pids from the actors themselves).
    during = server.wait(job["id"], lambda j: j["state"] in ("RUNNING", "SUCCEEDED")
                         and (j["state"] == "SUCCEEDED"
                              or server.get(f"/v1/jobs/{j['id']}/workers")))
    assert during["state"] == "RUNNING", (
        f"the job ended before the restarted server was asked for its ranks (killed at step "
        f"{running['step']} of {steps}): make it longer")
    after = [w["pid"] for w in server.get(f"/v1/jobs/{job['id']}/workers")]
    assert after == before, server.event_lines(job["id"])
    for pid in before:  # alive: a restart would have killed them with their group
        os.kill(pid, 0)
    done = server.wait(job["id"], lambda j: j["state"] == "SUCCEEDED")
    assert done["step"] == steps and done["restarts"] == 0
    listed = [j["id"] for j in server.get("/v1/jobs?limit=100")["items"]]
    assert listed.count(job["id"]) == 1  # neither lost nor doubled by the restart
    events = server.get(f"/v1/jobs/{job['id']}/events")
    assert [e["to_state"] for e in events] == ["QUEUED", "STARTING", "RUNNING", "RUNNING",
                                               "SUCCEEDED"], server.event_lines(job["id"])
    assert "reattached to worker group" in events[3]["reason"], server.event_lines(job["id"])
    rows = server.get(f"/v1/jobs/{job['id']}/metrics")
    assert [r["step"] for r in rows] == list(range(1, steps + 1))  # every step once, in order
    assert not [r["step"] for r in rows if r.get("resumed_from") or r.get("recovered_from")]


def test_cancelling_a_running_job_releases_its_workers(server):
    job = server.submit(spec(2000))
    server.wait(job["id"], lambda j: j["state"] == "RUNNING" and j["step"] >= 2)
    ranks = server.get(f"/v1/jobs/{job['id']}/workers")
    assert [w["rank"] for w in ranks] == [0, 1] and all(w["pid"] for w in ranks)
    r = server.http.post(f"/v1/jobs/{job['id']}/cancel")
    assert r.status_code == 200 and r.json()["state"] == "CANCELLING", r.text
    deadline = time.monotonic() + 60
    while server.job(job["id"])["state"] != "CANCELLED":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert server.get(f"/v1/jobs/{job['id']}/workers") == []
    for rank in ranks:  # the rank processes are gone (within 30 s: on a loaded machine a killed
        # actor's process can take seconds to exit)
        with pytest.raises(ProcessLookupError):
            for _ in range(150):
                os.kill(rank["pid"], 0)
                time.sleep(0.2)
    # Cancel is idempotent: again, the job as it is; a cancelled job cannot be suspended (409).
    again = server.http.post(f"/v1/jobs/{job['id']}/cancel")
    assert again.status_code == 200 and again.json()["state"] == "CANCELLED"
    suspended = server.http.post(f"/v1/jobs/{job['id']}/suspend")
    assert suspended.status_code == 409 and "CANCELLED" in suspended.text


def test_a_server_restart_that_finds_the_workers_gone_resumes_from_the_checkpoint(server):
    job = server.submit(spec(150))
    server.wait(job["id"], lambda j: j["state"] == "RUNNING"
                and (j["latest_checkpoint"] or {}).get("step", 0) >= 10)
    ranks = server.get(f"/v1/jobs/{job['id']}/workers")
    server.kill()
    for rank in ranks:  # the node lost the job's workers while no server watched
        os.kill(rank["pid"], signal.SIGKILL)
    server.start()
    done = server.wait(job["id"], lambda j: j["state"] == "SUCCEEDED")
    events = server.get(f"/v1/jobs/{job['id']}/events")
    gone = [e for e in events if "is gone" in e["reason"]]
    assert gone and gone[0]["to_state"] == "RESTARTING", json.dumps(events, indent=1)
    assert [e["to_state"] for e in events].count("STARTING") == 2
    assert done["restarts"] == 0  # a lost control plane is not the job's failure
    assert sorted(r["step"] for r in server.get(f"/v1/jobs/{job['id']}/metrics")) == list(
        range(1, 151)
    )
