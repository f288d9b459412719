"""The web dashboard's sign-in sessions.

A session id is 32 random bytes, handed to the browser once (in its cookie);
the store keeps only its sha256, the tenant it belongs to and `key_ref`, a
reference to the key it signed in with: for a tenant, the sha256 of its key
(the tenant row's own `key_hash`); for the admin, whatever reference the
caller passes (the API uses an HMAC of the admin key under the server's
secret). A session is live while it has not expired and its key is still
the tenant's current one: rotating a tenant's key (or deleting the tenant)
ends all of its sessions at once, with no second write.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from sqlalchemy import Engine, and_, delete, select
from sqlalchemy.orm import aliased

from service.store.engine import transaction
from service.store.models import DashboardSession, Tenant, utcnow
from service.store.tenants import ADMIN_TENANT


def session_hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class SessionStore:
    """Shares the job store's engines (`JobStore.sessions`)."""

    def __init__(self, reader: Engine, writer: Engine):
        self._reader, self._writer = reader, writer

    def create(self, tenant: str, key_ref: str, ttl_s: float) -> str:
        """A new session for `tenant`, live for `ttl_s` seconds: its id (shown this once).
        Expired sessions are cleared on the way."""
        session_id = secrets.token_urlsafe(32)
        now = utcnow()
        with transaction(self._writer) as session:
            session.execute(delete(DashboardSession).where(DashboardSession.expires_at <= now))
            session.add(DashboardSession(id_hash=session_hash(session_id), tenant=tenant,
                                         key_ref=key_ref, created_at=now,
                                         expires_at=now + timedelta(seconds=ttl_s)))
        return session_id

    def tenant_of(self, session_id: str, admin_ref: str) -> str | None:
        """The tenant of a live session, or None (unknown, expired, or its key
        rotated since). `admin_ref`: the admin key's current reference."""
        tenant = aliased(Tenant)
        query = (
            select(DashboardSession.tenant, DashboardSession.key_ref, tenant.key_hash)
            .outerjoin(tenant, and_(tenant.name == DashboardSession.tenant))
            .where(DashboardSession.id_hash == session_hash(session_id),
                   DashboardSession.expires_at > utcnow())
        )
        with transaction(self._reader) as session:
            row = session.execute(query).one_or_none()
        if row is None:
            return None
        current = admin_ref if row.tenant == ADMIN_TENANT else row.key_hash
        if current is None or not secrets.compare_digest(current, row.key_ref):
            return None
        return row.tenant

    def end(self, session_id: str) -> None:
        """Sign out: the session is gone (a no-op for an unknown one)."""
        with transaction(self._writer) as session:
            session.execute(delete(DashboardSession)
                            .where(DashboardSession.id_hash == session_hash(session_id)))
