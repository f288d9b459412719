"""The leader lease and its fence on SQLite and Postgres: acquire, renew,
expire on the database's clock, the token rising at each new holder, a
stale token's writes refused, racing replicas leaving exactly one leader,
and the replica named in the events and audit rows it writes."""

from __future__ import annotations

import time
import uuid

import pytest

from service.leadership import Leadership
from service.states import JobState as S
from service.store.errors import Deposed
from tests.service.store_harness import race, submit


@pytest.fixture
def lease_name() -> str:
    """A lease of this test's own (the Postgres database is the session's)."""
    return f"test-{uuid.uuid4().hex[:8]}"


def test_acquire_renew_expire_and_the_token_rising(store, lease_name):
    leases = store.leases
    assert leases.holder(lease_name) is None
    first = leases.acquire(lease_name, "a", 0.6)
    assert first is not None
    assert leases.holder(lease_name).holder == "a"
    assert leases.acquire(lease_name, "b", 0.6) is None  # held: b waits
    assert leases.renew(lease_name, "a", first, 0.6)
    assert not leases.renew(lease_name, "b", first, 0.6)  # only the holder renews
    time.sleep(0.8)  # not renewed: it runs out on the database's clock
    assert leases.holder(lease_name) is None
    second = leases.acquire(lease_name, "b", 5)
    assert second == first + 1
    assert not leases.renew(lease_name, "a", first, 5)  # a's term is over
    leases.release(lease_name, "b", second)
    assert leases.holder(lease_name) is None
    assert leases.acquire(lease_name, "a", 5) == second + 1  # released: free at once, token up


def test_racing_replicas_leave_exactly_one_leader(store, lease_name):
    tokens = race(6, lambda i: store.leases.acquire(lease_name, f"r{i}", 30))
    won = [i for i, token in enumerate(tokens) if isinstance(token, int)]
    assert len(won) == 1, tokens
    assert store.leases.holder(lease_name).holder == f"r{won[0]}"


def test_two_leaderships_racing_one_leads(store, lease_name):
    a = Leadership(store.leases, "a", 30, name=lease_name)
    b = Leadership(store.leases, "b", 30, name=lease_name)
    results = race(2, lambda i: (a, b)[i].acquire())
    assert sorted(results) == [False, True]
    assert a.is_leader != b.is_leader
    assert a.holder() == b.holder() == ("a" if a.is_leader else "b")


def test_a_stale_tokens_writes_are_refused(store, lease_name):
    job = submit(store)
    store.replica = "old"
    lost = []
    old = Leadership(store.leases, "old", 0.5, name=lease_name, on_lost=lost.append)
    assert old.acquire()
    fenced = store.fenced(old)
    fenced.transition(job.id, S.STARTING, expect=S.QUEUED, workers=1, attempt=1, reason="admitted")
    time.sleep(0.7)  # its lease ran out: it must not write, even before another takes over
    with pytest.raises(Deposed):
        fenced.note(job.id, "a write after the lease ran out")
    assert not old.is_leader and len(lost) == 1
    new = Leadership(store.leases, "new", 30, name=lease_name)
    assert new.acquire() and new.token > 0
    # The old replica takes its lease again only by a new term: its old token is refused.
    old._token, old._deadline = 1, time.monotonic() + 30  # as if it woke from a stop
    with pytest.raises(Deposed, match="new"):
        fenced.transition(job.id, S.RUNNING, expect=S.STARTING, reason="started")
    with pytest.raises(Deposed):
        fenced.record_metrics(job.id, 1, [{"step": 1, "loss": 1.0}])
    with pytest.raises(Deposed):
        fenced.append_log(job.id, ["a line"])
    assert store.get_job(job.id).state is S.STARTING
    assert store.metrics(job.id) == [] and store.logs(job.id) == []
    # The new leader's writes go through; the API's plain store is never fenced.
    store.replica = "new"
    store.fenced(new).transition(job.id, S.RUNNING, expect=S.STARTING, reason="started")
    store.note(job.id, "an API write")
    events = store.events(job.id)
    assert [(e.to_state, e.replica) for e in events][1:] == [
        (S.STARTING, "old"), (S.RUNNING, "new"), (S.RUNNING, "new")]


def test_audit_rows_name_the_replica(store):
    store.replica = "replica-1"
    row = store.audit.record(actor="admin", action="job.cancel", target="j-1")
    assert row.replica == "replica-1"
    assert store.audit.list()[0][0].replica == "replica-1"
