"""The dashboard's sign-in (`api.server.routes.ui`, `api.server.sessions`):
an API key in, the session's tenant and lifetime out."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from api.schemas.base import Request


class SessionCreate(Request):
    api_key: Annotated[str, Field(min_length=1, max_length=512)]


class SessionPublic(BaseModel):
    tenant: str
    expires_in_s: float
