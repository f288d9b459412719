"""The audit trail: who did what to which job or tenant, when, from where.

One row per action that changed something (a job submitted, cancelled,
suspended, resumed, deleted or exported; a tenant created, changed, deleted
or its key rotated): the actor (a tenant's name, or "admin"), the tenant the
action concerns, the action (`job.submit`, `tenant.rotate_key`, ...), its
target (a job or tenant id), a small JSON detail and the client's address.
Rows are only ever added; the admin reads them newest first, filtered.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, func, or_, select

from service.store.engine import transaction
from service.store.models import (
    AUDIT_ACTION_LENGTH,
    AUDIT_CLIENT_LENGTH,
    AUDIT_TARGET_LENGTH,
    TENANT_LENGTH,
    AuditEvent,
    utcnow,
)
from service.store.records import AuditRecord

MAX_DETAIL_BYTES = 4096  # a detail is a few fields, never a payload (a job spec is not kept whole)


class AuditStore:
    """Shares the job store's engines (`JobStore.audit`)."""

    def __init__(self, reader: Engine, writer: Engine):
        self._reader, self._writer = reader, writer
        self.replica: str | None = None  # the replica this process is (`JobStore.replica`)

    def record(self, *, actor: str, action: str, tenant: str | None = None,
               target: str | None = None, detail: dict[str, Any] | None = None,
               client: str | None = None) -> AuditRecord:
        row = AuditEvent(
            time=utcnow(), actor=actor[:TENANT_LENGTH], action=action[:AUDIT_ACTION_LENGTH],
            tenant=None if tenant is None else tenant[:TENANT_LENGTH],
            target=None if target is None else target[:AUDIT_TARGET_LENGTH],
            detail=small_detail(detail or {}),
            client=None if client is None else client[:AUDIT_CLIENT_LENGTH],
            replica=self.replica,
        )
        with transaction(self._writer) as session:
            session.add(row)
            session.flush()
            return row.to_record()

    def list(self, *, tenant: str | None = None, action: str | None = None,
             target: str | None = None, since: datetime | None = None,
             limit: int = 50, offset: int = 0) -> tuple[list[AuditRecord], int]:
        """A page of the trail, newest first, and how many rows match.
        `tenant` matches the actor or the tenant concerned; `action` is exact,
        or a prefix when it ends with '.' (`job.`: every job action)."""
        query = select(AuditEvent)
        if tenant is not None:
            query = query.where(or_(AuditEvent.actor == tenant, AuditEvent.tenant == tenant))
        if action is not None:
            query = query.where(AuditEvent.action.startswith(action, autoescape=True)
                                if action.endswith(".") else AuditEvent.action == action)
        if target is not None:
            query = query.where(AuditEvent.target == target)
        if since is not None:
            query = query.where(AuditEvent.time >= since)
        with transaction(self._reader) as session:
            total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
            rows = session.scalars(query.order_by(AuditEvent.id.desc()).limit(limit).offset(offset))
            return [row.to_record() for row in rows], total


def small_detail(detail: dict[str, Any]) -> dict[str, Any]:
    """The detail as JSON can hold it, cut to MAX_DETAIL_BYTES (then only a
    note that it was): an audit row stays small whatever the caller passes."""
    text = json.dumps(detail, default=str, sort_keys=True)
    if len(text.encode()) > MAX_DETAIL_BYTES:
        return {"truncated": True, "keys": sorted(str(k) for k in detail)[:50]}
    return json.loads(text)
