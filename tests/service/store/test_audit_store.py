"""The audit trail's store: rows only added, read newest first, paged, and
filtered by tenant (the actor or the tenant concerned), action (exact or a
prefix), target and time; a detail stays small whatever it is given."""

from __future__ import annotations

from datetime import timedelta

from service.store.audit import MAX_DETAIL_BYTES
from service.store.models import utcnow


def fill(store) -> None:
    store.audit.record(actor="admin", action="tenant.create", tenant="acme", target="t-1",
                       detail={"quota": {"max_workers": 4}}, client="127.0.0.1")
    store.audit.record(actor="acme", action="job.submit", tenant="acme", target="j-1",
                       detail={"name": "a"}, client="10.0.0.7")
    store.audit.record(actor="acme", action="job.cancel", tenant="acme", target="j-1")
    store.audit.record(actor="admin", action="job.delete", tenant="acme", target="j-1")
    store.audit.record(actor="beta", action="job.submit", tenant="beta", target="j-2")


def actions(page) -> list[str]:
    return [row.action for row in page[0]]


def test_rows_come_back_newest_first_with_who_what_and_where(store):
    fill(store)
    rows, total = store.audit.list()
    assert total == 5
    assert actions((rows, total)) == ["job.submit", "job.delete", "job.cancel", "job.submit",
                                      "tenant.create"]
    created = rows[-1]
    assert (created.actor, created.tenant, created.target, created.client) == (
        "admin", "acme", "t-1", "127.0.0.1")
    assert created.detail == {"quota": {"max_workers": 4}}
    assert created.time.tzinfo is not None and abs(utcnow() - created.time) < timedelta(minutes=1)
    assert rows[0].id > rows[-1].id


def test_filters_and_pages(store):
    fill(store)
    assert actions(store.audit.list(tenant="beta")) == ["job.submit"]
    assert len(store.audit.list(tenant="acme")[0]) == 4  # by acme, or about acme (the admin's)
    assert len(store.audit.list(tenant="admin")[0]) == 2  # what the admin did
    assert actions(store.audit.list(action="job.submit")) == ["job.submit", "job.submit"]
    assert actions(store.audit.list(action="tenant.")) == ["tenant.create"]
    assert store.audit.list(action="job")[1] == 0  # exact unless it ends with '.'
    assert store.audit.list(action="job%.")[1] == 0  # a prefix is literal, not a pattern
    assert actions(store.audit.list(target="j-1")) == ["job.delete", "job.cancel", "job.submit"]
    assert store.audit.list(since=utcnow() + timedelta(seconds=5))[1] == 0
    assert store.audit.list(since=utcnow() - timedelta(minutes=5))[1] == 5
    page, total = store.audit.list(limit=2, offset=2)
    assert total == 5 and actions((page, total)) == ["job.cancel", "job.submit"]
    assert store.audit.list(tenant="acme", action="job.", target="j-1", limit=1)[1] == 3


def test_a_detail_stays_small_and_plain(store):
    big = store.audit.record(actor="acme", action="job.submit", detail={"blob": "x" * MAX_DETAIL_BYTES})
    assert big.detail == {"truncated": True, "keys": ["blob"]}
    odd = store.audit.record(actor="a" * 500, action="job.submit", target="t" * 500,
                             detail={"when": utcnow(), "n": 1})
    assert len(odd.actor) == 128 and len(odd.target) == 128
    assert isinstance(odd.detail["when"], str) and odd.detail["n"] == 1
