"""The job store's jobs, metrics and logs, on SQLite and Postgres.
State transitions: test_store_transitions.py; schema: test_store_schema.py."""

from __future__ import annotations

from datetime import timezone

import pytest
from store_harness import NO_SUCH_JOB, SPEC, race, submit

from service.states import JobState as S
from service.store import JobNotFound
from service.store.models import LOG_LINE_LENGTH
from service.store.store import METRICS_BATCH
from workers.schema import JobSpec


def test_create_and_get(store):
    job = submit(store, name="first", priority=5)
    assert job.id.startswith("j-") and len(job.id) == 14
    assert (job.tenant, job.name, job.state, job.priority) == ("acme", "first", S.QUEUED, 5)
    assert job.spec is SPEC  # the spec it was handed, not a second parse of its JSON
    assert JobSpec.model_validate(job.stored_spec) == SPEC  # what a reader of the database gets
    assert (job.step, job.restarts, job.preemptions, job.attempt) == (0, 0, 0, 0)
    assert job.workers is job.requested_workers is job.latest_checkpoint is job.error is None
    assert job.started_at is job.finished_at is None
    assert job.created_at.tzinfo == job.updated_at.tzinfo == timezone.utc
    assert store.get_job(job.id) == job
    assert store.get_job(NO_SUCH_JOB) is None
    [event] = store.events(job.id)
    assert (event.from_state, event.to_state, event.reason) == (None, S.QUEUED, "submitted")


def test_records_are_frozen(store):
    job = submit(store)
    with pytest.raises(AttributeError):
        job.state = S.RUNNING


def test_list_pages_newest_first_with_state_filter(store):
    jobs = [submit(store, name=f"job-{i}") for i in range(7)]
    for job in jobs[:3]:
        store.transition(job.id, S.STARTING, reason="admitted")
    store.transition(jobs[0].id, S.RUNNING, reason="up")

    pages = [store.list_jobs(tenant="acme", limit=3, offset=o) for o in (0, 3, 6, 9)]
    assert [total for _, total in pages] == [7, 7, 7, 7]
    assert [len(page) for page, _ in pages] == [3, 3, 1, 0]
    listed = [job.id for page, _ in pages for job in page]
    assert listed == [job.id for job in reversed(jobs)]

    starting, total = store.list_jobs(tenant="acme", states=[S.STARTING])
    assert total == 2 and [j.id for j in starting] == [jobs[2].id, jobs[1].id]
    some, total = store.list_jobs(tenant="acme", states=[S.RUNNING, S.QUEUED], limit=2)
    assert total == 5 and [j.id for j in some] == [jobs[6].id, jobs[5].id]
    assert store.list_jobs(tenant="acme", states=[S.FAILED]) == ([], 0)


def test_a_sweeps_trials_carry_it_and_list_by_it(store):
    alone = submit(store, name="alone")
    trials = [submit(store, name=f"lr-t{k}", sweep="s-000000000001") for k in range(3)]
    other = submit(store, name="other-t0", sweep="s-000000000002")
    theirs = submit(store, tenant="globex", name="g-t0", sweep="s-000000000001")
    assert alone.sweep is None and trials[0].sweep == "s-000000000001"
    assert store.get_job(trials[1].id).sweep == "s-000000000001"
    store.transition(trials[0].id, S.PRUNED, reason="pruned at step 0: test")
    listed, total = store.list_jobs(tenant="acme", sweep="s-000000000001")
    assert total == 3 and [j.id for j in listed] == [t.id for t in reversed(trials)]
    assert all(j.sweep == "s-000000000001" for j in listed)
    pruned, total = store.list_jobs(tenant="acme", sweep="s-000000000001", states=[S.PRUNED])
    assert total == 1 and [j.id for j in pruned] == [trials[0].id]
    assert [j.id for j in store.list_jobs(tenant="acme", sweep="s-000000000002")[0]] == [other.id]
    assert store.list_jobs(tenant=None, sweep="s-000000000001")[1] == 4  # the admin's: theirs too
    assert theirs.id not in {j.id for j in store.list_jobs(tenant="acme", sweep=theirs.sweep)[0]}
    assert store.list_jobs(tenant="acme", sweep="s-000000000009") == ([], 0)


