"""A clock the test moves: what the store writes as the time of a job's
events and a flavor's price (its `utcnow`, patched), what the usage views
and the cost counters read as now, and the scheduling pass's `clock`. No
test sleeps: it sets the time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

# the modules that read `utcnow` for what these tests time
PATCHED = ("service.store.store", "service.store.flavors", "service.control.views",
           "service.observability.phase_counters")  # the scraped counters' clock


class TestClock:
    __test__ = False  # not a test class

    def __init__(self, monkeypatch, now: datetime):
        self.now = now
        for module in PATCHED:
            monkeypatch.setattr(f"{module}.utcnow", lambda: self.now)

    def time(self) -> float:
        """The scheduling pass's clock: epoch seconds."""
        return self.now.timestamp()

    def set(self, now: datetime) -> datetime:
        self.now = now
        return now

    def advance(self, seconds: float) -> datetime:
        return self.set(self.now + timedelta(seconds=seconds))


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]
