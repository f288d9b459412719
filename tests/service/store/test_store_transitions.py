"""Job state changes in the store: the table decides, a compare-and-set on the
stored state makes racing writers take turns, and every change is an event."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import deque

import psycopg
import pytest
from store_harness import NO_SUCH_JOB, race, submit

from service.states import TRANSITIONS, IllegalTransition
from service.states import JobState as S
from service.store import JobNotFound, UnexpectedState


def path_to(state: S) -> list[S]:
    """The shortest run of allowed transitions from QUEUED to `state`."""
    paths, todo = {S.QUEUED: []}, deque([S.QUEUED])
    while todo:
        here = todo.popleft()
        for there in sorted(TRANSITIONS[here]):
            if there not in paths:
                paths[there] = paths[here] + [there]
                todo.append(there)
    return paths[state]


def job_in(store, state: S):
    job = submit(store)
    for step in path_to(state):
        job = store.transition(job.id, step, reason="setup")
    return job


def test_every_allowed_transition_moves_and_records(store):
    for current, targets in TRANSITIONS.items():
        for target in sorted(targets):
            job = job_in(store, current)
            moved = store.transition(job.id, target, reason=f"{current.value} to {target.value}")
            assert moved.state is target and store.get_job(job.id) == moved
            *earlier, last = store.events(job.id)
            assert len(earlier) == len(path_to(current)) + 1
            assert (last.from_state, last.to_state) == (current, target)
            assert last.reason == f"{current.value} to {target.value}"


def test_every_disallowed_transition_raises_and_changes_nothing(store):
    for current in S:
        job = job_in(store, current)
        events = store.events(job.id)
        for target in sorted(set(S) - TRANSITIONS[current]):
            with pytest.raises(IllegalTransition) as raised:
                store.transition(job.id, target, reason="not allowed", step=99, error="x")
            assert (raised.value.current, raised.value.target) == (current, target)
        assert store.get_job(job.id) == job
        assert store.events(job.id) == events


def test_events_keep_order_and_reasons(store):
    job = submit(store, reason="from the api")
    for state, reason in [(S.STARTING, "admitted"), (S.RUNNING, "all ranks up"),
                          (S.RESTARTING, "rank 2 lost"), (S.STARTING, "from step 10"),
                          (S.RUNNING, "all ranks up"), (S.SUCCEEDED, "done")]:
        store.transition(job.id, state, reason=reason)
    events = store.events(job.id)
    assert [(e.from_state, e.to_state, e.reason) for e in events] == [
        (None, S.QUEUED, "from the api"),
        (S.QUEUED, S.STARTING, "admitted"), (S.STARTING, S.RUNNING, "all ranks up"),
        (S.RUNNING, S.RESTARTING, "rank 2 lost"), (S.RESTARTING, S.STARTING, "from step 10"),
        (S.STARTING, S.RUNNING, "all ranks up"), (S.RUNNING, S.SUCCEEDED, "done"),
    ]
    assert all(e.job_id == job.id for e in events)
    assert [e.time for e in events] == sorted(e.time for e in events)
    assert store.events(NO_SUCH_JOB) == []


def test_started_at_is_the_first_running_and_finished_at_the_end(store):
    job = job_in(store, S.STARTING)
    assert job.started_at is None
    first = store.transition(job.id, S.RUNNING, reason="up")
    assert first.started_at is not None and first.finished_at is None
    store.transition(job.id, S.RESTARTING, reason="lost a rank")
    store.transition(job.id, S.STARTING, reason="relaunch")
    again = store.transition(job.id, S.RUNNING, reason="up again")
    assert again.started_at == first.started_at and again.finished_at is None
    done = store.transition(job.id, S.FAILED, reason="retries exhausted", error="boom")
    assert done.finished_at is not None and done.error == "boom"
    assert job.created_at <= done.started_at <= done.finished_at == done.updated_at
    never_ran = store.transition(submit(store).id, S.CANCELLED, reason="user")
    assert never_ran.started_at is None and never_ran.finished_at is not None


def test_fields_change_with_the_state(store):
    job = submit(store)
    moved = store.transition(job.id, S.STARTING, reason="launch", attempt=1, workers=4,
                             requested_workers=None)
    assert (moved.state, moved.attempt, moved.workers) == (S.STARTING, 1, 4)
    with pytest.raises(TypeError, match="transition"):
        store.transition(job.id, S.RUNNING, reason="x", state=S.RUNNING)
    with pytest.raises(TypeError, match="spec"):
        store.transition(job.id, S.RUNNING, reason="x", spec={})
    assert store.get_job(job.id) == moved


def test_expect_guards_the_current_state(store):
    job = job_in(store, S.RUNNING)
    with pytest.raises(UnexpectedState, match="is RUNNING, not QUEUED") as raised:
        store.transition(job.id, S.FAILED, reason="x", expect=S.QUEUED)
    assert raised.value.expected == {S.QUEUED}
    assert store.get_job(job.id) == job
    moved = store.transition(job.id, S.CANCELLING, reason="user", expect={S.STARTING, S.RUNNING})
    assert moved.state is S.CANCELLING
    with pytest.raises(JobNotFound):
        store.transition(NO_SUCH_JOB, S.STARTING, reason="x")


def test_each_change_written_is_told_once_and_a_refused_one_never(store):
    told = []
    store.on_transition = lambda tenant, to: told.append((tenant, to))
    job = job_in(store, S.RUNNING)
    with pytest.raises(IllegalTransition):
        store.transition(job.id, S.QUEUED, reason="not from RUNNING")
    with pytest.raises(UnexpectedState):
        store.transition(job.id, S.PREEMPTING, reason="x", expect=S.STARTING)
    store.note(job.id, "a note is no change")
    store.transition(job.id, S.PREEMPTING, reason="preempted")
    assert told == [("acme", S.STARTING), ("acme", S.RUNNING), ("acme", S.PREEMPTING)]


def test_racing_the_same_transition_one_wins(store):
    job = submit(store)
    results = race(8, lambda i: store.transition(job.id, S.STARTING, reason=f"r{i}", attempt=i))
    [winner] = [r for r in results if not isinstance(r, Exception)]
    losers = [r for r in results if isinstance(r, Exception)]
    assert len(losers) == 7 and all(isinstance(e, IllegalTransition) for e in losers), losers
    assert store.get_job(job.id) == winner
    assert [e.reason for e in store.events(job.id)][1:] == [f"r{winner.attempt}"]


def test_racing_different_transitions_one_wins(store):
    job = job_in(store, S.RUNNING)
    targets = sorted(TRANSITIONS[S.RUNNING])
    results = race(len(targets), lambda i: store.transition(
        job.id, targets[i], reason=targets[i].value, expect=S.RUNNING))
    [winner] = [r for r in results if not isinstance(r, Exception)]
    assert all(isinstance(r, UnexpectedState) for r in results if r is not winner), results
    assert store.get_job(job.id) == winner
    assert [e.to_state for e in store.events(job.id)][-2:] == [S.RUNNING, winner.state]


class ExternalWrite:
    """Another process's uncommitted state change on the job's row, in raw
    DBAPI: our transition starts while it is open and meets it at commit."""

    def __init__(self, store, job_id: str, state: S):
        url = store.url
        if store.dialect == "sqlite":
            self.connection = sqlite3.connect(url.database, isolation_level=None)
            self.connection.execute("BEGIN IMMEDIATE")
        else:
            self.connection = psycopg.connect(
                url.set(drivername="postgresql").render_as_string(hide_password=False))
        self.dialect = store.dialect
        mark = "?" if self.dialect == "sqlite" else "%s"
        self.connection.execute(f"UPDATE jobs SET state = {mark} WHERE id = {mark}",
                                (state.value, job_id))

    def wait_for_a_waiter(self) -> None:
        """Until another session waits on our row lock (Postgres), or a moment (SQLite)."""
        if self.dialect == "sqlite":
            time.sleep(0.3)
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            waiting = self.connection.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'").fetchone()[0]
            if waiting:
                return
            time.sleep(0.01)
        raise TimeoutError("the transition never waited on the row")

    def commit(self) -> None:
        self.connection.execute("COMMIT") if self.dialect == "sqlite" else self.connection.commit()
        self.connection.close()


@pytest.mark.parametrize(
    "meanwhile, target, expect, outcome",
    [
        (S.SUSPENDING, S.FAILED, None, S.FAILED),  # still allowed from the new state
        (S.CANCELLING, S.FAILED, None, IllegalTransition),  # not allowed from it
        (S.SUSPENDING, S.FAILED, S.RUNNING, UnexpectedState),  # not the state we expected
    ],
)
def test_a_change_underneath_is_seen(store, meanwhile, target, expect, outcome):
    job = job_in(store, S.RUNNING)
    other = ExternalWrite(store, job.id, meanwhile)
    result = []
    thread = threading.Thread(target=lambda: result.append(_try(
        lambda: store.transition(job.id, target, reason="ours", expect=expect))))
    thread.start()
    other.wait_for_a_waiter()
    other.commit()
    thread.join(30)
    [got] = result
    events = store.events(job.id)
    if isinstance(outcome, S):
        assert got.state is outcome
        assert (events[-1].from_state, events[-1].to_state) == (meanwhile, target)
    else:
        assert type(got) is outcome, got
        assert got.current is meanwhile
        assert store.get_job(job.id).state is meanwhile and events[-1].to_state is S.RUNNING


def _try(fn):
    try:
        return fn()
    except Exception as error:  # noqa: BLE001 - the test judges it
        return error
