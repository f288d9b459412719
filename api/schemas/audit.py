"""The audit trail as the admin reads it (`GET /v1/audit`,
`api.server.routes.audit`), newest first."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from api.schemas.base import Public


class AuditEventPublic(Public):
    """One action of the audit trail: who (a tenant's name, or "admin"), when,
    what (`action` on `target`, `detail`), concerning which tenant, from where."""

    id: int
    time: datetime
    actor: str
    tenant: str | None = None
    action: str
    target: str | None = None
    detail: dict = Field(default_factory=dict)
    client: str | None = None
    replica: str | None = None  # the control-plane replica that recorded it


class AuditPublic(BaseModel):
    items: list[AuditEventPublic]  # newest first
    total: int
    limit: int
    offset: int
