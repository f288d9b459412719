"""Leadership's thread on a real store (SQLite): the leader renews its lease
every third of it and keeps leading, a clean stop gives the lease up so a
follower leads at its next try (within a third of the lease, not a lease
later), and a leader that cannot reach the database within its lease stops
leading by itself (here: another process holds the database's write lock),
then leads again in a new term once the database is back.

The renewals are counted on the database: each one moves the lease row's
expiry (`leader_lease.expires_at`, on the database's clock) on."""

from __future__ import annotations

import sqlite3
import statistics
import time
from itertools import pairwise

import pytest

from service.leadership import Leadership
from service.store import JobStore
from service.store.leases import CONTROL_PLANE

LEASE_S = 0.9
EVERY_S = LEASE_S / 3  # how often the leader renews, and a follower tries


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
        time.sleep(0.01)
    return time.monotonic() - started


def watch_lease(store: JobStore, leader: Leadership, seconds: float) -> tuple[list, list]:
    """Watch the lease row for `seconds`: (each read's (holder, leader.is_leader),
    the expiries seen, in order, each once). A renewal moves the expiry on, so
    the expiries after the first are the renewals seen."""
    reads, expiries = [], []
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        found = store.leases.holder(CONTROL_PLANE)
        reads.append((found and found.holder, leader.is_leader))
        if found is not None and (not expiries or found.expires_at != expiries[-1]):
            expiries.append(found.expires_at)
        time.sleep(0.02)
    return reads, expiries


def test_the_leader_renews_and_a_clean_stop_hands_over_at_once(store):
    gained, lost = [], []
    a = Leadership(store.leases, "a", LEASE_S, on_gained=gained.append, on_lost=lost.append).start()
    b = Leadership(store.leases, "b", LEASE_S).start()
    try:
        assert a.is_leader and not b.is_leader and len(gained) == 1
        # Two leases long: a renewed all along (at least once a lease, or it would have
        # run out), never without the lease for a read, and b never led.
        reads, expiries = watch_lease(store, a, 2 * LEASE_S)
        assert reads and set(reads) == {("a", True)}, sorted(set(reads), key=str)
        assert len(expiries) - 1 >= 2, f"{len(expiries) - 1} renewals in two leases"
        assert not b.is_leader and a.holder() == "a" and lost == []
        a.stop()  # gives the lease up: the row names no one (not a, left to run out)
        after = store.leases.holder(CONTROL_PLANE)
        assert after is None or after.holder == "b", after
        took = wait_for(lambda: b.is_leader, 2.0)
        # At b's next try, a third of the lease at most (plus a loaded machine's delays);
        # a lease left to run out would have taken two thirds of one at the least.
        assert took < 2 * EVERY_S, f"b led {took:.2f} s after a's stop"
        assert b.token > gained[0] and b.holder() == "b"
    finally:
        a.stop()
        b.stop()


def test_the_lease_is_renewed_every_third_of_it(store):
    """Over three leases: about three renewals a lease (nine), each moving the
    expiry on by about a third of the lease. Fails if renewal stopped (none),
    ran once a lease (three) or spun (dozens)."""
    a = Leadership(store.leases, "a", LEASE_S).start()
    try:
        assert a.is_leader
        reads, expiries = watch_lease(store, a, 3 * LEASE_S)
    finally:
        a.stop()
    assert set(reads) == {("a", True)}, sorted(set(reads), key=str)
    renewals = len(expiries) - 1
    # 3 x 3 = 9 expected; each wait is a third of the lease plus the renewal's own time,
    # so fewer on a slow machine, never more than a third of the lease apart allows.
    assert 6 <= renewals <= 3 * 3 + 1, f"{renewals} renewals in three leases of {LEASE_S} s"
    gaps = [(later - earlier).total_seconds() for earlier, later in pairwise(expiries)]
    assert EVERY_S - 0.05 <= statistics.median(gaps) <= EVERY_S + 0.2, gaps


def test_a_leader_that_cannot_renew_stops_leading_by_itself(store, tmp_path):
    gained, lost = [], []
    a = Leadership(store.leases, "a", LEASE_S, on_gained=gained.append, on_lost=lost.append).start()
    blocker = sqlite3.connect(tmp_path / "brigade.db", isolation_level=None)
    try:
        assert a.is_leader and len(gained) == 1
        blocker.execute("BEGIN IMMEDIATE")  # the database's write lock, held: renewals wait
        took = wait_for(lambda: not a.is_leader, 3.0)
        assert took <= LEASE_S + 0.1, took  # within its lease of the last renewal
        wait_for(lambda: lost, 2.0)
        assert "could not renew" in lost[0] or "ran out" in lost[0]
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    try:
        # The database back: it leads again, in a new term (gained again, with a
        # higher fencing token, the one its fence now uses).
        wait_for(lambda: a.is_leader and len(gained) == 2, 3.0)
        assert len(gained) == 2 and gained[1] > gained[0], gained
        assert a.token == gained[1] and a.holder() == "a" and len(lost) == 1
    finally:
        a.stop()
