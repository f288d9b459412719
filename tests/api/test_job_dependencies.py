"""`after` and `init.job` at `POST /v1/jobs` (the module's server: its
supervisor admits nothing, so jobs stay QUEUED): an id that is not one of
the tenant's jobs (missing, or another tenant's: the same answer), named
twice, or of a job that already failed or was cancelled is a 422 at
`after.N`; a job waiting on a queued one, or initialised from one, is
accepted, its init step left to be read once the source succeeded."""

from __future__ import annotations

import uuid

import pytest

SPEC = {"model": {"n_layers": 1, "d_model": 32, "n_heads": 2, "seq_len": 16},
        "train": {"steps": 1}}
MISSING = "j-000000000000"


def refused(answer, field: str) -> str:
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == field, error
    return error["message"]


@pytest.fixture(scope="module")
def other(server):
    """Another tenant's client."""
    import httpx

    from tests.api.conftest import ADMIN_KEY

    with httpx.Client(base_url=server.url, timeout=10,
                      headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as admin:
        made = admin.post("/v1/tenants", json={"name": f"deps-{uuid.uuid4().hex[:6]}"})
    assert made.status_code == 201, made.text
    with httpx.Client(base_url=server.url, timeout=10,
                      headers={"Authorization": f"Bearer {made.json()['api_key']}"}) as client:
        yield client


def test_after_names_only_the_tenants_own_jobs(http, other):
    assert refused(http.post("/v1/jobs", json={**SPEC, "after": [MISSING]}),
                   "after.0") == f"after.0: job {MISSING!r} not found"
    theirs = other.post("/v1/jobs", json=SPEC).json()["id"]
    mine = http.post("/v1/jobs", json=SPEC).json()["id"]
    # another tenant's job reads as a missing one
    assert refused(http.post("/v1/jobs", json={**SPEC, "after": [mine, theirs]}),
                   "after.1") == f"after.1: job {theirs!r} not found"
    # (init.job answers another tenant's job as it always has: the job is not found, 404)
    assert other.post("/v1/jobs", json={**SPEC, "init": {"job": mine}}).status_code == 404
    assert "is named twice" in refused(http.post("/v1/jobs", json={**SPEC, "after": [mine, mine]}),
                                       "after.1")
    assert refused(http.post("/v1/jobs", json={**SPEC, "after": ["no such id!"]}), "after.0")


def test_a_job_that_can_never_succeed_is_refused_at_submit(http):
    cancelled = http.post("/v1/jobs", json=SPEC).json()["id"]
    assert http.post(f"/v1/jobs/{cancelled}/cancel").status_code == 200
    message = refused(http.post("/v1/jobs", json={**SPEC, "after": [cancelled]}), "after.0")
    assert message == (f"after.0: job {cancelled} is CANCELLED: it will never succeed, so this "
                       "job could never start")


def test_jobs_waiting_on_a_queued_job_are_accepted(http):
    source = http.post("/v1/jobs", json=SPEC).json()["id"]
    waiting = http.post("/v1/jobs", json={**SPEC, "after": [source]})
    assert waiting.status_code == 201, waiting.text
    assert waiting.json()["spec"]["after"] == [source]
    # its weights: the source's latest committed step, read once it succeeded
    forked = http.post("/v1/jobs", json={**SPEC, "init": {"job": source}})
    assert forked.status_code == 201, forked.text
    assert forked.json()["spec"]["init"]["step"] is None and forked.json()["spec"]["after"] == []
    # a step named that the source has not committed yet: it waits for the source too
    named = http.post("/v1/jobs", json={**SPEC, "init": {"job": source, "step": 4}})
    assert named.status_code == 201, named.text
    assert named.json()["spec"]["after"] == [source]
