"""Tenants and their API keys.

A key is `bk_<key_id>_<secret>`: 16 hex characters that find the tenant's row,
then 32 random bytes. The store keeps only the key id and the sha256 of the
whole key; with 256 random bits a plain hash is as good as a slow one (there
is nothing to guess). A lookup compares hashes in constant time. Rotating a
key replaces the hash and the key id in one statement: the old key stops
working at once.

A tenant's budget (0014: `{"limit", "period"}`, or none) is the most its
jobs may cost a period before its queued jobs wait (`service.scheduling.budget`);
`checked_budget` refuses what no budget may be, naming the field.

A tenant's quota may set limits per flavor (`quota.flavors`) on flavors that
exist only (`QuotaFlavorUnknown`, naming `quota.flavors.<name>`); a flavor a
quota names is not deleted (`service.store.flavors`). A flavor set to None
(its limits removed) may be one that is gone.

A tenant's jobs name it by its `name` (the jobs' `tenant` column). Deleting
a tenant is refused while it has unfinished jobs (`TenantBusy`); otherwise its
finished jobs and their history go with it, so a later tenant of the same name
inherits nothing. Its checkpoints in storage are not removed.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from enum import Enum
from typing import Literal

from sqlalchemy import Engine, delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.scheduling import FlavorQuota, Quota, TenantPolicy
from service.scheduling.budget import Budget
from service.states import TERMINAL
from service.store.engine import transaction
from service.store.errors import QuotaFlavorUnknown, TenantBusy, TenantExists, TenantNotFound
from service.store.key_cache import KeyCache
from service.store.models import Flavor, Job, Tenant, utcnow
from service.store.records import TenantRecord
from workers.schema import MAX_PRIORITY

ADMIN_TENANT = "admin"  # the admin key's own jobs go under this name: no tenant may take it
NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
QUOTA_FIELDS = ("max_workers", "max_gpus", "max_running_jobs", "max_queued_jobs", "flavors")
FLAVOR_QUOTA_FIELDS = ("max_workers", "max_gpus")  # a tenant's limits on one flavor's nodes
BUDGET_FIELDS = ("limit", "period")
KEY_PREFIX = "bk"
_KEY = re.compile(rf"^{KEY_PREFIX}_([0-9a-f]{{16}})_[A-Za-z0-9_-]{{43}}$")


class _Keep(Enum):
    KEEP = "keep"


KEEP: Literal[_Keep.KEEP] = _Keep.KEEP  # `update`'s budget left as it is (None removes it)


def new_tenant_id() -> str:
    return f"t-{secrets.token_hex(6)}"


def new_key() -> tuple[str, str, str]:
    """(key, key_id, key_hash) for a fresh random key."""
    key_id = secrets.token_hex(8)
    key = f"{KEY_PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"
    return key, key_id, key_hash(key)


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class TenantStore:
    """Shares the job store's engines (`JobStore.tenants`)."""

    def __init__(self, reader: Engine, writer: Engine):
        self._reader, self._writer = reader, writer
        self._keys = KeyCache()

    def create(self, name: str, *, quota: Mapping | None = None, max_priority: int = MAX_PRIORITY,
               weight: float = 1.0, budget: Mapping | None = None) -> tuple[TenantRecord, str]:
        """A new tenant and its API key: the only time the key is seen."""
        check_name(name)
        key, key_id, hashed = new_key()
        now = utcnow()
        tenant = Tenant(id=new_tenant_id(), name=name, quota=full_quota(quota),
                        max_priority=max_priority, weight=weight, key_id=key_id,
                        key_hash=hashed, created_at=now, updated_at=now,
                        budget=checked_budget(budget))
        try:
            with transaction(self._writer) as session:
                _check_flavors_exist(session, tenant.quota["flavors"])
                session.add(tenant)
                session.flush()
                return tenant.to_record(), key
        except IntegrityError as error:  # the name's unique constraint
            raise TenantExists(name) from error

    def get(self, tenant_id: str) -> TenantRecord | None:
        return self._one(select(Tenant).where(Tenant.id == tenant_id))

    def by_name(self, name: str) -> TenantRecord | None:
        return self._one(select(Tenant).where(Tenant.name == name))

    def list(self) -> list[TenantRecord]:
        """Every tenant, by name."""
        with transaction(self._reader) as session:
            return [t.to_record() for t in session.scalars(select(Tenant).order_by(Tenant.name))]

    def update(self, tenant_id: str, *, quota: Mapping | None = None,
               max_priority: int | None = None, weight: float | None = None,
               budget: Mapping | None | Literal[_Keep.KEEP] = KEEP) -> TenantRecord:
        """Change what is given; `quota` replaces only the limits it names (a
        None limit is no limit), and of `quota.flavors` only the flavors it
        names (a None flavor: no limits of its own); `budget` replaces the
        budget (None: no budget)."""
        if budget is not KEEP:
            budget = checked_budget(budget)
        with transaction(self._writer) as session:
            tenant = session.get(Tenant, tenant_id, with_for_update=True)
            if tenant is None:
                raise TenantNotFound(tenant_id)
            if quota is not None:
                _check_flavors_exist(session, {flavor: limits for flavor, limits
                                               in (quota.get("flavors") or {}).items()
                                               if limits is not None})
                flavors = {**(tenant.quota.get("flavors") or {}), **(quota.get("flavors") or {})}
                tenant.quota = full_quota({**tenant.quota, **quota, "flavors": flavors})
            if max_priority is not None:
                tenant.max_priority = max_priority
            if weight is not None:
                tenant.weight = weight
            if budget is not KEEP:
                tenant.budget = budget
            tenant.updated_at = utcnow()
            session.flush()
            return tenant.to_record()

    def delete(self, tenant_id: str) -> None:
        """Remove the tenant, its key and its finished jobs; refused
        (`TenantBusy`) while any of its jobs is unfinished."""
        with transaction(self._writer) as session:
            tenant = session.get(Tenant, tenant_id, with_for_update=True)
            if tenant is None:
                raise TenantNotFound(tenant_id)
            name = tenant.name
            self._keys.forget_tenant(name)  # a lookup racing this one keeps no answer
            terminal = [s.value for s in TERMINAL]
            unfinished = session.scalar(select(func.count()).select_from(Job).where(
                Job.tenant == tenant.name, Job.state.not_in(terminal)))
            if unfinished:
                raise TenantBusy(tenant_id, unfinished)
            session.execute(delete(Job).where(Job.tenant == tenant.name),  # history cascades
                            execution_options={"synchronize_session": False})
            session.delete(tenant)
        self._keys.forget_tenant(name)  # committed: nothing cached of the old row is left

    def rotate_key(self, tenant_id: str) -> tuple[TenantRecord, str]:
        """A new key for the tenant; the old one stops working with this commit."""
        key, key_id, hashed = new_key()
        with transaction(self._writer) as session:
            tenant = session.scalars(
                update(Tenant).where(Tenant.id == tenant_id)
                .values(key_id=key_id, key_hash=hashed, updated_at=utcnow()).returning(Tenant),
                execution_options={"synchronize_session": False},
            ).one_or_none()
            if tenant is None:
                raise TenantNotFound(tenant_id)
            record = tenant.to_record()
            self._keys.forget_tenant(record.name)  # a lookup racing this one keeps no answer
        self._keys.forget_tenant(record.name)  # committed: the old key is refused from here on
        return record, key

    def tenant_for_key(self, key: str) -> TenantRecord | None:
        """The tenant whose key this is, or None."""
        match = _KEY.fullmatch(key)
        if match is None:
            return None
        with transaction(self._reader) as session:
            tenant = session.scalars(
                select(Tenant).where(Tenant.key_id == match.group(1))
            ).one_or_none()
            if tenant is None or not hmac.compare_digest(key_hash(key), tenant.key_hash):
                return None
            return tenant.to_record()

    def name_for_key(self, key: str) -> str | None:
        """The name of the tenant whose key this is, or None: what a request
        needs of its key, answered from `KeyCache` for a few seconds after a
        lookup (a rotation or deletion here forgets it at once)."""
        hashed = key_hash(key)
        if (name := self._keys.get(hashed)) is not None:
            return name
        generation = self._keys.generation
        tenant = self.tenant_for_key(key)
        if tenant is None:
            return None
        self._keys.put(hashed, tenant.name, generation)
        return tenant.name

    def cached_name_for_key(self, key: str) -> str | None:
        """`name_for_key` from the cache alone (never the database): None
        where it would have to look."""
        return self._keys.get(key_hash(key))

    def _one(self, query) -> TenantRecord | None:
        with transaction(self._reader) as session:
            tenant = session.scalars(query).one_or_none()
            return None if tenant is None else tenant.to_record()


