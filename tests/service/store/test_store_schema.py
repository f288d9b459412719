"""The job store's schema and engine: the migrations build exactly the
models' tables, run again or at once harmlessly, and ship with the package."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from setuptools import find_packages
from sqlalchemy import create_engine, inspect
from store_harness import race, submit

from service.store import JobStore
from service.store.engine import build_engines, normalize_url
from service.store.models import Base
from service.store.store import MIGRATIONS_DIR, alembic_config

ROOT = Path(__file__).resolve().parents[3]
TABLES = {"jobs", "job_changes", "job_events", "job_metrics", "job_logs", "tenants",
          "dashboard_sessions", "audit_events", "sweeps", "sweep_trials", "leader_lease",
          "flavors", "flavor_prices"}


def schema_differences(url: str) -> list:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return compare_metadata(MigrationContext.configure(connection), Base.metadata)
    finally:
        engine.dispose()


def tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_migrations_build_the_models_schema(store, db_url):
    assert tables(db_url) == TABLES | {"alembic_version"}
    assert schema_differences(db_url) == []
    assert set(Base.metadata.tables) == TABLES


def test_migrations_go_down_and_up_again_even_at_once(store, db_url):
    submit(store)
    store.migrate()  # at the head already: nothing to do
    assert len(store.list_jobs(tenant="acme")[0]) == 1
    command.downgrade(alembic_config(db_url), "base")  # the command-line path: its own engine
    assert tables(db_url) == {"alembic_version"}
    stores = [JobStore(db_url) for _ in range(4)]  # as if four processes started together
    try:
        assert race(4, lambda i: stores[i].migrate()) == [None] * 4
    finally:
        for other in stores:
            other.dispose()
    assert schema_differences(db_url) == []
    assert store.list_jobs(tenant="acme") == ([], 0)


def test_sqlite_connections_take_turns_safely(tmp_path):
    reader, _ = build_engines(f"sqlite:///{tmp_path / 'new' / 'brigade.db'}")
    try:
        with reader.connect() as connection:
            pragma = lambda name: connection.exec_driver_sql(f"PRAGMA {name}").scalar()  # noqa: E731
            assert pragma("journal_mode") == "wal"
            assert pragma("foreign_keys") == 1
            assert pragma("busy_timeout") >= 1000
    finally:
        reader.dispose()


def test_urls():
    assert normalize_url("postgresql://u@h:5432/db").drivername == "postgresql+psycopg"
    assert normalize_url("postgres://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("postgresql+psycopg://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("sqlite:///x.db").drivername == "sqlite"
    for url in ("sqlite://", "sqlite:///:memory:"):
        with pytest.raises(ValueError, match="in-memory"):
            JobStore(url)
    with pytest.raises(ValueError, match="SQLite or Postgres"):
        JobStore("mysql://u@h/db")


def test_the_migrations_ship_with_the_package():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    migrations = Path(MIGRATIONS_DIR)
    packages = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "service" / "store").rglob("__init__.py")
    }
    assert packages == {"service.store", "service.store.migrations",
                        "service.store.migrations.versions"}
    # what setuptools finds with pyproject's own include patterns (the wheel's packages)
    found = find_packages(where=str(ROOT), include=setuptools["packages"]["find"]["include"])
    assert packages <= set(found)
    assert (migrations / "script.py.mako").exists()
    assert "script.py.mako" in setuptools["package-data"]["service.store.migrations"]
    assert not list(migrations.glob("*.ini"))  # configured in code: alembic_config()
