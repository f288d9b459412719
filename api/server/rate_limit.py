"""Each tenant's request rate: a token bucket per tenant, in memory.

A tenant may send `burst` requests at once and `per_s` a second after that;
one more is answered 429, in the house error shape, with `Retry-After` (whole
seconds, at least 1). The bucket is charged once a request's key has been
resolved to a tenant (`api.server.deps.CurrentTenant`), so only the `/v1` routes,
which all need a key, are limited; health, metrics and the OpenAPI document
are not.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from starlette.exceptions import HTTPException


class RateLimited(HTTPException):
    field = None

    def __init__(self, per_s: float, retry_after_s: int):
        super().__init__(429, f"rate limit: over {per_s:g} requests a second for this tenant; "
                              f"retry after {retry_after_s} s",
                         headers={"Retry-After": str(retry_after_s)})


class RateLimiter:
    """Token buckets, one per tenant; thread-safe."""

    def __init__(self, per_s: float, burst: int, clock: Callable[[], float] = time.monotonic):
        if per_s <= 0 or burst < 1:
            raise ValueError("rate limit: per_s must be > 0 and burst >= 1")
        self.per_s, self.burst, self._clock = per_s, burst, clock
        self._buckets: dict[str, tuple[float, float]] = {}  # tenant -> (tokens, as of)
        self._lock = threading.Lock()

    def take(self, tenant: str) -> float:
        """Charge one request to the tenant: 0.0 if it may go ahead, else the
        seconds until it may (nothing is charged then)."""
        with self._lock:
            now = self._clock()
            tokens, since = self._buckets.get(tenant, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - since) * self.per_s)
            if tokens >= 1.0:
                self._buckets[tenant] = (tokens - 1.0, now)
                return 0.0
            self._buckets[tenant] = (tokens, now)
            return (1.0 - tokens) / self.per_s

    def check(self, tenant: str) -> None:
        """Raise RateLimited if the tenant is over its rate."""
        wait = self.take(tenant)
        if wait > 0:
            raise RateLimited(self.per_s, max(1, math.ceil(wait)))
