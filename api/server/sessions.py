"""The dashboard's sign-in: an API key becomes a server-side session
(`service.store.sessions`) behind a cookie, and every state-changing request
made with that cookie carries a CSRF token bound to the session.

    cookie  brigade_session=<id>; HttpOnly; SameSite=Strict; Path=/  (Secure under https)
    header  X-CSRF-Token: HMAC(server secret, "csrf:" + id)  on POST, PATCH, PUT, DELETE

The token is derived, not stored: another session's token never matches, and
it reveals nothing of the session id. `api.server.deps` reads both, on the same code
path as a Bearer key. The key itself is never kept: a tenant's session refers
to the sha256 the tenant row holds, the admin's to an HMAC of the admin key,
so a rotated (or changed) key ends its sessions.
"""

from __future__ import annotations

import hashlib
import hmac

from fastapi import Request, Response

from service.store.tenants import ADMIN_TENANT, key_hash

COOKIE = "brigade_session"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class DashboardSessions:
    def __init__(self, store, secret: str, admin_key: str, ttl_s: float):
        self._store, self._secret, self.ttl_s = store, secret.encode(), ttl_s
        self._admin_ref = self._mac("admin-key:" + admin_key)

    def start(self, tenant: str, key: str) -> str:
        """A session for `tenant`, signed in with `key` (already checked): its id."""
        ref = self._admin_ref if tenant == ADMIN_TENANT else key_hash(key)
        return self._store.sessions.create(tenant, ref, self.ttl_s)

    def tenant_of(self, session_id: str) -> str | None:
        if not session_id or len(session_id) > 128:
            return None
        return self._store.sessions.tenant_of(session_id, self._admin_ref)

    def end(self, session_id: str) -> None:
        self._store.sessions.end(session_id)

    def csrf_token(self, session_id: str) -> str:
        return self._mac("csrf:" + session_id)

    def csrf_ok(self, session_id: str, token: str) -> bool:
        return hmac.compare_digest(self.csrf_token(session_id).encode(), token.encode())

    def set_cookie(self, request: Request, response: Response, session_id: str) -> None:
        response.set_cookie(COOKIE, session_id, max_age=int(self.ttl_s), path="/", httponly=True,
                            samesite="strict", secure=request.url.scheme == "https")

    @staticmethod
    def clear_cookie(request: Request, response: Response) -> None:
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict",
                               secure=request.url.scheme == "https")

    def _mac(self, text: str) -> str:
        return hmac.new(self._secret, text.encode(), hashlib.sha256).hexdigest()