def check_name(name: str) -> None:
    if not NAME.fullmatch(name):
        raise ValueError(f"tenant name must match {NAME.pattern}")
    if name == ADMIN_TENANT:
        raise TenantExists(name)


def full_quota(quota: Mapping | None) -> dict:
    """Every limit named (None: no limit), and the limits on each flavor
    named in `flavors` (a flavor given None has none: left out); an unknown
    limit is refused."""
    quota = dict(quota or {})
    unknown = sorted(set(quota) - set(QUOTA_FIELDS))
    if unknown:
        raise ValueError(f"unknown quota limits: {', '.join(unknown)}")
    full = {name: quota.get(name) for name in QUOTA_FIELDS}
    full["flavors"] = {flavor: _flavor_quota(flavor, limits)
                       for flavor, limits in sorted((quota.get("flavors") or {}).items())
                       if limits is not None}
    return full


def _check_flavors_exist(session: Session, flavors: Mapping[str, object]) -> None:
    """Refuse (`QuotaFlavorUnknown`) limits on a flavor that does not exist.
    The flavors' rows are read for share: a delete of one of them (which
    looks for quotas naming it under its lock) waits for this commit."""
    if not flavors:
        return
    found = set(session.scalars(select(Flavor.name).where(Flavor.name.in_(list(flavors)))
                                .with_for_update(read=True)))
    missing = sorted(set(flavors) - found)
    if missing:
        known = list(session.scalars(select(Flavor.name).order_by(Flavor.name)))
        raise QuotaFlavorUnknown(missing[0], known)


