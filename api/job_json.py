"""Jobs' JSON for `GET /v1/jobs`, made once per version of each job.

A page of 50 jobs validated into `JobPublic` and serialised costs ~0.5 ms, and
nearly all of it is the work of the last page: a finished job never changes,
a running one a few times a minute. Each job's JSON is kept under every field
`JobPublic` shows but its spec (which never changes after submit: the job's id
stands for it), read from the record itself, so a job that changed in any way
it shows is a new entry and an old one is never answered. A page is its jobs'
JSON joined, byte for byte what `JobsPublic.model_dump_json` writes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

from api.schemas import JobPublic

_SHOWN = tuple(name for name in JobPublic.model_fields if name not in ("spec", "waiting"))


def _hashable(value: Any) -> Hashable:
    return tuple(sorted(value.items())) if isinstance(value, dict) else value


class JobJson:
    def __init__(self, size: int = 4096):
        self._size, self._json = size, OrderedDict[tuple, bytes]()
        self._lock = threading.Lock()

    def of(self, record: Any) -> bytes:
        """`JobPublic.model_validate(record).model_dump_json(by_alias=True)`, as bytes."""
        key = tuple(_hashable(getattr(record, name)) for name in _SHOWN)
        found = self._json.get(key)
        if found is not None:
            return found
        made = JobPublic.model_validate(record).model_dump_json(by_alias=True).encode()
        with self._lock:
            self._json[key] = made
            if len(self._json) > self._size:
                self._json.popitem(last=False)
        return made

    def page(self, records: Sequence[Any], total: int, limit: int, offset: int) -> bytes:
        """A `JobsPublic`'s JSON."""
        items = b",".join(self.of(record) for record in records)
        return (b'{"items":[' + items + b'],"total":%d,"limit":%d,"offset":%d}'
                % (total, limit, offset))
