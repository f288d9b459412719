"""Tenants (the admin key only): create one and get its API key once, list,
look at, change its quota, priority ceiling, weight and budget, delete it (refused
with 409 while any of its jobs is unfinished), and rotate its key (the old
one stops working at once; the new one is answered once). Each answer names
the tenant's data prefix; a new tenant's data folder is made with it (where
the data root is local).

`GET /v1/whoami` (any key): the caller's own tenant, data prefix, quota and
what it uses of it now."""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Response

from api.schemas.errors import ErrorPublic
from api.schemas.tenants import (
    TenantCreate,
    TenantKey,
    TenantPublic,
    TenantQuota,
    TenantsPublic,
    TenantUpdate,
    TenantUsageNow,
    WhoamiPublic,
)
from api.server.audit import Audit
from api.server.deps import CurrentTenant, SettingsDep, StoreDep, ViewsDep, require_admin
from api.server.errors import not_found
from service.intake.data_access import data_prefix
from service.intake.tenant_data import TenantData
from service.store import TenantRecord
from service.store.tenants import ADMIN_TENANT, KEEP, full_quota
from workers.schema import MAX_PRIORITY

_TENANT_ID = re.compile(r"^t-[0-9a-f]{1,30}$")

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorPublic} for code in (401, 403, 404, 409, 413, 422, 429)
}
router = APIRouter(prefix="/v1/tenants", tags=["tenants"], responses=ERRORS,
                   dependencies=[Depends(require_admin)])
whoami_router = APIRouter(prefix="/v1/whoami", tags=["tenants"], responses=ERRORS)


def _tenant(tenant_id: Annotated[str, Path()], store: StoreDep) -> TenantRecord:
    tenant = store.tenants.get(tenant_id) if _TENANT_ID.match(tenant_id) else None
    if tenant is None:
        raise not_found("tenant", tenant_id)
    return tenant


PathTenant = Annotated[TenantRecord, Depends(_tenant)]


@router.post("", status_code=201)
def create_tenant(body: TenantCreate, store: StoreDep, settings: SettingsDep,
                  audit: Audit) -> TenantKey:
    """A new tenant and its API key: the key is shown here only, keep it. Its
    data folder (`data_prefix`) is made now where the data root is local."""
    tenant, key = store.tenants.create(
        body.name, quota=body.quota.model_dump(), max_priority=body.max_priority, weight=body.weight,
        budget=body.budget.model_dump() if body.budget else None,
    )
    root = settings.resolved_data_uri_root
    TenantData(root, tenant.name).make_folder()
    audit("tenant.create", target=tenant.id, tenant=tenant.name, quota=tenant.quota,
          max_priority=tenant.max_priority, weight=tenant.weight, budget=tenant.budget)
    return TenantKey(**_public(tenant, root).model_dump(), api_key=key)


@router.get("")
def list_tenants(store: StoreDep, settings: SettingsDep) -> TenantsPublic:
    tenants = store.tenants.list()
    root = settings.resolved_data_uri_root
    return TenantsPublic(items=[_public(t, root) for t in tenants], total=len(tenants))


@router.get("/{tenant_id}")
def get_tenant(tenant: PathTenant, settings: SettingsDep) -> TenantPublic:
    return _public(tenant, settings.resolved_data_uri_root)


@router.patch("/{tenant_id}")
def update_tenant(tenant: PathTenant, body: TenantUpdate, store: StoreDep, settings: SettingsDep,
                  audit: Audit) -> TenantPublic:
    quota = body.quota.model_dump(exclude_unset=True) if body.quota is not None else None
    budget = ((body.budget.model_dump() if body.budget else None)
              if "budget" in body.model_fields_set else KEEP)
    updated = store.tenants.update(tenant.id, quota=quota, max_priority=body.max_priority,
                                   weight=body.weight, budget=budget)
    audit("tenant.update", target=tenant.id, tenant=tenant.name,
          changed=body.model_dump(mode="json", exclude_unset=True),
          before={"quota": tenant.quota, "max_priority": tenant.max_priority,
                  "weight": tenant.weight, "budget": tenant.budget})
    return _public(updated, settings.resolved_data_uri_root)


@router.delete("/{tenant_id}", status_code=204, response_class=Response)
def delete_tenant(tenant: PathTenant, store: StoreDep, audit: Audit) -> Response:
    """Refused (409) while any of its jobs is unfinished; its finished jobs go with it."""
    store.tenants.delete(tenant.id)
    audit("tenant.delete", target=tenant.id, tenant=tenant.name)
    return Response(status_code=204)


@router.post("/{tenant_id}/keys", status_code=201)
def rotate_key(tenant: PathTenant, store: StoreDep, settings: SettingsDep,
               audit: Audit) -> TenantKey:
    """A new API key for the tenant (shown here only); the old one stops working now."""
    rotated, key = store.tenants.rotate_key(tenant.id)
    audit("tenant.rotate_key", target=tenant.id, tenant=tenant.name)  # never the key
    public = _public(rotated, settings.resolved_data_uri_root)
    return TenantKey(**public.model_dump(), api_key=key)


@whoami_router.get("")
def whoami(tenant: CurrentTenant, store: StoreDep, settings: SettingsDep,
           views: ViewsDep) -> WhoamiPublic:
    """Who this key is: its tenant (the admin key: `admin`), its data prefix
    (where `brigade data upload` puts files, and what a spec's `data.uri` must
    lie under), its quota, priority ceiling and weight, and what its jobs hold
    and wait for now; its budget, and what its jobs cost in the budget's
    current period."""
    record = None if tenant == ADMIN_TENANT else store.tenants.by_name(tenant)
    now = next((s for s in views.fair_shares() if s.tenant == tenant), None)
    spent, period_ends = views.budget_spent(tenant) or (None, None)
    return WhoamiPublic(
        tenant=tenant, tenant_id=record.id if record else None, admin=tenant == ADMIN_TENANT,
        data_prefix=data_prefix(settings.resolved_data_uri_root, tenant),
        quota=TenantQuota(**full_quota(record.quota if record else None)),
        max_priority=record.max_priority if record else MAX_PRIORITY,
        weight=record.weight if record else 1.0,
        budget=record.budget if record else None, budget_spent=spent,
        budget_period_ends=period_ends,
        usage=TenantUsageNow.model_validate(now) if now else TenantUsageNow(),
    )


def _public(tenant: TenantRecord, root: str) -> TenantPublic:
    return TenantPublic.model_validate(tenant).model_copy(
        update={"data_prefix": data_prefix(root, tenant.name)})
