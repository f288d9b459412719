"""Whether this run is CI, read one way for every test.

Under CI (.ci/run exports CI=true) a test whose prerequisite is missing (a
Postgres to talk to, a browser, a tmpfs it may mount, kubectl, fincore) fails,
saying what is missing: CI provides every one of them, so a skip there would
be a claim left unproven. Outside CI the same test skips, saying why, on a
developer's machine that lacks it.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

TRUE = ("1", "true", "yes")


def in_ci() -> bool:
    """True where the CI variable is 1, true or yes (any case, spaces ignored)."""
    return os.environ.get("CI", "").strip().lower() in TRUE


def skip_or_fail(why: str) -> NoReturn:
    """Skip the test, saying why; under CI fail it instead (CI must run it)."""
    if in_ci():
        pytest.fail(f"CI: this test must run, but {why}", pytrace=False)
    pytest.skip(why)
