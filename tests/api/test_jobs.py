"""The jobs resource through the SDK, over real HTTP: submit (idempotent),
list (paginated, filtered), get, cancel/suspend/resume, and what a job leaves
behind. The supervisor is not started: submitted jobs stay QUEUED."""

from __future__ import annotations

import uuid

import pytest

from api.client import BrigadeClient, BrigadeError
from api.schemas.jobs import JobPublic
from workers.schema import JobSpec
from service.states import JobState

SPEC = {"name": "tiny", "model": {"n_layers": 2, "d_model": 64, "n_heads": 4}, "train": {"steps": 5}}


@pytest.fixture
def job(client) -> JobPublic:
    return client.submit(SPEC)


def test_submit_returns_201_and_the_queued_job(http):
    response = http.post("/v1/jobs", json=SPEC)
    assert response.status_code == 201
    job = JobPublic.model_validate(response.json())
    assert (job.name, job.state, job.step, job.restarts) == ("tiny", JobState.QUEUED, 0, 0)
    assert job.spec.train.steps == 5 and job.spec.model.n_heads == 4
    assert job.created_at.tzinfo is not None and job.started_at is None


def test_submit_takes_a_job_spec_object(client):
    job = client.submit(JobSpec.model_validate(SPEC | {"checkpoint": {"async": True}}))
    assert job.spec.checkpoint.async_ is True


def test_a_retried_submit_returns_the_same_job(http, client):
    key = uuid.uuid4().hex
    first = http.post("/v1/jobs", json=SPEC, headers={"Idempotency-Key": key})
    again = http.post("/v1/jobs", json=SPEC, headers={"Idempotency-Key": key})
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert client.submit(SPEC, idempotency_key=key).id == first.json()["id"]
    assert client.submit(SPEC, idempotency_key=uuid.uuid4().hex).id != first.json()["id"]


def test_get_returns_the_job(client, job):
    got = client.get(job.id)
    # A read of a queued job adds the supervisor's latest forecast (when it is expected to
    # start, or why not known), which the submit's answer does not carry.
    forecast = {"expected_start", "expected_start_reason"}
    assert got.model_dump(exclude=forecast) == job.model_dump(exclude=forecast)


def test_list_pages_newest_first(client):
    ids = [client.submit(SPEC | {"name": f"page-{i}"}).id for i in range(3)]
    first = client.jobs(limit=2)
    assert [j.id for j in first.items] == ids[::-1][:2]
    assert (first.limit, first.offset) == (2, 0) and first.total >= 3
    second = client.jobs(limit=2, offset=2)
    assert second.items[0].id == ids[0]


def test_list_filters_by_state(client, http, job):
    cancelled = client.cancel(client.submit(SPEC).id)
    queued = client.jobs(state=JobState.QUEUED, limit=500)
    assert {j.state for j in queued.items} == {JobState.QUEUED}
    assert job.id in {j.id for j in queued.items}
    both = http.get("/v1/jobs", params={"state": f"queued,{cancelled.state.value}", "limit": 500}).json()
    repeated = http.get("/v1/jobs", params=[("state", "QUEUED"), ("state", cancelled.state.value),
                                            ("limit", 500)]).json()
    assert both["total"] == repeated["total"] == queued.total + client.jobs(state=cancelled.state).total


@pytest.mark.parametrize("job_id", ["j-000000000000", "nope", "a" * 300, "j-1.2", "%00"])
def test_an_unknown_job_is_404_on_every_route(http, job_id):
    for method, suffix in [("GET", ""), ("POST", "/cancel"), ("POST", "/suspend"), ("POST", "/resume"),
                           ("GET", "/events"), ("GET", "/metrics"), ("GET", "/logs"),
                           ("GET", "/checkpoints"), ("GET", "/workers")]:
        response = http.request(method, f"/v1/jobs/{job_id}{suffix}")
        assert response.status_code == 404, (method, suffix, response.text)
        assert "not found" in response.json()["error"]["message"]


def test_the_client_raises_brigade_error_with_the_message(client):
    with pytest.raises(BrigadeError) as caught:
        client.get("j-000000000000")
    assert caught.value.status == 404 and "j-000000000000" in caught.value.message
    with pytest.raises(BrigadeError) as caught:
        client.submit(SPEC | {"train": {"steps": 0}})
    assert (caught.value.status, caught.value.field) == (422, "train.steps")


