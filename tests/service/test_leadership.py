"""Leadership's thread on a real store (SQLite): the leader renews and keeps
leading, a clean stop hands the lease to a follower within a third of the
lease, and a leader that cannot reach the database within its lease stops
leading by itself (here: another process holds the database's write lock)."""

from __future__ import annotations

import sqlite3
import time

import pytest

from service.leadership import Leadership
from service.store import JobStore


@pytest.fixture
def store(tmp_path):
    store = JobStore(f"sqlite:///{tmp_path / 'brigade.db'}")
    store.migrate()
    yield store
    store.dispose()


def wait_for(condition, timeout_s: float) -> float:
    """Seconds until `condition()` held (fails past the timeout)."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout_s, "timed out"
        time.sleep(0.02)
    return time.monotonic() - started


def test_the_leader_renews_and_a_clean_stop_hands_over_at_once(store):
    gained, lost = [], []
    a = Leadership(store.leases, "a", 0.9, on_gained=gained.append, on_lost=lost.append).start()
    b = Leadership(store.leases, "b", 0.9).start()
    try:
        assert a.is_leader and not b.is_leader and len(gained) == 1
        time.sleep(2.0)  # two leases long: renewed all along
        assert a.is_leader and not b.is_leader and a.holder() == "a" and lost == []
        a.stop()  # gives the lease up
        assert wait_for(lambda: b.is_leader, 2.0) < 0.9  # not a lease later: at b's next try
        assert b.token > gained[0] and b.holder() == "b"
    finally:
        a.stop()
        b.stop()


def test_a_leader_that_cannot_renew_stops_leading_by_itself(store, tmp_path):
    lost = []
    a = Leadership(store.leases, "a", 0.9, on_lost=lost.append).start()
    blocker = sqlite3.connect(tmp_path / "brigade.db", isolation_level=None)
    try:
        assert a.is_leader
        blocker.execute("BEGIN IMMEDIATE")  # the database's write lock, held: renewals wait
        took = wait_for(lambda: not a.is_leader, 3.0)
        assert took <= 0.9 + 0.1, took  # within its lease of the last renewal
        wait_for(lambda: lost, 2.0)
        assert "could not renew" in lost[0] or "ran out" in lost[0]
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert wait_for(lambda: a.is_leader, 3.0) >= 0  # the database back: it leads again, a new term
    a.stop()
