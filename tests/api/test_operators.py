"""Operators over real HTTP: the admin across tenants (lists, reads,
cancels, suspends and resumes any tenant's job, each an event naming the
admin), cancel answered again as the job is, DELETE of a finished job with
its storage, the retention purge, and usage per tenant (a tenant its own,
the admin all). The module's supervisor is not started: jobs move only as a
test moves them (through the store, as the control plane would)."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest

from service.states import JobState as S
from service.store.models import utcnow
from tests.api.test_tenants import SPEC, create


@pytest.fixture
def two(http, as_key):
    """Two tenants: (name, client) each."""
    a, b = create(http), create(http)
    return (a.name, as_key(a.api_key)), (b.name, as_key(b.api_key))


def run(store, job_id: str, workers: int = 2) -> None:
    """Move a queued job to RUNNING as the control plane would."""
    store.transition(job_id, S.STARTING, reason="admitted", workers=workers, attempt=1)
    store.transition(job_id, S.RUNNING, reason="started")


def test_the_admin_lists_every_tenants_jobs_and_acts_on_them(http, two, store):
    (name_a, a), (name_b, b) = two
    job_a = a.post("/v1/jobs", json=SPEC).json()
    job_b = b.post("/v1/jobs", json=SPEC).json()
    assert (job_a["tenant"], job_b["tenant"]) == (name_a, name_b)

    every = {j["id"]: j["tenant"] for j in http.get("/v1/jobs", params={"limit": 500}).json()["items"]}
    assert every[job_a["id"]] == name_a and every[job_b["id"]] == name_b
    only_b = http.get("/v1/jobs", params={"tenant": name_b}).json()
    assert [j["id"] for j in only_b["items"]] == [job_b["id"]] and only_b["total"] == 1
    refused = a.get("/v1/jobs", params={"tenant": name_b})
    assert refused.status_code == 403 and refused.json()["error"]["field"] == "tenant"
    assert a.get("/v1/jobs", params={"tenant": name_a}).json()["total"] == 1

    assert http.get(f"/v1/jobs/{job_b['id']}").json()["tenant"] == name_b
    run(store, job_b["id"])
    assert http.post(f"/v1/jobs/{job_b['id']}/suspend").json()["state"] == "SUSPENDING"
    store.transition(job_b["id"], S.SUSPENDED, reason="checkpointed", workers=None)
    assert http.post(f"/v1/jobs/{job_b['id']}/resume").json()["state"] == "QUEUED"
    first = http.post(f"/v1/jobs/{job_b['id']}/cancel")
    again = http.post(f"/v1/jobs/{job_b['id']}/cancel")  # idempotent: the job as it is
    assert (first.status_code, again.status_code) == (200, 200)
    assert first.json()["state"] == again.json()["state"] == "CANCELLED"
    reasons = [e["reason"] for e in b.get(f"/v1/jobs/{job_b['id']}/events").json()]
    assert [r for r in reasons if "the admin" in r] == [
        "suspend requested by the admin: checkpoint, then stop", "resumed by the admin",
        "cancelled by the admin"]
    assert len(reasons) == 7  # queued, starting, running, suspending, suspended, queued, cancelled

    run(store, job_a["id"])  # a tenant's own cancel of a running job, twice
    assert a.post(f"/v1/jobs/{job_a['id']}/cancel").json()["state"] == "CANCELLING"
    assert a.post(f"/v1/jobs/{job_a['id']}/cancel").json()["state"] == "CANCELLING"
    events = a.get(f"/v1/jobs/{job_a['id']}/events").json()
    assert events[-1]["reason"] == "cancel requested by the user"
    assert [e["workers"] for e in events] == [None, 2, 2, 2]  # the size held after each


def job_prefix(supervisor, job_id: str) -> Path:
    job = supervisor.store.get_job(job_id)
    root = supervisor.storage.checkpoint_target(job).root.removeprefix("file://")
    return Path(root) / "tenants" / job.tenant / "jobs" / job.id


def leave_files(supervisor, job_id: str) -> Path:
    prefix = job_prefix(supervisor, job_id)
    for name in ("checkpoints/step-000000002/manifest.json", "checkpoints/step-000000002/__0_0.distcp",
                 "exports/hf/model.safetensors"):
        (prefix / name).parent.mkdir(parents=True, exist_ok=True)
        (prefix / name).write_text("x")
    return prefix


def test_delete_removes_a_finished_job_with_its_storage(http, two, supervisor):
    (_, a), (_, b) = two
    job = a.post("/v1/jobs", json=SPEC).json()
    prefix = leave_files(supervisor, job["id"])
    unfinished = a.delete(f"/v1/jobs/{job['id']}")
    assert unfinished.status_code == 409 and "QUEUED" in unfinished.json()["error"]["message"]
    a.post(f"/v1/jobs/{job['id']}/cancel")
    assert b.delete(f"/v1/jobs/{job['id']}").status_code == 404  # not B's
    assert a.delete(f"/v1/jobs/{job['id']}").status_code == 204
    assert not prefix.exists() and supervisor.store.get_job(job["id"]) is None
    assert a.get(f"/v1/jobs/{job['id']}").status_code == 404
    assert a.delete(f"/v1/jobs/{job['id']}").status_code == 404

    other = b.post("/v1/jobs", json=SPEC).json()  # the admin deletes any tenant's
    b.post(f"/v1/jobs/{other['id']}/cancel")
    assert http.delete(f"/v1/jobs/{other['id']}").status_code == 204
    assert b.get(f"/v1/jobs/{other['id']}").status_code == 404


def test_the_retention_purge_removes_jobs_finished_long_enough_ago(http, supervisor, monkeypatch):
    old, young, waiting = (http.post("/v1/jobs", json=SPEC).json()["id"] for _ in range(3))
    for job_id in (old, young):
        http.post(f"/v1/jobs/{job_id}/cancel")
    prefix = leave_files(supervisor, old)
    assert supervisor.requests.purge_expired() == []  # no retention set: kept
    monkeypatch.setattr(supervisor.settings, "job_retention_days", 1.0)
    assert supervisor.requests.purge_expired() == []  # finished just now
    later = utcnow() + timedelta(days=1, seconds=1)
    removed = supervisor.requests.purge_expired(now=later)
    assert old in removed and young in removed and waiting not in removed
    assert not prefix.exists() and supervisor.store.get_job(waiting) is not None


def test_usage_per_tenant_over_a_window(http, two, store):
    (name_a, a), (name_b, b) = two
    job = a.post("/v1/jobs", json=SPEC).json()["id"]
    run(store, job, workers=2)
    time.sleep(0.2)
    store.transition(job, S.PREEMPTING, reason="preempted by a job of higher priority")
    store.transition(job, S.QUEUED, reason="checkpointed, requeued", workers=None)
    a.post(f"/v1/jobs/{job}/cancel")
    b.post(f"/v1/jobs/{b.post('/v1/jobs', json=SPEC).json()['id']}/cancel")

    own = a.get("/v1/usage", params={"window_s": 600}).json()
    assert own["window_s"] == 600 and [u["tenant"] for u in own["tenants"]] == [name_a]
    usage = own["tenants"][0]
    assert 0.4 <= usage["worker_seconds"] < 10
    assert usage["cpu_seconds"] == pytest.approx(usage["worker_seconds"])  # 1 cpu a worker
    assert (usage["gpu_seconds"], usage["preemptions"], usage["jobs"]) == (0, 1, {"CANCELLED": 1})
    assert a.get("/v1/usage", params={"tenant": name_b}).status_code == 403

    every = {u["tenant"]: u for u in http.get("/v1/usage").json()["tenants"]}
    assert every[name_a] == usage and every[name_b]["jobs"] == {"CANCELLED": 1}
    assert every[name_b]["worker_seconds"] == 0
    only_b = http.get("/v1/usage", params={"tenant": name_b}).json()["tenants"]
    assert [u["tenant"] for u in only_b] == [name_b]
    bad = http.get("/v1/usage", params={"window_s": 0})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "window_s"