def test_tenants_see_only_their_jobs(store):
    ours, theirs = submit(store, tenant="acme"), submit(store, tenant="globex")
    assert store.get_job(ours.id, tenant="acme") == ours
    assert store.get_job(theirs.id, tenant="acme") is None
    assert store.get_job(theirs.id) == theirs
    assert [j.id for j in store.list_jobs(tenant="acme")[0]] == [ours.id]
    assert store.list_jobs(tenant="initech") == ([], 0)


def test_jobs_in_states_is_every_tenant_oldest_first(store):
    a = submit(store, tenant="acme")
    b = submit(store, tenant="globex")
    c = submit(store, tenant="acme")
    store.transition(b.id, S.CANCELLED, reason="user")
    assert [j.id for j in store.jobs_in_states([S.QUEUED])] == [a.id, c.id]
    assert [j.id for j in store.jobs_in_states({S.QUEUED, S.CANCELLED})] == [a.id, b.id, c.id]
    assert store.jobs_in_states([]) == []


def test_idempotency_key_returns_the_first_job(store):
    first = submit(store, idempotency_key="k1")
    again, created = store.create_job(tenant="acme", name="other", spec=SPEC, idempotency_key="k1")
    assert (again, created) == (first, False)
    assert submit(store, tenant="globex", idempotency_key="k1").id != first.id  # per tenant
    assert submit(store).id != submit(store).id  # no key: always a new job
    assert len(store.events(first.id)) == 1


def test_idempotency_holds_under_concurrent_submits(store):
    results = race(12, lambda i: store.create_job(
        tenant="acme", name=f"try-{i}", spec=SPEC, idempotency_key="same"))
    assert not [r for r in results if isinstance(r, Exception)], results
    assert sum(created for _, created in results) == 1
    assert len({job.id for job, _ in results}) == 1
    jobs, total = store.list_jobs(tenant="acme")
    assert total == 1 and len(store.events(jobs[0].id)) == 1


def test_latest_loss_is_kept_on_the_job_and_read_with_every_list(store):
    job = submit(store)
    assert job.latest_loss is None  # none until the runner records a row with a loss
    assert store.update_job(job.id, step=3, latest_loss=2.5).latest_loss == 2.5
    assert store.get_job(job.id).latest_loss == 2.5
    [listed], _ = store.list_jobs(tenant="acme")  # the API's read: columns by position
    assert listed.latest_loss == 2.5 and listed == store.get_job(job.id)
    assert store.update_job(job.id, latest_loss=None).latest_loss is None


def test_update_job_sets_fields_but_never_the_state(store):
    job = submit(store)
    updated = store.update_job(job.id, step=40, workers=3, requested_workers=2, error="slow",
                               latest_checkpoint={"step": 40, "world_size": 3})
    assert (updated.step, updated.workers, updated.requested_workers) == (40, 3, 2)
    assert updated.latest_checkpoint == {"step": 40, "world_size": 3}
    assert updated.error == "slow" and updated.updated_at >= job.updated_at
    assert store.get_job(job.id) == updated
    assert store.update_job(job.id, latest_checkpoint=None).latest_checkpoint is None
    with pytest.raises(TypeError, match="transition"):
        store.update_job(job.id, state=S.RUNNING)
    with pytest.raises(TypeError, match="tenant"):
        store.update_job(job.id, tenant="globex")
    with pytest.raises(JobNotFound):
        store.update_job(NO_SUCH_JOB, step=1)
    assert store.get_job(job.id).state is S.QUEUED


