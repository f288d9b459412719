"""/readyz over real HTTP: ready while the store and Ray answer; 503 naming
the store when its database cannot be reached; Ray not connected, and a
check that does not answer in time, said in words."""

from __future__ import annotations

import subprocess
import sys
import time

from service.observability.readiness import _within
from service.store import JobStore


def test_ready_while_the_store_and_ray_answer(http, supervisor):
    response = http.get("/readyz", headers={"Authorization": ""})  # no key needed
    # The module's supervisor is never started: it follows, and no replica leads.
    assert response.status_code == 200 and response.json() == {
        "status": "ready", "role": "follower", "leader": None, "replica": supervisor.replica}
    assert "brigade_leader 0.0" in http.get("/metrics").text


def test_readyz_names_the_leader(http, supervisor):
    assert supervisor.leadership.acquire()
    try:
        ready = http.get("/readyz").json()
        assert ready["role"] == "leader" and ready["leader"] == ready["replica"] == supervisor.replica
        assert "brigade_leader 1.0" in http.get("/metrics").text
    finally:
        supervisor.leadership.stop()
    assert http.get("/readyz").json()["leader"] is None  # given up: no one leads


def test_not_ready_while_the_store_cannot_be_reached(http, supervisor, monkeypatch, tmp_path):
    gone = JobStore("postgresql+psycopg://brigade@127.0.0.1:1/brigade")  # nothing listens there
    monkeypatch.setattr(supervisor, "store", gone)
    response = http.get("/readyz")
    assert response.status_code == 503
    message = response.json()["error"]["message"]
    assert message.startswith("not ready: the job store does not answer: OperationalError"), message
    assert http.get("/healthz").status_code == 200  # alive all the same
    gone.dispose()


def test_ray_not_connected_is_said_in_words():
    code = "from service.run.ray_cluster import ray_unready; print(ray_unready())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "not connected to Ray", out.stderr


def test_a_check_that_does_not_answer_in_time():
    started = time.monotonic()
    assert _within(0.1, "Ray", lambda: time.sleep(2)) == "Ray did not answer within 0.1 s"
    assert time.monotonic() - started < 1
    assert _within(1, "Ray", lambda: None) is None


def test_events_and_audit_rows_name_the_replica(http, supervisor):
    spec = {"name": "named", "model": {"n_layers": 2, "d_model": 64, "n_heads": 4},
            "train": {"steps": 2}}
    job = http.post("/v1/jobs", json=spec).json()
    events = http.get(f"/v1/jobs/{job['id']}/events").json()
    assert [e["replica"] for e in events] == [supervisor.replica]
    audit = http.get("/v1/audit", params={"target": job["id"]}).json()["items"]
    assert [(a["action"], a["replica"]) for a in audit] == [("job.submit", supervisor.replica)]
