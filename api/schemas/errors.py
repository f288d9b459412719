"""The one shape of every error the API answers (`api.server.errors`):
`{"error": {"message": ..., "field": ...}}`."""

from __future__ import annotations

from pydantic import BaseModel


class ErrorBody(BaseModel):
    message: str
    field: str | None = None  # the offending field's dotted path, where there is one


class ErrorPublic(BaseModel):
    """Every error the API returns, whatever the status."""

    error: ErrorBody
