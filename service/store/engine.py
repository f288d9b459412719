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
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session

BUSY_TIMEOUT_MS = 30_000
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
    if url.get_backend_name() == "sqlite":
        engine = _sqlite_engine(url)
    else:
        engine = create_engine(url, pool_pre_ping=True, json_serializer=_strict_json)
    return engine, engine.execution_options(**{_WRITE: True})


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


def _strict_json(value) -> str:
    # Postgres refuses NaN and Infinity in JSON; refuse them on every dialect alike.
    return json.dumps(value, allow_nan=False)


def _sqlite_engine(url: URL) -> Engine:
    if url.database in (None, "", ":memory:") or url.query.get("mode") == "memory":
        raise ValueError(
            "the job store needs a SQLite file (sqlite:///path/brigade.db), not an "
            "in-memory database: each pooled connection would see its own empty one"
        )
    Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        json_serializer=_strict_json,
        connect_args={"timeout": BUSY_TIMEOUT_MS / 1000, "check_same_thread": False},
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves (below)
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")  # durable across crashes in WAL mode
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection) -> None:
        options = connection.get_execution_options()
        if options.get(_WRITE, False):
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        elif not options.get(_SINGLE, False):
            connection.exec_driver_sql("BEGIN")

    return engine
