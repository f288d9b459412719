"""What workers cost: worker-hours times the price of their flavor at the
time they ran. A price change applies from then on, so a stretch a job held
workers is split at each change of its flavor's price (`PriceHistory`, read
from the store's `flavor_prices`: `FlavorStore.price_history`). A job of no
flavor, or a time before its flavor had a price, is priced at the default
(`BRIGADE_DEFAULT_PRICE_PER_WORKER_HOUR`).

Pure: the caller reads the prices and the stretches held.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

HOUR_S = 3600.0
NO_FLAVOR = "(none)"  # usage's key for jobs of no flavor: no flavor's name (workers/schema/flavor.py)


@dataclass(frozen=True)
class PriceHistory:
    """Each flavor's prices per worker-hour, each from when (epoch seconds),
    in order; `default` for no flavor and before a flavor's first price."""

    default: float = 0.0
    changes: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)

    def at(self, flavor: str | None, at: float) -> float:
        """The price a worker of `flavor` ran at, at `at`."""
        changes = self.changes.get(flavor, ()) if flavor is not None else ()
        i = bisect_right(changes, at, key=lambda change: change[0])
        return changes[i - 1][1] if i else self.default

    def pieces(self, flavor: str | None, start: float, end: float) -> Iterator[
            tuple[float, float, float]]:
        """[start, end) cut at each price change within it: (from, to, price) each."""
        changes = self.changes.get(flavor, ()) if flavor is not None else ()
        cuts = [since for since, _ in changes if start < since < end]
        for lo, hi in zip([start, *cuts], [*cuts, end], strict=True):
            if hi > lo:
                yield lo, hi, self.at(flavor, lo)


def stretch_cost(prices: PriceHistory, flavor: str | None, start: float, end: float,
                 workers: int) -> float:
    """What `workers` workers of `flavor` cost over [start, end) (epoch seconds)."""
    return sum((hi - lo) * workers * price
               for lo, hi, price in prices.pieces(flavor, start, end)) / HOUR_S


def flavor_key(flavor: str | None) -> str:
    """The key usage gives a flavor's worker-seconds and cost under."""
    return NO_FLAVOR if flavor is None else flavor
