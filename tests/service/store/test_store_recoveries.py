"""Recoveries and the restart policy's count, on SQLite and Postgres: a
recovery's event (kind, detail, its sentence) and the job's `recoveries`
written together, and refused to a deposed leader; the failures since
progress kept across a restart of the store; what an attempt's rows say of
its steps; migration 0010 carrying a job's restarts over as its count."""

from __future__ import annotations

import time
import uuid

import pytest
from alembic import command
from sqlalchemy import create_engine, text

from service.leadership import Leadership
from service.scheduling import AttemptSteps
from service.states import JobState as S
from service.store import JobNotFound, JobStore
from service.store.errors import Deposed
from service.store.recovery_event import Recovery
from service.store.store import alembic_config
from tests.service.store_harness import NO_SUCH_JOB, submit


def running(store, workers=2):
    job = submit(store)
    store.transition(job.id, S.STARTING, expect=S.QUEUED, workers=workers, attempt=1,
                     reason="admitted")
    return store.transition(job.id, S.RUNNING, expect=S.STARTING, reason="started")


def test_an_in_place_recovery_is_one_event_and_counted(store):
    job = running(store)
    store.replica = "r-1"
    event = store.record_recovery(job.id, ranks=[1], from_step=14, to_step=12, seconds=0.84,
                                  in_place=True, reason="node n-2 gone: ActorDiedError")
    assert (event.kind, event.from_state, event.to_state, event.workers, event.replica) == (
        "recovery", S.RUNNING, S.RUNNING, 2, "r-1")
    assert event.reason == ("rank 1 lost at step 14 (node n-2 gone: ActorDiedError): recovered "
                            "in place from the in-memory snapshot of step 12 in 0.8 s")
    assert event.detail == {"ranks": [1], "from_step": 14, "to_step": 12, "seconds": 0.84,
                            "in_place": True, "reason": "node n-2 gone: ActorDiedError"}
    after = store.get_job(job.id)
    assert (after.recoveries, after.restarts, after.state) == (1, 0, S.RUNNING)
    assert store.events(job.id)[-1] == event  # as read back
    assert Recovery.of(event).seconds == 0.84
    # State changes and notes have no kind.
    store.note(job.id, "reattached")
    assert [e.kind for e in store.events(job.id)] == [None, None, None, "recovery", None]
    assert all(e.detail is None for e in store.events(job.id) if e.kind is None)


def test_a_fallback_is_recorded_but_counts_no_recovery(store):
    job = running(store, workers=4)
    event = store.record_recovery(job.id, ranks=[3, 1, 3], from_step=30, to_step=None,
                                  seconds=61.0, in_place=False,
                                  reason="the replacement rank did not join within 60 s")
    assert event.reason == ("ranks 1 and 3 lost at step 30: fell back to a whole-group restart "
                            "from the last committed checkpoint after 61.0 s: the replacement "
                            "rank did not join within 60 s")
    assert event.detail["ranks"] == [1, 3] and event.detail["in_place"] is False
    assert store.get_job(job.id).recoveries == 0


def test_recoveries_add_up_and_show_in_the_lists(store):
    job = running(store)
    for step in (5, 9, 13):
        store.record_recovery(job.id, ranks=[0], from_step=step, to_step=step - 1, seconds=1.0,
                              in_place=True, reason="lost")
    assert store.get_job(job.id).recoveries == 3
    listed, _ = store.list_jobs(tenant="acme")  # the API's reads (no ORM object)
    assert listed[0].recoveries == 3 and listed[0].failures_since_progress == 0


def test_a_recovery_is_checked_and_made_safe(store):
    job = running(store)
    with pytest.raises(ValueError, match="finite"):
        store.record_recovery(job.id, ranks=[0], from_step=1, to_step=1, seconds=float("nan"),
                              in_place=True, reason="x")
    with pytest.raises(JobNotFound):
        store.record_recovery(NO_SUCH_JOB, ranks=[0], from_step=1, to_step=1, seconds=1.0,
                              in_place=True, reason="x")
    event = store.record_recovery(job.id, ranks=[], from_step=3, to_step=2, seconds=-0.2,
                                  in_place=True, reason="line one\nline two" + "x" * 2000)
    assert event.detail["seconds"] == 0.0  # clocks apart: never negative
    assert event.reason.startswith("a rank lost at step 3 (line one\\nline two")
    assert "\n" not in event.reason and len(event.detail["reason"]) < 600
    assert store.get_job(job.id).recoveries == 1


