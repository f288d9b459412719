"""Fixtures the engine's Ray tests share."""

from __future__ import annotations

import pytest

from tests.workers.engine_spec import Groups


@pytest.fixture(scope="module")
def groups(fork_pool):
    """A module's worker groups on the session's fork pool (tests/workers/engine_spec.py)."""
    pool = Groups(fork_pool)
    yield pool
    pool.close()
