"""Refuse a request body over the limit without reading it all.

A declared `Content-Length` over the limit is answered 413 at once, before
the app runs or a byte of the body is read. A body without one (chunked) is
counted as the app reads it; the read that crosses the limit raises a 413,
so at most the limit plus one chunk is ever held.

A path prefix may have a limit of its own (`PUT /v1/data/...`: an upload,
streamed to storage, up to BRIGADE_MAX_UPLOAD_BYTES); the refusal names the
setting.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.server.errors import error_response


class BodyTooLarge(HTTPException):
    field = "body"

    def __init__(self, limit: int, setting: str = "BRIGADE_MAX_BODY_BYTES"):
        super().__init__(413, f"body: request body over the limit of {limit} bytes ({setting})")


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int,
                 by_prefix: Mapping[str, tuple[int, str]] | None = None):
        """`by_prefix`: path prefix -> (its limit, the setting that sets it)."""
        self.app, self.max_bytes = app, max_bytes
        self.by_prefix = dict(by_prefix or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit, setting = self._limit(scope.get("path", ""))
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            refusal = BodyTooLarge(limit, setting)
            response = error_response(413, refusal.detail, refusal.field, headers={"Connection": "close"})
            return await response(scope, receive, send)
        await self.app(scope, self._counting(receive, limit, setting), send)

    def _limit(self, path: str) -> tuple[int, str]:
        for prefix, (limit, setting) in self.by_prefix.items():
            if path.startswith(prefix):
                return limit, setting
        return self.max_bytes, "BRIGADE_MAX_BODY_BYTES"

    def _counting(self, receive: Receive, limit: int, setting: str) -> Receive:
        seen = 0

        async def receive_counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit, setting)
            return message

        return receive_counted
