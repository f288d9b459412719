"""The leader lease on the database (`leader_lease`, migration 0009): one row
per lease name saying who holds it, until when, and its fencing token.

Every time is the DATABASE's clock (Postgres `clock_timestamp()`, SQLite
`strftime('now')`), never a replica's: replicas whose clocks disagree still
agree on when a lease ran out. The token rises by one at every acquisition,
so a replica's writes can be checked against the token it was given
(`check`, inside the write's own transaction): once another replica has
acquired the lease, the old holder's writes are refused.

`service.leadership.Leadership` drives it (acquire, renew, release) and is
the fence that the leader's view of the store checks (`JobStore.fenced`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from service.store.engine import transaction
from service.store.errors import Deposed

CONTROL_PLANE = "control-plane"  # the lease the control plane's leader holds
LOCK_WAIT_S = 2.0  # a lease statement waits this long for the row (Postgres), then gives up


@dataclass(frozen=True)
class LeaseRecord:
    name: str
    holder: str
    token: int
    expires_at: datetime


class LeaseStore:
    """Shares the job store's engines (`JobStore.leases`)."""

    def __init__(self, reader: Engine, writer: Engine):
        self._reader, self._writer = reader, writer
        self._postgres = writer.dialect.name == "postgresql"

    def acquire(self, name: str, replica: str, lease_s: float) -> int | None:
        """Take the lease for `lease_s` seconds if it is free, has run out, or
        is `replica`'s already: its new token (one above the last), or None
        (another replica holds it). Of replicas racing for a free lease,
        exactly one gets it (the UPDATE's condition is read again under the
        row's lock)."""
        now, later = self._now(), self._now(plus=True)
        with transaction(self._writer) as session:
            self._wait_briefly(session)
            session.execute(text("INSERT INTO leader_lease (name, holder, token) "
                                 "VALUES (:name, NULL, 0) ON CONFLICT (name) DO NOTHING"),
                            {"name": name})
            return session.execute(text(
                f"UPDATE leader_lease SET holder = :me, token = token + 1, expires_at = {later}, "
                f"acquired_at = {now} WHERE name = :name AND (holder IS NULL OR holder = :me "
                f"OR expires_at IS NULL OR expires_at < {now}) RETURNING token"),
                {"name": name, "me": replica, **self._shift(lease_s)}).scalar_one_or_none()

    def renew(self, name: str, replica: str, token: int, lease_s: float) -> bool:
        """Extend the lease `replica` holds with `token` to `lease_s` seconds
        from now; False if it holds it no more (another took it)."""
        later = self._now(plus=True)
        with transaction(self._writer) as session:
            self._wait_briefly(session)
            renewed = session.execute(text(
                f"UPDATE leader_lease SET expires_at = {later} "
                "WHERE name = :name AND holder = :me AND token = :token RETURNING token"),
                {"name": name, "me": replica, "token": token, **self._shift(lease_s)})
            return renewed.scalar_one_or_none() is not None

    def release(self, name: str, replica: str, token: int) -> None:
        """Give the lease up (a clean stop): another replica may take it at
        once. The token stays, so the next holder's is higher still."""
        with transaction(self._writer) as session:
            self._wait_briefly(session)
            session.execute(text(
                "UPDATE leader_lease SET holder = NULL, expires_at = NULL "
                "WHERE name = :name AND holder = :me AND token = :token"),
                {"name": name, "me": replica, "token": token})

    def holder(self, name: str) -> LeaseRecord | None:
        """Who holds the lease now (None: no one, or it ran out)."""
        with transaction(self._reader) as session:
            row = session.execute(text(
                "SELECT holder, token, expires_at FROM leader_lease WHERE name = :name "
                f"AND holder IS NOT NULL AND expires_at >= {self._now()}"),
                {"name": name}).one_or_none()
        if row is None:
            return None
        return LeaseRecord(name, row.holder, int(row.token), _as_utc(row.expires_at))

    def check(self, session: Session, name: str, replica: str, token: int) -> None:
        """In a write's own transaction, before the write: `Deposed` unless
        `replica` still holds the lease with `token`. On Postgres the row is
        read FOR SHARE, so a new holder's acquisition (an UPDATE of the row)
        waits for this transaction to end, or this one reads its token: a
        write is never committed after another replica acquired the lease.
        (SQLite's write transactions are serialised whole by BEGIN IMMEDIATE.)"""
        lock = " FOR SHARE" if self._postgres else ""
        row = session.execute(text(f"SELECT holder, token FROM leader_lease WHERE name = :name{lock}"),
                              {"name": name}).one_or_none()
        if row is None or row.holder != replica or int(row.token) != token:
            holder = "no one" if row is None or row.holder is None else row.holder
            raise Deposed(replica, f"the lease is {holder}'s now "
                                   f"(token {None if row is None else row.token}, not {token})")

    # -- the database's clock ---------------------------------------------------

    def _now(self, *, plus: bool = False) -> str:
        """SQL for the database's time now (or `:shift` seconds on), as the
        column stores it (SQLite: text with microseconds, UTC)."""
        if self._postgres:
            return "(clock_timestamp() + make_interval(secs => :shift))" if plus else "clock_timestamp()"
        if plus:
            return "(strftime('%Y-%m-%d %H:%M:%f', 'now', :shift) || '000')"
        return "(strftime('%Y-%m-%d %H:%M:%f', 'now') || '000')"

    def _shift(self, seconds: float) -> dict:
        return {"shift": float(seconds) if self._postgres else f"+{float(seconds):.3f} seconds"}

    def _wait_briefly(self, session: Session) -> None:
        # A transaction holding the row (a stopped replica's write) must not stall the lease.
        if self._postgres:
            session.execute(text(f"SET LOCAL lock_timeout = '{int(LOCK_WAIT_S * 1000)}ms'"))


def _as_utc(value) -> datetime:
    """The stored expiry as an aware UTC time (SQLite hands back its text)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
