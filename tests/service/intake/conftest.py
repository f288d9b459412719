"""The submit checks' tests read their jobs from one migrated SQLite store
each (the checks' queries are the store's own, tried on both dialects in
tests/service/store)."""

from __future__ import annotations

import pytest

from service.store import JobStore


@pytest.fixture
def store(tmp_path):
    store = JobStore(f"sqlite:///{tmp_path / 'brigade.db'}")
    store.migrate()
    yield store
    store.dispose()
