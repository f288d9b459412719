"""Tenants in the store: created with a key shown once and kept only as a
hash, found by that key in constant time, rotated at once, updated, and
deleted only when none of their jobs is unfinished."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text
from store_harness import submit

from service.states import JobState
from service.store import TenantBusy, TenantExists, TenantNotFound
from service.store.errors import FlavorInUse, QuotaFlavorUnknown
from service.store.tenants import QUOTA_FIELDS, tenant_policy

NO_SUCH_TENANT = "t-000000000000"


def test_create_returns_the_tenant_and_a_key_that_finds_it(store):
    tenant, key = store.tenants.create("acme", quota={"max_workers": 4}, max_priority=10, weight=2)
    assert tenant.id.startswith("t-") and tenant.name == "acme"
    assert tenant.quota == {"max_workers": 4, "max_gpus": None, "max_running_jobs": None,
                            "max_queued_jobs": None, "flavors": {}}
    assert (tenant.max_priority, tenant.weight) == (10, 2.0)
    assert store.tenants.tenant_for_key(key) == tenant
    assert store.tenants.get(tenant.id) == store.tenants.by_name("acme") == tenant
    assert store.tenants.list() == [tenant]


def test_the_database_holds_no_plaintext_key(store, db_url):
    _, key = store.tenants.create("acme")
    _, rotated = store.tenants.rotate_key(store.tenants.by_name("acme").id)
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT * FROM tenants")).all()
    finally:
        engine.dispose()
    dump = repr(rows)
    secret_parts = [k.split("_", 2)[2] for k in (key, rotated)]
    assert all(k not in dump for k in (key, rotated, *secret_parts))


@pytest.mark.parametrize("wrong", ["", "admin", "bk_", "bk_0123456789abcdef_" + "x" * 43,
                                   "nonsense" * 20])
def test_wrong_keys_find_nobody(store, wrong):
    store.tenants.create("acme")
    assert store.tenants.tenant_for_key(wrong) is None


def test_a_key_with_the_right_id_but_wrong_secret_finds_nobody(store):
    _, key = store.tenants.create("acme")
    forged = key[:-1] + ("A" if key[-1] != "A" else "B")
    assert store.tenants.tenant_for_key(forged) is None


def test_rotation_stops_the_old_key_at_once(store):
    tenant, old = store.tenants.create("acme")
    again, new = store.tenants.rotate_key(tenant.id)
    assert again.id == tenant.id and new != old
    assert store.tenants.tenant_for_key(old) is None
    assert store.tenants.tenant_for_key(new).id == tenant.id
    with pytest.raises(TenantNotFound):
        store.tenants.rotate_key(NO_SUCH_TENANT)


def test_names_are_unique_sanitised_and_admin_is_reserved(store):
    store.tenants.create("acme")
    for taken in ("acme", "admin"):
        with pytest.raises(TenantExists):
            store.tenants.create(taken)
    for bad in ("", "Acme", "-acme", "a b", "a/b", "a" * 64, "acme\n"):
        with pytest.raises(ValueError, match="tenant name"):
            store.tenants.create(bad)
    with pytest.raises(ValueError, match="unknown quota"):
        store.tenants.create("other", quota={"max_cpus": 1})


def test_update_changes_only_what_is_given(store):
    tenant, _ = store.tenants.create("acme", quota={"max_workers": 4, "max_gpus": 2})
    updated = store.tenants.update(tenant.id, quota={"max_gpus": None, "max_queued_jobs": 3},
                                   weight=0.5)
    assert updated.quota == {"max_workers": 4, "max_gpus": None, "max_running_jobs": None,
                             "max_queued_jobs": 3, "flavors": {}}
    assert (updated.weight, updated.max_priority) == (0.5, tenant.max_priority)
    assert store.tenants.update(tenant.id, max_priority=3).max_priority == 3
    assert set(store.tenants.get(tenant.id).quota) == set(QUOTA_FIELDS)
    with pytest.raises(TenantNotFound):
        store.tenants.update(NO_SUCH_TENANT, weight=1)


def test_delete_is_refused_while_a_job_is_unfinished(store):
    tenant, key = store.tenants.create("acme")
    job = submit(store, tenant="acme")
    other = submit(store, tenant="other")
    with pytest.raises(TenantBusy, match="1 unfinished"):
        store.tenants.delete(tenant.id)
    store.transition(job.id, JobState.CANCELLED, reason="test")
    store.tenants.delete(tenant.id)
    assert store.tenants.get(tenant.id) is None and store.tenants.tenant_for_key(key) is None
    assert store.get_job(job.id) is None  # its finished jobs went with it
    assert store.events(job.id) == []
    assert store.get_job(other.id) is not None
    again, _ = store.tenants.create("acme")  # the name is free again, with nothing behind it
    assert store.list_jobs(tenant=again.name) == ([], 0)
    with pytest.raises(TenantNotFound):
        store.tenants.delete(tenant.id)


def test_quota_per_flavor_beside_the_totals_changes_only_the_flavors_named(store):
    for flavor in ("a100", "h100"):
        store.flavors.put(flavor, labels={"gpu": flavor}, price_per_worker_hour=1)
    tenant, _ = store.tenants.create("acme", quota={"max_workers": 8,
                                                    "flavors": {"a100": {"max_workers": 2}}})
    assert tenant.quota["flavors"] == {"a100": {"max_workers": 2, "max_gpus": None}}
    updated = store.tenants.update(tenant.id, quota={"flavors": {"h100": {"max_gpus": 4}}})
    assert updated.quota["max_workers"] == 8
    assert updated.quota["flavors"] == {"a100": {"max_workers": 2, "max_gpus": None},
                                        "h100": {"max_workers": None, "max_gpus": 4}}
    updated = store.tenants.update(tenant.id, quota={"flavors": {"a100": None}})
    assert updated.quota["flavors"] == {"h100": {"max_workers": None, "max_gpus": 4}}
    policy = tenant_policy(updated)
    assert policy.quota.flavors["h100"].max_gpus == 4 and policy.quota.max_workers == 8
    with pytest.raises(ValueError, match="max_cpus"):
        store.tenants.update(tenant.id, quota={"flavors": {"h100": {"max_cpus": 1}}})


def test_a_quota_on_a_flavor_that_does_not_exist_is_refused_naming_it(store):
    store.flavors.put("a100", labels={"gpu": "a100"}, price_per_worker_hour=1)
    with pytest.raises(QuotaFlavorUnknown, match="^quota.flavors.h100: no flavor 'h100'") as error:
        store.tenants.create("acme", quota={"flavors": {"a100": {"max_workers": 1},
                                                        "h100": {"max_workers": 1}}})
    assert error.value.field == "quota.flavors.h100" and "a100" in str(error.value)
    assert store.tenants.by_name("acme") is None  # nothing made
    tenant, _ = store.tenants.create("acme", quota={"flavors": {"a100": {"max_workers": 1}}})
    with pytest.raises(QuotaFlavorUnknown, match="quota.flavors.h100"):
        store.tenants.update(tenant.id, quota={"max_workers": 3,
                                               "flavors": {"h100": {"max_gpus": 1}}})
    assert store.tenants.get(tenant.id).quota == tenant.quota  # nothing changed
    # removing the limits of a flavor that is gone (or never was) is fine
    assert store.tenants.update(tenant.id, quota={"flavors": {"h100": None}}).quota == tenant.quota


def test_a_flavor_a_quota_names_is_not_deleted_until_the_quota_forgets_it(store):
    store.flavors.put("a100", labels={"gpu": "a100"}, price_per_worker_hour=1)
    tenant, _ = store.tenants.create("acme", quota={"flavors": {"a100": {"max_workers": 1}}})
    store.tenants.create("other")
    with pytest.raises(FlavorInUse, match="quota of tenant.s. acme:") as error:
        store.flavors.delete("a100")
    assert error.value.tenants == ["acme"] and error.value.jobs == []
    store.tenants.update(tenant.id, quota={"flavors": {"a100": None}})
    assert store.flavors.delete("a100").name == "a100"
