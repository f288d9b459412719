"""Refuse a request body over the limit without reading it all.

A declared `Content-Length` over the limit is answered 413 at once, before
the app runs or a byte of the body is read. A body without one (chunked) is
counted as the app reads it; the read that crosses the limit raises a 413,
so at most the limit plus one chunk is ever held.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_response


class BodyTooLarge(HTTPException):
    field = "body"

    def __init__(self, limit: int):
        super().__init__(413, f"body: request body over the limit of {limit} bytes")


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            refusal = BodyTooLarge(self.max_bytes)
            response = error_response(413, refusal.detail, refusal.field, headers={"Connection": "close"})
            return await response(scope, receive, send)
        await self.app(scope, self._counting(receive), send)

    def _counting(self, receive: Receive) -> Receive:
        seen = 0

        async def receive_counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        return receive_counted
