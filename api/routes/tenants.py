"""Tenants (the admin key only): create one and get its API key once, list,
look at, change its quota, priority ceiling and weight, delete it (refused
with 409 while any of its jobs is unfinished), and rotate its key (the old
one stops working at once; the new one is answered once)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Response

from api.audit import Audit
from api.deps import StoreDep, require_admin
from api.errors import not_found
from api.schemas import ErrorPublic, TenantCreate, TenantKey, TenantPublic, TenantsPublic, TenantUpdate
from service.store import TenantRecord

_TENANT_ID = re.compile(r"^t-[0-9a-f]{1,30}$")

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorPublic} for code in (401, 403, 404, 409, 413, 422, 429)
}
router = APIRouter(prefix="/v1/tenants", tags=["tenants"], responses=ERRORS,
                   dependencies=[Depends(require_admin)])


def _tenant(tenant_id: Annotated[str, Path()], store: StoreDep):
    tenant = store.tenants.get(tenant_id) if _TENANT_ID.match(tenant_id) else None
    if tenant is None:
        raise not_found("tenant", tenant_id)
    return tenant


PathTenant = Annotated[TenantRecord, Depends(_tenant)]


@router.post("", status_code=201)
def create_tenant(body: TenantCreate, store: StoreDep, audit: Audit) -> TenantKey:
    """A new tenant and its API key: the key is shown here only, keep it."""
    tenant, key = store.tenants.create(
        body.name, quota=body.quota.model_dump(), max_priority=body.max_priority, weight=body.weight,
    )
    audit("tenant.create", target=tenant.id, tenant=tenant.name, quota=tenant.quota,
          max_priority=tenant.max_priority, weight=tenant.weight)
    return _with_key(tenant, key)


@router.get("")
def list_tenants(store: StoreDep) -> TenantsPublic:
    tenants = store.tenants.list()
    return TenantsPublic(items=[TenantPublic.model_validate(t) for t in tenants], total=len(tenants))


@router.get("/{tenant_id}")
def get_tenant(tenant: PathTenant) -> TenantPublic:
    return TenantPublic.model_validate(tenant)


@router.patch("/{tenant_id}")
def update_tenant(tenant: PathTenant, body: TenantUpdate, store: StoreDep,
                  audit: Audit) -> TenantPublic:
    quota = body.quota.model_dump(exclude_unset=True) if body.quota is not None else None
    updated = store.tenants.update(tenant.id, quota=quota, max_priority=body.max_priority,
                                   weight=body.weight)
    audit("tenant.update", target=tenant.id, tenant=tenant.name,
          changed=body.model_dump(mode="json", exclude_unset=True),
          before={"quota": tenant.quota, "max_priority": tenant.max_priority,
                  "weight": tenant.weight})
    return TenantPublic.model_validate(updated)


@router.delete("/{tenant_id}", status_code=204, response_class=Response)
def delete_tenant(tenant: PathTenant, store: StoreDep, audit: Audit) -> Response:
    """Refused (409) while any of its jobs is unfinished; its finished jobs go with it."""
    store.tenants.delete(tenant.id)
    audit("tenant.delete", target=tenant.id, tenant=tenant.name)
    return Response(status_code=204)


@router.post("/{tenant_id}/keys", status_code=201)
def rotate_key(tenant: PathTenant, store: StoreDep, audit: Audit) -> TenantKey:
    """A new API key for the tenant (shown here only); the old one stops working now."""
    rotated, key = store.tenants.rotate_key(tenant.id)
    audit("tenant.rotate_key", target=tenant.id, tenant=tenant.name)  # never the key
    return _with_key(rotated, key)


def _with_key(tenant: TenantRecord, key: str) -> TenantKey:
    return TenantKey(**TenantPublic.model_validate(tenant).model_dump(), api_key=key)
