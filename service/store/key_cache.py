"""Which tenant an API key belongs to, remembered for a few seconds.

Every API request presents a key; reading its tenant row each time costs a
session and a query (~0.1 ms of a ~1 ms request). The cache maps the key's
sha256 to the tenant's name for `ttl_s` seconds. A rotation or a deletion
through the same `TenantStore` forgets the tenant's entries in the same call,
before it returns, so in this process the old key is refused at once; another
process sharing the database (a second API replica) refuses it within
`ttl_s`. A lookup that raced a rotation does not put its (stale) answer back:
each forget bumps a generation that a put must still see.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

DEFAULT_TTL_S = 2.0
MAX_ENTRIES = 4096


class KeyCache:
    def __init__(self, ttl_s: float = DEFAULT_TTL_S, clock: Callable[[], float] = time.monotonic):
        self.ttl_s, self._clock = ttl_s, clock
        self._entries: dict[str, tuple[str, float]] = {}  # key hash -> (tenant, expires at)
        self._generation = 0
        self._lock = threading.Lock()

    @property
    def generation(self) -> int:
        """Read before a lookup; hand it to `put` after."""
        return self._generation

    def get(self, hashed: str) -> str | None:
        entry = self._entries.get(hashed)
        if entry is None or entry[1] <= self._clock():
            return None
        return entry[0]

    def put(self, hashed: str, tenant: str, generation: int) -> None:
        """Remember `tenant` for this key, unless a forget happened since
        `generation` was read (the answer may be stale)."""
        with self._lock:
            if generation != self._generation:
                return
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.clear()  # rare: as many live keys as this in a few seconds
            self._entries[hashed] = (tenant, self._clock() + self.ttl_s)

    def forget_tenant(self, tenant: str) -> None:
        """Drop every entry of this tenant (its key was rotated, or it is gone)."""
        with self._lock:
            self._generation += 1
            self._entries = {h: e for h, e in self._entries.items() if e[0] != tenant}
