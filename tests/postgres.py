"""A Postgres database of a test's own on the machine's server
(BRIGADE_TEST_POSTGRES_URL; default: trust auth on 127.0.0.1:5432): made
fresh, dropped after, even with sessions still connected to it."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

from sqlalchemy import create_engine, text

from tests.ci import skip_or_fail

POSTGRES_URL = os.environ.get(
    "BRIGADE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


@contextlib.contextmanager
def maybe_database(prefix: str) -> Iterator[tuple[str | None, str | None]]:
    """(the URL of a new, empty database named `{prefix}_{random}`, None), or
    (None, why there is none) where no Postgres answers."""
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT",
                          connect_args={"connect_timeout": 3})
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as error:  # noqa: BLE001 - any failure to reach it means "no Postgres"
        admin.dispose()
        yield None, f"Postgres not reachable at {POSTGRES_URL}: {str(error).splitlines()[0]}"
        return
    try:
        yield admin.url.set(database=name).render_as_string(hide_password=False), None
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextlib.contextmanager
def fresh_database(prefix: str = "brigade_db") -> Iterator[str]:
    """The URL of a new, empty database, dropped after. Where no Postgres
    answers the test is skipped, saying why (under CI it fails: .ci/run starts one)."""
    with maybe_database(prefix) as (url, why_not):
        if url is None:
            skip_or_fail(why_not or "no Postgres")
        assert url is not None
        yield url
