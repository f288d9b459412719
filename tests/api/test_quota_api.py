"""The queue quota over real HTTP: three racing submits by a tenant allowed
two queued jobs make two jobs (201) and one 429 with `Retry-After` and the
reason; a retry of an admitted submit still answers its job; a job too big
for the tenant's quota ever to run is refused for good (403)."""

from __future__ import annotations

import threading
import uuid

import httpx

SPEC = {"name": "tiny", "model": {"n_layers": 2, "d_model": 64, "n_heads": 4}, "train": {"steps": 5}}


def new_tenant(http, quota: dict) -> tuple[str, str]:
    name = f"quota-{uuid.uuid4().hex[:8]}"
    response = http.post("/v1/tenants", json={"name": name, "quota": quota, "max_priority": 10})
    assert response.status_code == 201, response.text
    return name, response.json()["api_key"]


def as_tenant(server, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=30, headers={"Authorization": f"Bearer {key}"})


def test_racing_submits_at_a_queue_quota_of_two_admit_two(http, server):
    name, key = new_tenant(http, {"max_queued_jobs": 2})
    start, responses = threading.Barrier(3), []

    def submit(idempotency_key: str) -> None:
        with as_tenant(server, key) as client:
            start.wait()
            responses.append(client.post("/v1/jobs", json=SPEC,
                                         headers={"Idempotency-Key": idempotency_key}))

    keys = [f"k-{i}" for i in range(3)]
    threads = [threading.Thread(target=submit, args=(k,)) for k in keys]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    codes = sorted(r.status_code for r in responses)
    assert codes == [201, 201, 429], [r.text for r in responses]
    refused = next(r for r in responses if r.status_code == 429)
    assert refused.headers["Retry-After"] == "1"
    assert refused.json()["error"]["message"] == f"quota: tenant {name} has 2/2 jobs queued"
    with as_tenant(server, key) as client:
        admitted = next(r for r in responses if r.status_code == 201)
        retry = client.post("/v1/jobs", json=SPEC,
                            headers={"Idempotency-Key": admitted.request.headers["Idempotency-Key"]})
        assert retry.status_code == 200 and retry.json()["id"] == admitted.json()["id"]
        assert client.get("/v1/jobs").json()["total"] == 2


def test_a_job_too_big_for_the_quota_is_refused_for_good(http, server):
    name, key = new_tenant(http, {"max_workers": 1})
    with as_tenant(server, key) as client:
        response = client.post("/v1/jobs", json=SPEC | {"workers": 2})
        assert response.status_code == 403, response.text
        message = response.json()["error"]["message"]
        assert message.startswith("the job could never run: quota: needs 2 workers")
        assert name in message
        assert client.get("/v1/jobs").json()["total"] == 0
