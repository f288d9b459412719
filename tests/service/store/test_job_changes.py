"""The count of each tenant's job changes (`job_changes`, bumped by the
database's own triggers): every write of a job moves its tenant's count, and
only its tenant's; a second store on the same database (another process)
sees the writes of the first at once."""

from __future__ import annotations

from sqlalchemy import text
from store_harness import submit

from service.states import JobState as S
from service.store import JobStore


def test_every_write_of_a_job_moves_its_tenants_count_and_only_its(store):
    reads = store.reads
    assert reads.jobs_version("acme") == reads.jobs_version(None) == 0
    seen = [reads.jobs_version("acme")]

    def moved() -> None:
        now = reads.jobs_version("acme")
        assert now > seen[-1]
        seen.append(now)

    job = submit(store)
    moved()
    store.transition(job.id, S.CANCELLED, reason="test")
    moved()
    store.update_job(job.id, step=3)
    moved()
    other = submit(store, tenant="globex")
    assert reads.jobs_version("acme") == seen[-1]  # another tenant's write
    assert reads.jobs_version("globex") == 1
    assert reads.jobs_version(None) == seen[-1] + 1  # every tenant's: the sum
    store.note(job.id, "reattached")  # an event alone leaves the job row as it was
    store.record_metrics(job.id, 0, [{"step": 1, "loss": 1.0}])
    assert reads.jobs_version("acme") == seen[-1]
    store.delete_job(job.id)
    moved()
    assert reads.jobs_version("globex") == 1 and store.get_job(other.id) is not None


def test_a_second_store_on_the_same_database_sees_the_counts_of_the_first(store, db_url):
    second = JobStore(db_url)  # another process: its own engines and pools
    try:
        before = second.reads.jobs_version("acme")
        job = submit(store)
        assert second.reads.jobs_version("acme") > before
        if second.loop_reads is not None:  # SQLite: the event loop's own connection too
            assert second.loop_reads.jobs_version("acme") == second.reads.jobs_version("acme")
        before = store.reads.jobs_version("acme")
        second.transition(job.id, S.CANCELLED, reason="from the other process")
        assert store.reads.jobs_version("acme") > before
    finally:
        second.dispose()


def test_a_write_outside_the_store_moves_the_count_too(store, db_url):
    job = submit(store)
    before = store.reads.jobs_version("acme")
    second = JobStore(db_url)
    try:
        with second._writer.begin() as connection:  # plain SQL, as a script would
            connection.execute(text("UPDATE jobs SET step = 7 WHERE id = :id"), {"id": job.id})
    finally:
        second.dispose()
    assert store.reads.jobs_version("acme") == before + 1


def test_deleting_a_tenant_moves_the_count_of_its_jobs(store):
    record, _ = store.tenants.create("acme")
    job = submit(store)
    store.transition(job.id, S.CANCELLED, reason="test")
    before = store.reads.jobs_version("acme")
    store.tenants.delete(record.id)
    assert store.reads.jobs_version("acme") > before
