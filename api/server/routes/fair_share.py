"""Each tenant's fair share and quota use, as of the latest scheduling pass
(`service.observability.fair_share_view`) and where its data goes: the admin
sees every tenant, a tenant itself."""

from __future__ import annotations

from fastapi import APIRouter

from api.schemas.tenants import TenantSharePublic, TenantSharesPublic
from api.server.deps import CurrentTenant, SettingsDep, ViewsDep
from api.server.routes.jobs import ERRORS
from service.intake.data_access import data_prefix
from service.store.tenants import ADMIN_TENANT

router = APIRouter(prefix="/v1/cluster", tags=["cluster"], responses=ERRORS)


@router.get("/tenants")
def tenant_shares(tenant: CurrentTenant, views: ViewsDep, settings: SettingsDep) -> TenantSharesPublic:
    rows = [s for s in views.fair_shares() if tenant in (ADMIN_TENANT, s.tenant)]
    root = settings.resolved_data_uri_root
    return TenantSharesPublic(items=[
        TenantSharePublic.model_validate(s).model_copy(update={"data_prefix": data_prefix(root, s.tenant)})
        for s in rows])
