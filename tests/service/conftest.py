"""Job store fixtures: every store test runs on SQLite (a fresh file per test)
and on Postgres (one fresh database for the session, emptied before each
test). Where no Postgres answers, the Postgres leg is skipped, saying so.

BRIGADE_TEST_POSTGRES_URL names the server (default: trust auth on localhost).
"""

from __future__ import annotations

import os
import uuid

import pytest
from sqlalchemy import create_engine, text

from service.store import JobStore
from tests.ci import skip_or_fail

POSTGRES_URL = os.environ.get(
    "BRIGADE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
STORE_TABLES = ("job_logs", "job_metrics", "job_events", "jobs", "job_changes", "tenants",
                "audit_events", "sweep_trials", "sweeps")


@pytest.fixture(scope="session")
def postgres_database():
    """(URL of a fresh database, None) for the session, or (None, why there is none)."""
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT",
                          connect_args={"connect_timeout": 3})
    name = f"brigade_test_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as error:  # noqa: BLE001 - any failure to reach it means "no Postgres"
        admin.dispose()
        reason = str(error).splitlines()[0]
        yield None, f"Postgres not reachable at {POSTGRES_URL}: {reason}"
        return
    url = admin.url.set(database=name).render_as_string(hide_password=False)
    try:
        yield url, None
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request, tmp_path, postgres_database) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'brigade.db'}"
    url, why_not = postgres_database
    if url is None:
        skip_or_fail(why_not)  # CI starts one (.ci/run): its leg must run, not skip
    return url


@pytest.fixture
def store(db_url):
    """A migrated, empty store."""
    store = JobStore(db_url)
    store.migrate()
    if store.dialect == "postgresql":  # the session's database: empty it for this test
        engine = create_engine(db_url)
        with engine.begin() as connection:
            connection.execute(text(f"TRUNCATE {', '.join(STORE_TABLES)} RESTART IDENTITY"))
        engine.dispose()
    yield store
    store.dispose()