def test_cancel_a_queued_job(client, job):
    cancelled = client.cancel(job.id)
    assert cancelled.id == job.id
    assert cancelled.state in (JobState.CANCELLING, JobState.CANCELLED)
    client.wait(job.id, timeout_s=30, poll_s=0.05)


def test_a_transition_the_state_does_not_allow_is_409_said_in_words(client, job, store):
    with pytest.raises(BrigadeError) as caught:
        client.resume(job.id)  # QUEUED, not SUSPENDED
    assert caught.value.status == 409
    assert caught.value.message == f"job {job.id} is QUEUED: only a SUSPENDED job can be resumed"
    with pytest.raises(BrigadeError) as caught:
        client.suspend(job.id)
    assert caught.value.message == (f"job {job.id} is QUEUED: only a STARTING or RUNNING job can "
                                    "be suspended")
    client.cancel(job.id)
    client.wait(job.id, timeout_s=30, poll_s=0.05)
    assert client.cancel(job.id).state is JobState.CANCELLED  # cancel is idempotent
    with pytest.raises(BrigadeError) as caught:
        client.suspend(job.id)
    assert caught.value.status == 409
    assert caught.value.message == f"job {job.id} already CANCELLED: nothing to suspend"

    done = client.submit(SPEC)
    store.transition(done.id, "STARTING", reason="admitted", workers=1, attempt=1)
    store.transition(done.id, "RUNNING", reason="started")
    store.transition(done.id, "SUCCEEDED", reason="done")
    for action in ("cancel", "suspend", "resume"):
        with pytest.raises(BrigadeError) as caught:
            getattr(client, action)(done.id)
        assert caught.value.status == 409
        assert caught.value.message == f"job {done.id} already SUCCEEDED: nothing to {action}"


def test_events_record_each_state_change(client, job):
    client.cancel(job.id)
    client.wait(job.id, timeout_s=30, poll_s=0.05)
    events = client.events(job.id)
    assert (events[0].from_state, events[0].to_state) == (None, JobState.QUEUED)
    assert events[-1].to_state is JobState.CANCELLED
    assert [e.id for e in events] == sorted(e.id for e in events)


def test_metrics_one_row_per_step(client, store, job):
    rows = [{"step": s, "loss": 5.0 - s, "lr": 1e-3, "tokens_per_s": 1000.0, "step_time_s": 0.1,
             "peak_mem_bytes": 10, "mem_theory_bytes": 8, "comm_bytes": 300, "comm_bytes_theory": 299.5,
             "comm_bytes_by_op": {"all_gather": 200, "reduce_scatter": 100}, "collectives": 15,
             "comm_time_s": 0.02, "exposed_comm_s": 0.015, "flops_per_token": 6e5,
             "flops_per_s": 2e11, "mfu": None if s < 3 else 0.25} for s in (1, 2, 3)]
    store.record_metrics(job.id, attempt=1, rows=rows)
    metrics = client.metrics(job.id)
    assert [m.step for m in metrics] == [1, 2, 3]
    assert metrics[2].loss == 2.0 and metrics[2].comm_bytes_theory == 299.5
    assert metrics[2].comm_bytes_by_op == {"all_gather": 200, "reduce_scatter": 100}
    assert (metrics[2].collectives, metrics[2].comm_time_s, metrics[2].exposed_comm_s) == (15, 0.02, 0.015)
    assert (metrics[2].flops_per_token, metrics[2].flops_per_s, metrics[2].mfu) == (6e5, 2e11, 0.25)
    assert metrics[0].mfu is None
    assert [m.step for m in client.metrics(job.id, since_step=2)] == [2, 3]


def test_logs_page_by_id(client, store, job):
    store.append_log(job.id, ["one", "two", "three"])
    lines = client.logs(job.id)
    assert [line.line for line in lines] == ["one", "two", "three"]
    assert [line.line for line in client.logs(job.id, after_id=lines[0].id)] == ["two", "three"]


def test_a_queued_job_has_no_workers_or_checkpoints(client, job):
    assert client.workers(job.id) == []
    assert client.checkpoints(job.id) == []


def test_a_job_that_could_never_fit_the_cluster_is_refused(client):
    with pytest.raises(BrigadeError) as caught:
        client.submit(SPEC | {"workers": 2, "resources_per_worker": {"cpu": 1000}})
    assert caught.value.status == 422 and caught.value.field == "workers"
    assert "could never start" in caught.value.message


