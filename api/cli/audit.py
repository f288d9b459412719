"""`brigade audit`: the admin reads the audit trail (who did what to which
job or tenant, when, from where), newest first, filtered like `GET /v1/audit`."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated

import typer

from api.cli.output import Output, OutputFormat, emit, or_dash, when
from api.cli.remote import Key, Url, connect


def audit(
    tenant: Annotated[str | None, typer.Option(help="by this tenant, or concerning it")] = None,
    action: Annotated[str | None, typer.Option(
        help="e.g. job.cancel; ending with '.' a prefix (job.: every job action)")] = None,
    target: Annotated[str | None, typer.Option(help="a job's or a tenant's id")] = None,
    since: Annotated[datetime | None, typer.Option(
        formats=["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d %H:%M:%S%z", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"],
        help="from then on (ISO 8601; UTC unless a zone is given)")] = None,
    limit: int = 50,
    offset: int = 0,
    output: Output = OutputFormat.table,
    url: Url = None,
    key: Key = None,
) -> None:
    """The audit trail, newest first (the admin key only)."""
    with connect(url, key) as client:
        page = client.audit(tenant=tenant, action=action, target=target, since=since,
                            limit=limit, offset=offset)
    emit(page, output, lambda: (
        ("TIME", "ACTOR", "ACTION", "TARGET", "TENANT", "CLIENT", "DETAIL"),
        [(when(e.time), e.actor, e.action, or_dash(e.target), or_dash(e.tenant), or_dash(e.client),
          json.dumps(e.detail, sort_keys=True)[:80]) for e in page.items]))
    if output is OutputFormat.table and page.total > page.offset + len(page.items):
        typer.echo(f"({page.total} in all; --offset {page.offset + len(page.items)} for more)", err=True)
