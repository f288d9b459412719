"""Job store fixtures: every store test runs on SQLite (a fresh file per test)
and on Postgres (one fresh database for the session, emptied before each
test). Where no Postgres answers, the Postgres leg is skipped, saying so.

BRIGADE_TEST_POSTGRES_URL names the server (default: trust auth on localhost).
"""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text

from service.store import JobStore
from tests.ci import skip_or_fail
from tests.postgres import maybe_database

STORE_TABLES = ("job_logs", "job_metrics", "job_events", "jobs", "job_changes", "tenants",
                "audit_events", "sweep_trials", "sweeps", "leader_lease", "flavors",
                "flavor_prices")


@pytest.fixture(scope="session")
def postgres_database():
    """(URL of a fresh database, None) for the session, or (None, why there is none)."""
    with maybe_database("brigade_test") as found:
        yield found


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