def test_metrics_upsert_replaces_a_rerecorded_step(store):
    job = submit(store)
    store.record_metrics(job.id, 1, [{"step": s, "loss": 10.0 - s} for s in range(1, 6)])
    # Restarted from the step-3 checkpoint: attempt 2 runs steps 4.. again.
    store.record_metrics(job.id, 2, [{"step": 4, "loss": 4.5, "lr": 0.1}, {"step": 6, "loss": 3.0}])
    assert store.metrics(job.id) == [
        {"step": 1, "loss": 9.0}, {"step": 2, "loss": 8.0}, {"step": 3, "loss": 7.0},
        {"step": 4, "loss": 4.5, "lr": 0.1}, {"step": 5, "loss": 5.0}, {"step": 6, "loss": 3.0},
    ]
    assert [m["step"] for m in store.metrics(job.id, since_step=3, limit=2)] == [3, 4]


def test_metrics_edge_cases(store):
    job = submit(store)
    store.record_metrics(job.id, 1, [{"step": 1, "loss": 1.0}, {"step": 1, "loss": 0.5},
                                     {"step": 2, "loss": float("nan"), "gnorm": float("inf")}])
    assert store.metrics(job.id) == [{"step": 1, "loss": 0.5},
                                     {"step": 2, "loss": None, "gnorm": None}]
    many = METRICS_BATCH * 2 + 7
    store.record_metrics(job.id, 1, [{"step": s, "loss": 1.0} for s in range(many)])
    assert len(store.metrics(job.id)) == many
    store.record_metrics(job.id, 1, [])
    with pytest.raises(ValueError, match="step"):
        store.record_metrics(job.id, 1, [{"loss": 1.0}])
    with pytest.raises(JobNotFound):
        store.record_metrics(NO_SUCH_JOB, 1, [{"step": 1}])
    assert store.metrics(NO_SUCH_JOB) == []


def test_logs_page_by_after_id(store):
    job, other = submit(store), submit(store)
    store.append_log(job.id, [f"line {i}" for i in range(12)])
    store.append_log(other.id, ["not ours"])
    store.append_log(job.id, [f"line {i}" for i in range(12, 25)])
    pages, after = [], 0
    while page := store.logs(job.id, after_id=after, limit=10):
        pages.append(page)
        after = page[-1].id
    assert [len(p) for p in pages] == [10, 10, 5]
    lines = [log for page in pages for log in page]
    assert [log.line for log in lines] == [f"line {i}" for i in range(25)]
    assert all(a.id < b.id for a, b in zip(lines, lines[1:]))
    assert lines[0].time.tzinfo == timezone.utc
    assert [log.line for log in store.logs(other.id)] == ["not ours"]


def test_log_lines_are_cut_and_cleaned(store):
    job = submit(store)
    store.append_log(job.id, ["x" * (LOG_LINE_LENGTH + 100), "nul\x00here", "",
                              "forged\n2026-01-01 step 1\x1b[2J"])
    long, nul, empty, forged = (log.line for log in store.logs(job.id))
    assert len(long) <= LOG_LINE_LENGTH and long.startswith("x" * 4000)
    assert long.endswith("more chars]")
    assert nul == "nul\\x00here" and empty == ""
    assert forged == "forged\\n2026-01-01 step 1\\x1b[2J"
    store.append_log(job.id, [])
    with pytest.raises(JobNotFound):
        store.append_log(NO_SUCH_JOB, ["lost"])



def test_count_by_state_spans_every_tenant(store):
    a, _ = store.create_job(tenant="acme", name="a", spec=SPEC)
    store.create_job(tenant="zeta", name="b", spec=SPEC)
    store.transition(a.id, S.CANCELLED, reason="test")
    counts = store.count_by_state()
    assert counts[S.QUEUED] == 1 and counts[S.CANCELLED] == 1
    assert counts[S.RUNNING] == 0 and set(counts) == set(S)