def _flavor_quota(flavor: str, limits: Mapping) -> dict:
    unknown = sorted(set(limits) - set(FLAVOR_QUOTA_FIELDS))
    if unknown:
        raise ValueError(f"unknown quota limits of flavor {flavor}: {', '.join(unknown)}")
    return {name: limits.get(name) for name in FLAVOR_QUOTA_FIELDS}


def checked_budget(budget: Mapping | None) -> dict | None:
    """A budget as stored ({"limit", "period"}), or None; what no budget may
    be is a ValueError naming the field (`budget.limit`, `budget.period`)."""
    if budget is None:
        return None
    unknown = sorted(set(budget) - set(BUDGET_FIELDS))
    if unknown:
        raise ValueError(f"budget: unknown fields: {', '.join(unknown)}")
    limit, period = budget.get("limit"), budget.get("period")
    if isinstance(limit, bool) or not isinstance(limit, int | float):
        raise ValueError(f"budget.limit: must be a finite number >= 0, not {limit!r}")
    try:
        Budget(float(limit), period)  # type: ignore[arg-type]  # checked there
    except ValueError as e:
        raise ValueError(f"budget.{e}") from None
    return {"limit": float(limit), "period": period}


def tenant_policy(tenant: TenantRecord) -> TenantPolicy:
    """What the scheduling policies read of a tenant."""
    quota = full_quota(tenant.quota)
    flavors = {name: FlavorQuota(**limits) for name, limits in quota.pop("flavors").items()}
    budget = Budget(**tenant.budget) if tenant.budget else None
    return TenantPolicy(tenant.name, Quota(**quota, flavors=flavors), tenant.max_priority,
                        tenant.weight, budget)
