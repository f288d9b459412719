"""The queue quota at submit, on SQLite and Postgres: N+1 racing creates at a
`max_queued_jobs` of N admit exactly N; an idempotent retry still answers its
job when the queue is full; a job that could never run under the quota is
refused for good; other tenants (and the admin) are not held to it."""

from __future__ import annotations

import threading

import pytest

from service.scheduling import Demand, Resources
from service.states import JobState
from service.store import QuotaExceeded
from workers.schema import JobSpec

SPEC = JobSpec.model_validate({"model": {"n_layers": 2}, "train": {"steps": 1}})
N = 3


def create(store, tenant, key=None, demand=None):
    return store.create_job(tenant=tenant, name="j", spec=SPEC, idempotency_key=key,
                            demand=demand)


def race(store, tenant, attempts):
    """`attempts` creates at once, from as many threads: (jobs, refusals)."""
    start = threading.Barrier(attempts)
    jobs, refused, lock = [], [], threading.Lock()

    def submit():
        start.wait()
        try:
            job, created = create(store, tenant)
            assert created
            with lock:
                jobs.append(job)
        except QuotaExceeded as error:
            with lock:
                refused.append(error)

    threads = [threading.Thread(target=submit) for _ in range(attempts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return jobs, refused


def test_racing_submits_admit_exactly_the_quota(store):
    store.tenants.create("acme", quota={"max_queued_jobs": N})
    jobs, refused = race(store, "acme", N + 1)
    assert len(jobs) == N and len(refused) == 1
    assert refused[0].retryable
    assert refused[0].reason == f"quota: tenant acme has {N}/{N} jobs queued"
    assert store.count_by_state().get(JobState.QUEUED) == N


def test_a_full_queue_refuses_until_a_job_leaves_it(store):
    store.tenants.create("acme", quota={"max_queued_jobs": 1})
    job, _ = create(store, "acme")
    with pytest.raises(QuotaExceeded):
        create(store, "acme")
    store.transition(job.id, JobState.CANCELLED, reason="test")
    assert create(store, "acme")[1]


def test_an_idempotent_retry_answers_its_job_when_the_queue_is_full(store):
    store.tenants.create("acme", quota={"max_queued_jobs": 1})
    job, created = create(store, "acme", key="k1")
    assert created
    again, created = create(store, "acme", key="k1")
    assert (again.id, created) == (job.id, False)
    with pytest.raises(QuotaExceeded):
        create(store, "acme", key="k2")


def test_racing_retries_of_one_key_make_one_job(store):
    store.tenants.create("acme", quota={"max_queued_jobs": 1})
    start, results = threading.Barrier(4), []

    def submit():
        start.wait()
        results.append(create(store, "acme", key="same"))

    threads = [threading.Thread(target=submit) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(results) == 4 and len({job.id for job, _ in results}) == 1
    assert sorted(created for _, created in results) == [False, False, False, True]


def test_other_tenants_and_the_admin_are_not_held_to_it(store):
    store.tenants.create("acme", quota={"max_queued_jobs": 1})
    store.tenants.create("beta", quota={"max_queued_jobs": 2})
    create(store, "acme")
    with pytest.raises(QuotaExceeded):
        create(store, "acme")
    jobs, refused = race(store, "beta", 3)
    assert len(jobs) == 2 and len(refused) == 1
    for _ in range(3):
        assert create(store, "admin")[1]


def test_a_job_that_could_never_run_is_refused_for_good(store):
    store.tenants.create("acme", quota={"max_workers": 2, "max_gpus": 2}, max_priority=5)
    big = Demand(0, (3, 4), Resources(1, 0))
    with pytest.raises(QuotaExceeded) as caught:
        create(store, "acme", demand=big)
    assert not caught.value.retryable
    assert "needs 3 workers at its smallest size; tenant acme may run 2" in caught.value.reason
    with pytest.raises(QuotaExceeded, match="needs 4 gpus"):
        create(store, "acme", demand=Demand(0, (2,), Resources(1, 2)))
    with pytest.raises(QuotaExceeded, match="max_priority 5"):
        create(store, "acme", demand=Demand(6, (1,), Resources(1, 0)))
    assert create(store, "acme", demand=Demand(5, (1, 2), Resources(1, 1)))[1]
    assert store.count_by_state().get(JobState.QUEUED) == 1


def _suspend(store, job):
    store.transition(job.id, JobState.STARTING, reason="t", workers=1)
    store.transition(job.id, JobState.RUNNING, reason="t")
    store.transition(job.id, JobState.SUSPENDING, reason="t")
    return store.transition(job.id, JobState.SUSPENDED, reason="t", workers=None)


def test_resuming_a_suspended_job_is_held_to_the_queue_quota(store):
    store.tenants.create("acme", quota={"max_queued_jobs": 1})
    suspended = _suspend(store, create(store, "acme")[0])
    queued, _ = create(store, "acme")  # the queue is full again
    with pytest.raises(QuotaExceeded) as refused:
        store.transition(suspended.id, JobState.QUEUED, reason="resumed", expect=JobState.SUSPENDED,
                         queue_quota="acme")
    assert refused.value.retryable and "1/1 jobs queued" in str(refused.value)
    assert store.get_job(suspended.id).state is JobState.SUSPENDED  # nothing changed
    store.transition(queued.id, JobState.CANCELLED, reason="made room")
    resumed = store.transition(suspended.id, JobState.QUEUED, reason="resumed",
                               expect=JobState.SUSPENDED, queue_quota="acme")
    assert resumed.state is JobState.QUEUED
