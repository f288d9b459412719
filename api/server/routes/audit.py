"""The audit trail (the admin key only): who did what to which job or
tenant, when and from where, newest first, paged and filtered. Written by
`api.server.audit` from the routes that change something."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from pydantic import BeforeValidator

from api.schemas.audit import AuditEventPublic, AuditPublic
from api.server.deps import StoreDep, require_admin
from api.server.errors import ApiError
from api.server.routes.jobs import ERRORS, MAX_INDEX, MAX_PAGE

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:inf|infinity|nan)", re.I)
router = APIRouter(prefix="/v1/audit", tags=["audit"], responses=ERRORS,
                   dependencies=[Depends(require_admin)])


def _a_time_not_a_number(value: object) -> object:
    """A time as the document says (a date-time string), not a number pydantic
    would take for a POSIX time."""
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        raise ValueError("give an ISO 8601 time with a zone (e.g. 2026-12-01T09:00:00Z), "
                         "not a number")
    return value


@router.get("")
def list_audit(
    store: StoreDep,
    tenant: Annotated[str | None, Query(
        min_length=1, max_length=128,
        description="actions by this tenant, or concerning it (its jobs, its record)")] = None,
    action: Annotated[str | None, Query(
        min_length=1, max_length=32,
        description="e.g. job.cancel; ending with '.' a prefix: job. for every job action")] = None,
    target: Annotated[str | None, Query(
        min_length=1, max_length=128, description="a job's or a tenant's id")] = None,
    since: Annotated[datetime | None, BeforeValidator(_a_time_not_a_number), Query(
        description="ISO 8601 with a zone (e.g. 2026-12-01T09:00:00Z): from then on")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_INDEX)] = 0,
) -> AuditPublic:
    """A page of the audit trail, newest first, with how many rows match."""
    if since is not None and since.tzinfo is None:
        raise ApiError(422, "since: give a time zone (e.g. 2026-12-01T09:00:00Z)", "since")
    items, total = store.audit.list(tenant=tenant, action=action, target=target, since=since,
                                    limit=limit, offset=offset)
    return AuditPublic(items=[AuditEventPublic.model_validate(r) for r in items],
                       total=total, limit=limit, offset=offset)
