"""Jobs' JSON for `GET /v1/jobs`, made once per version of each job.

A page of 50 jobs validated into `JobPublic` and serialised costs ~0.5 ms, and
nearly all of it is the work of the last page: a finished job never changes,
a running one a few times a minute. Each job's JSON is kept under every field
`JobPublic` shows but its spec (which never changes after submit: the job's id
stands for it), read from the record itself, so a job that changed in any way
it shows is a new entry and an old one is never answered. A page is its jobs'
JSON joined, byte for byte what `JobsPublic.model_dump_json` writes.

`JobPages` keeps whole pages: a dashboard polling the same list every few
seconds asks for the same page while none of its jobs changes. A page is kept
with the version of its tenant's jobs it was read at (`JobReads.jobs_version`:
a count the database bumps in every transaction that writes one of the
tenant's jobs, whoever writes), and answered again only while that version
still stands: each request reads the version (one row), and a page read
after a change is read anew. The version is read before the page, so a page
is never older than the version it is kept under; a write that lands between
the two makes the page newer than its version, and the next request, seeing
the new version, reads it again. Nothing is answered on time alone. The key
is the tenant the page is of after auth (the admin's list of every tenant's
is its own key, checked against the sum of every tenant's version), so one
tenant's page is never another's. A version counts one database's changes (two
stores both start at 0), so each app keeps its own `JobPages`
(`app.state.job_pages`): pages kept for the whole process would answer one
store's page for another's at the same version (two servers in one process, as
the tests run them).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

from api.schemas.jobs import JobPublic
from service.states import JobState
from service.store.job_reads import JobReads

# Left out: the spec (the job's id stands for it), and what a queued job's list entry
# does not show (the scheduler's view of it, as of now: on `GET /v1/jobs/{id}` and the cluster).
_SHOWN = tuple(name for name in JobPublic.model_fields
               if name not in ("spec", "waiting", "expected_start", "expected_start_reason"))


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


class PageQuery(NamedTuple):
    """What a page of `GET /v1/jobs` is of: whose jobs (None: every
    tenant's, the admin's), which states, which slice, which name, which
    sweep's trials, which labels."""

    tenant: str | None
    states: tuple[JobState, ...] | None
    limit: int
    offset: int
    name: str | None
    sweep: str | None = None
    labels: tuple[tuple[str, str], ...] = ()  # every one of these (key, value)


class JobPages:
    def __init__(self, jobs: JobJson, max_bytes: int = 16 << 20, max_pages: int = 1024):
        self._jobs, self._max_bytes, self._max_pages = jobs, max_bytes, max_pages
        self._pages = OrderedDict[PageQuery, tuple[int, bytes]]()  # query -> (version, JSON)
        self._bytes = 0
        self._lock = threading.Lock()

    def json(self, reads: JobReads, query: PageQuery) -> bytes:
        """The page's `JobsPublic` JSON as of now."""
        version = reads.jobs_version(query.tenant)  # before the page: see the module's doc
        found = self._pages.get(query)
        if found is not None and found[0] == version:
            return found[1]
        items, total = reads.list_jobs(tenant=query.tenant, states=query.states,
                                       limit=query.limit, offset=query.offset, name=query.name,
                                       sweep=query.sweep, labels=query.labels)
        made = self._jobs.page(items, total, query.limit, query.offset)
        self._keep(query, version, made)
        return made

    def _keep(self, query: PageQuery, version: int, made: bytes) -> None:
        with self._lock:
            old = self._pages.get(query)
            if old is not None:
                if old[0] > version:
                    return  # a newer page came first (two threads at once)
                self._bytes -= len(old[1])
            self._pages[query] = (version, made)
            self._pages.move_to_end(query)
            self._bytes += len(made)
            while self._bytes > self._max_bytes or len(self._pages) > self._max_pages:
                _, (_, dropped) = self._pages.popitem(last=False)
                self._bytes -= len(dropped)
