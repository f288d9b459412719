"""The dashboard's sessions and the metric columns its curves read, in the
job store, on SQLite and Postgres."""

from __future__ import annotations

from store_harness import submit

from service.store.sessions import session_hash
from service.store.tenants import ADMIN_TENANT, key_hash


def test_a_session_lives_until_it_ends_expires_or_its_key_rotates(store):
    tenant, key = store.tenants.create("acme")
    live = store.sessions.create("acme", key_hash(key), ttl_s=60)
    ended = store.sessions.create("acme", key_hash(key), ttl_s=60)
    expired = store.sessions.create("acme", key_hash(key), ttl_s=-1)
    admin = store.sessions.create(ADMIN_TENANT, "admin-ref", ttl_s=60)
    assert store.sessions.tenant_of(live, "admin-ref") == "acme"
    store.sessions.end(ended)
    assert store.sessions.tenant_of(ended, "admin-ref") is None
    assert store.sessions.tenant_of(expired, "admin-ref") is None
    assert store.sessions.tenant_of("not-a-session", "admin-ref") is None
    assert store.sessions.tenant_of(admin, "admin-ref") == ADMIN_TENANT
    assert store.sessions.tenant_of(admin, "another-admin-key") is None  # the admin key changed
    store.tenants.rotate_key(tenant.id)
    assert store.sessions.tenant_of(live, "admin-ref") is None
    assert session_hash(live) != live and len(session_hash(live)) == 64


def test_metric_columns_pick_fields_out_of_each_row(store):
    job = submit(store)
    store.record_metrics(job.id, 1, [
        {"step": 1, "loss": 3.5, "tokens_per_s": 100, "comm_bytes_by_op": {"all_gather": 4}},
        {"step": 2, "loss": 3.25, "resumed_from": 1, "recovered_from": "restart"},
        {"step": 3, "loss": float("nan")},  # kept as None
    ])
    rows = store.metric_columns(job.id, ("loss", "tokens_per_s", "resumed_from"), ("recovered_from",))
    assert rows == [(1, 3.5, 100.0, None, None), (2, 3.25, None, 1.0, "restart"),
                    (3, None, None, None, None)]
    assert [r[0] for r in store.metric_columns(job.id, ("loss",), since_step=2)] == [2, 3]
