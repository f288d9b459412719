"""The database engine behind the job store: URL handling and the per-dialect
settings that let one process use it from many threads.

SQLite: WAL (readers never block the writer), a busy timeout, foreign keys
on, and transactions we begin ourselves. The sqlite3 driver's own transaction
handling (before Python 3.12) begins nothing for a SELECT, so a
read-then-write could upgrade a stale read lock and fail at once with
"database is locked". Instead every read transaction is a plain `BEGIN` and
every write transaction a `BEGIN IMMEDIATE`: writers queue on the busy timeout
and each sees the latest committed state. A read of one statement
(`single_reads`) begins nothing on SQLite: one SELECT is consistent by itself,
and BEGIN and COMMIT would be two more round trips through the driver.

The event loop's reads (`loop_reader`, SQLite only) have an engine of their
own on the same file, never the pool the threads share. A read on the loop
that waited for a connection held by threads (a burst of writes, a slow
export, a leak) would stall every request of the server, so it must never
wait on one: its pool keeps one connection, which the loop uses one read at a
time, and a checkout that finds it taken opens another (no limit, so no
waiting) rather than queueing. The connection is read-only (`query_only`): in
WAL mode a reader waits on no writer, so the loop never waits on the file
either. (The other way, trying the shared pool and hopping to a thread when
it has nothing free, would still hand the loop a pool the threads drain, and
a check of the pool and its checkout cannot be one step.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session

BUSY_TIMEOUT_MS = 30_000
# Postgres ends a session that sits this long inside a transaction: a replica
# stopped (SIGSTOP) mid-transaction must not hold its row locks, the leader
# lease's among them, until it wakes.
IDLE_IN_TRANSACTION_MS = 5_000
_WRITE = "brigade_write"  # an execution option: this connection will write
_SINGLE = "brigade_single_read"  # an execution option: one SELECT, no transaction needed


def normalize_url(url: str | URL) -> URL:
    """`postgresql://` and `postgres://` mean psycopg 3; other URLs pass as given."""
    url = make_url(url)
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    return url


def build_engines(url: str | URL) -> tuple[Engine, Engine]:
    """(reader, writer): one pool; the writer's transactions take the write
    lock up front on SQLite and are ordinary transactions elsewhere."""
    url = normalize_url(url)
    if url.get_backend_name() not in ("sqlite", "postgresql"):
        raise ValueError(f"the job store runs on SQLite or Postgres, not {url.drivername}")
    engine = _sqlite_engine(url) if url.get_backend_name() == "sqlite" else _postgres_engine(url)
    return engine, engine.execution_options(**{_WRITE: True})


def loop_reader(url: str | URL) -> Engine | None:
    """The event loop's own read-only engine where reads are local (SQLite),
    never waiting for a connection; None elsewhere (a read of a server waits
    on the network: it runs in the thread pool)."""
    url = normalize_url(url)
    if url.get_backend_name() != "sqlite":
        return None
    return _sqlite_engine(url, read_only=True)


def single_reads(reader: Engine) -> Engine:
    """The reader for one-statement reads (`_on_begin`: no BEGIN on SQLite;
    elsewhere the driver's own implicit transaction)."""
    return reader.execution_options(**{_SINGLE: True})


@contextmanager
def transaction(engine: Engine) -> Iterator[Session]:
    """A session in one transaction on `engine` (the reader or the writer),
    committed on leaving, rolled back on an exception."""
    with Session(engine) as session, session.begin():
        yield session


class Fence(Protocol):
    """What a fenced store checks at the start of each write transaction
    (`service.leadership.Leadership`): raises `Deposed` where the writer
    leads no more."""

    def check(self, session: Session) -> None: ...


@contextmanager
def write_transaction(writer: Engine, fence: Fence | None) -> Iterator[Session]:
    """A write transaction on `writer`; with a fence, the fence's check runs
    first, in the same transaction (the check and the write: one
    transaction, so a new leader's token bump conflicts with it)."""
    with transaction(writer) as session:
        if fence is not None:
            fence.check(session)
        yield session


def _strict_json(value) -> str:
    # Postgres refuses NaN and Infinity in JSON; refuse them on every dialect alike.
    return json.dumps(value, allow_nan=False)


def _postgres_engine(url: URL) -> Engine:
    engine = create_engine(url, pool_pre_ping=True, json_serializer=_strict_json)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:
        with dbapi_connection.cursor() as cursor:
            cursor.execute(f"SET idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_MS}")
        dbapi_connection.commit()

    return engine


def _sqlite_engine(url: URL, *, read_only: bool = False) -> Engine:
    if url.database in (None, "", ":memory:") or url.query.get("mode") == "memory":
        raise ValueError(
            "the job store needs a SQLite file (sqlite:///path/brigade.db), not an "
            "in-memory database: each pooled connection would see its own empty one"
        )
    Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    # The loop's: one connection kept, any more opened at once (max_overflow -1: no limit).
    pool = {"pool_size": 1, "max_overflow": -1} if read_only else {}
    engine = create_engine(
        url,
        json_serializer=_strict_json,
        connect_args={"timeout": BUSY_TIMEOUT_MS / 1000, "check_same_thread": False},
        **pool,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves (below)
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")  # durable across crashes in WAL mode
        if read_only:
            cursor.execute("PRAGMA query_only=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection) -> None:
        options = connection.get_execution_options()
        if options.get(_WRITE, False):
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        elif not options.get(_SINGLE, False):
            connection.exec_driver_sql("BEGIN")

    return engine