def test_resume_at_a_size_the_job_cannot_run_at_is_refused(client):
    job = client.submit(SPEC)
    with pytest.raises(BrigadeError) as caught:
        client.resume(job.id, workers=9)  # the global batch of 8 has no sample for a ninth
    assert caught.value.status == 422 and "world size (9)" in caught.value.message


@pytest.mark.parametrize("body, names", [
    ({"workers": 0}, "workers"),
    ({"workers": "two"}, "workers"),
    ({"nodes": 2}, "nodes"),
    ([2], "body"),
], ids=["zero", "string", "unknown-field", "list"])
def test_malformed_resume_body_is_refused(http, body, names):
    """(Beside the submit's refusals in test_spec_validation.py: this one needs a job.)"""
    job = http.post("/v1/jobs", json={"model": {"n_layers": 2, "d_model": 64, "n_heads": 4},
                                      "train": {"steps": 5}}).json()
    response = http.post(f"/v1/jobs/{job['id']}/resume", json=body)
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    error = response.json()["error"]
    assert names in error["message"], error
    assert set(error) <= {"message", "field"}


def test_labels_and_a_note_are_set_at_submit_changed_by_their_owner_and_filtered_on(
        client, server, http):
    tag = uuid.uuid4().hex[:8]
    tenant = client.create_tenant(f"labels-{tag}", quota={"max_workers": 4})
    with BrigadeClient(server.url, tenant.api_key, timeout=10) as own:
        a = own.submit(SPEC | {"labels": {"run": tag, "stage": "dev"}, "note": "first"})
        b = own.submit(SPEC | {"labels": {"run": tag, "stage": "prod"}})
        assert (a.labels, a.note, b.note) == ({"run": tag, "stage": "dev"}, "first", None)

        changed = own.update(b.id, labels={"run": tag, "stage": "dev", "owner": "kim"},
                             note="promoted\nback to dev")
        assert changed.labels == {"run": tag, "stage": "dev", "owner": "kim"}
        assert changed.note == "promoted\nback to dev" and changed.spec.labels["stage"] == "prod"
        assert own.update(b.id, note=None).labels == changed.labels  # labels left out: kept
        assert own.get(b.id).note is None

        listed = own.jobs(label={"run": tag, "stage": "dev"})
        assert {j.id for j in listed.items} == {a.id, b.id} and listed.total == 2
        assert [j.id for j in own.jobs(label=[f"run={tag}", "owner=kim"]).items] == [b.id]
        assert own.jobs(label=[f"run={tag}", "stage=prod"]).items == []

    other = client.create_tenant(f"labels-other-{tag}")
    with BrigadeClient(server.url, other.api_key, timeout=10) as stranger:
        with pytest.raises(BrigadeError) as hidden:
            stranger.update(a.id, labels={})
        assert hidden.value.status == 404  # another tenant's job is not there
        assert stranger.jobs(label={"run": tag}).items == []
    assert client.update(a.id, labels={}).labels == {}  # the admin may
    rows = [r for r in client.audit(limit=50, target=a.id).items if r.action == "job.update"]
    assert [r.actor for r in rows] == ["admin"]
    assert rows[0].detail == {"labels": {"from": {"run": tag, "stage": "dev"}, "to": {}}}


@pytest.mark.parametrize("body, field", [
    ({"labels": {"bad key": "x"}}, "labels"),
    ({"labels": {f"k{i}": "v" for i in range(17)}}, "labels"),
    ({"labels": {"k": "two\nlines"}}, "labels.k"),
    ({"note": "n" * 4001}, "note"),
    ({"name": "renamed"}, "name"),
    ({}, "body"),
], ids=["key", "too-many", "value", "long-note", "unknown", "empty"])
def test_a_bad_label_change_is_refused_naming_the_field(http, body, field):
    job = http.post("/v1/jobs", json=SPEC).json()
    response = http.patch(f"/v1/jobs/{job['id']}", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"].startswith(field), response.json()


@pytest.mark.parametrize("query", ["label=novalue", "label==x", "label=bad key=x"])
def test_a_bad_label_filter_is_refused(http, query):
    response = http.get(f"/v1/jobs?{query}")
    assert response.status_code == 422 and response.json()["error"]["field"] == "label", response.text
