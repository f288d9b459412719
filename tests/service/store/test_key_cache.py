"""The key cache in front of a key's tenant (`TenantStore.name_for_key`): a
hit reads no database, and a rotation or deletion here refuses the old key
at once, even one looked up a moment before; another process's rotation
ends within the cache's few seconds."""

from __future__ import annotations

from service.store.key_cache import KeyCache
from service.store.tenants import key_hash


def test_a_looked_up_key_is_answered_from_the_cache(store):
    _, key = store.tenants.create("acme")
    assert store.tenants.cached_name_for_key(key) is None  # never looked up yet
    assert store.tenants.name_for_key(key) == "acme"
    assert store.tenants.cached_name_for_key(key) == "acme"
    assert store.tenants.name_for_key(key[:-1] + "x") is None


def test_rotation_and_deletion_refuse_a_cached_key_at_once(store):
    tenant, old = store.tenants.create("acme")
    _, other = store.tenants.create("other")
    assert store.tenants.name_for_key(old) == "acme" and store.tenants.name_for_key(other) == "other"
    _, new = store.tenants.rotate_key(tenant.id)
    assert store.tenants.name_for_key(old) is None
    assert store.tenants.name_for_key(new) == "acme"
    assert store.tenants.cached_name_for_key(other) == "other"  # another tenant's stays
    store.tenants.delete(tenant.id)
    assert store.tenants.name_for_key(new) is None


def test_a_lookup_that_raced_a_forget_is_not_kept():
    cache = KeyCache()
    generation = cache.generation  # a lookup starts, reads the old row...
    cache.forget_tenant("acme")  # ... a rotation commits meanwhile
    cache.put(key_hash("old"), "acme", generation)
    assert cache.get(key_hash("old")) is None
    cache.put(key_hash("new"), "acme", cache.generation)
    assert cache.get(key_hash("new")) == "acme"


def test_an_entry_lives_ttl_seconds():
    now = [100.0]
    cache = KeyCache(ttl_s=2.0, clock=lambda: now[0])
    cache.put("h", "acme", cache.generation)
    now[0] = 101.9
    assert cache.get("h") == "acme"
    now[0] = 102.0
    assert cache.get("h") is None