def test_a_deposed_leader_records_no_recovery(store):
    job = running(store)
    name = f"test-{uuid.uuid4().hex[:8]}"
    old = Leadership(store.leases, "old", 0.5, name=name)
    assert old.acquire()
    fenced = store.fenced(old)
    fenced.record_recovery(job.id, ranks=[1], from_step=4, to_step=4, seconds=0.5,
                           in_place=True, reason="while leading")
    time.sleep(0.7)  # its lease ran out
    with pytest.raises(Deposed):
        fenced.record_recovery(job.id, ranks=[1], from_step=8, to_step=8, seconds=0.5,
                               in_place=True, reason="after its lease")
    assert store.get_job(job.id).recoveries == 1
    assert [e.detail["from_step"] for e in store.events(job.id) if e.kind] == [4]


def test_the_failures_since_progress_are_kept_with_the_restart(store, db_url):
    job = running(store)
    store.transition(job.id, S.RESTARTING, expect=S.RUNNING, reason="lost", restarts=1,
                     failures_since_progress=1)
    store.transition(job.id, S.STARTING, expect=S.RESTARTING, reason="again", attempt=2)
    store.transition(job.id, S.RUNNING, expect=S.STARTING, reason="started")
    store.transition(job.id, S.RESTARTING, expect=S.RUNNING, reason="lost again", restarts=2,
                     failures_since_progress=2)
    reopened = JobStore(db_url)  # as a restarted control plane reads it
    try:
        again = reopened.get_job(job.id)
        assert (again.restarts, again.failures_since_progress) == (2, 2)
        reopened.update_job(job.id, failures_since_progress=0)
        assert store.get_job(job.id).failures_since_progress == 0
    finally:
        reopened.dispose()


def test_an_attempts_steps_as_its_rows_say(store):
    job = running(store)
    assert store.attempt_steps(job.id, 1) is None  # no row yet
    # The first attempt from scratch (its first row says where it began), ...
    store.record_metrics(job.id, 1, [{"step": 1, "loss": 1.0, "resumed_from": 0},
                                     *({"step": s, "loss": 1.0} for s in range(2, 8))])
    assert store.attempt_steps(job.id, 1) == AttemptSteps(resumed_from=0, last=7)
    # ... the second resumed at 4: the rows a checkpoint carried (steps 3, 4, recorded
    # under it), then its own; steps 5 to 7 done again are its rows now.
    store.record_metrics(job.id, 2, [{"step": 3, "loss": 1.0}, {"step": 4, "loss": 1.0}])
    store.record_metrics(job.id, 2, [{"step": 5, "loss": 1.0, "resumed_from": 4},
                                     *({"step": s, "loss": 1.0} for s in range(6, 10))])
    assert store.attempt_steps(job.id, 2) == AttemptSteps(resumed_from=4, last=9)
    assert store.attempt_steps(job.id, 1) == AttemptSteps(resumed_from=0, last=2)
    # Rows that say nothing of where they began (a dataset's files): after the step before.
    store.record_metrics(job.id, 3, [{"step": 12}, {"step": 13}])
    assert store.attempt_steps(job.id, 3) == AttemptSteps(resumed_from=11, last=13)
    assert store.attempt_steps(NO_SUCH_JOB, 1) is None


def test_migration_0010_carries_restarts_over_as_failures_since_progress(store, db_url):
    job = running(store)
    store.record_recovery(job.id, ranks=[0], from_step=1, to_step=1, seconds=1.0,
                          in_place=True, reason="x")
    command.downgrade(alembic_config(db_url), "0009")
    engine = create_engine(db_url)
    try:
        with engine.begin() as connection:
            connection.execute(text("UPDATE jobs SET restarts = 2 WHERE id = :id"), {"id": job.id})
    finally:
        engine.dispose()
    store.migrate()
    again = store.get_job(job.id)
    assert (again.restarts, again.failures_since_progress, again.recoveries) == (2, 2, 0)
    assert [e.kind for e in store.events(job.id)] == [None, None, None, None]
